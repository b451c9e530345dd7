"""T.Parallel's options as TileLang has them: prefer_async (the nest's global -> shared runs
as cp.async, waited for after the nest, or by the program itself under the annotation
parallel_async_without_async_commit_wait), loop_layout (the iterations' threads as given) and
annotations (unknown keys refused). Run on the interpreter and both emulators (whose race
checker reports a cp.async no wait covers) against numpy, and compiled for sm_80 / sm_90a."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

N, D = 100, 64
TARGETS = ["interp", "emulator", "emulator:sm_90a"]


def gather(prefer=True, program_waits=False, wait=True, loop_layout=None):
    """Rows of K listed in Idx (past the end: zeros) into a shared tile, doubled."""
    ann = {"parallel_async_without_async_commit_wait": True} if program_waits else None

    @T.prim_func
    def main(K: T.Tensor((N, D), "float16"), Idx: T.Tensor((64,), "int32"),
             O: T.Tensor((64, D), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, D), "float16")
            f = T.alloc_fragment((64, D), "float16")
            for i, j in T.Parallel(64, D, prefer_async=prefer, annotations=ann):
                s[i, j] = T.if_then_else(Idx[i] < N, K[Idx[i], j], 0)
            if program_waits:
                T.ptx_commit_group()
                if wait:
                    T.ptx_wait_group(0)
            T.copy(s, f)
            for i, j in T.Parallel(64, D, loop_layout=loop_layout):
                f[i, j] = f[i, j] * 2
            T.copy(f, O)
    return main


def inputs():
    rng = np.random.default_rng(0)
    k = rng.standard_normal((N, D)).astype(np.float16)
    idx = rng.integers(0, N + 20, 64).astype(np.int32)   # some rows past the end
    want = np.where((idx < N)[:, None], k[np.minimum(idx, N - 1)], 0).astype(np.float32) * 2
    return k, idx, want


def run(func, target):
    k, idx, want = inputs()
    out = np.full((64, D), np.nan, np.float16)
    kernel = tilecraft.compile(func, target=target)
    kernel(k, idx, out)
    assert getattr(kernel, "reports", []) == []
    np.testing.assert_array_equal(out.astype(np.float32), want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("program_waits", [False, True])
def test_prefer_async_gather(program_waits, target):
    run(gather(program_waits=program_waits), target)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("program_waits", [False, True])
def test_prefer_async_issues_cp_async_and_one_wait(program_waits, arch):
    source = tilecraft.compile(gather(program_waits=program_waits),
                               target=arch).get_kernel_source()
    assert "cp_async_cg_16" in source
    assert source.count("cp_async_commit") == 1 and source.count("cp_async_wait") == 1
    plain = tilecraft.compile(gather(prefer=False), target=arch).get_kernel_source()
    assert "cp_async" not in plain


def test_a_copy_the_program_never_waits_for_is_reported():
    k, idx, _ = inputs()
    kernel = tilecraft.compile(gather(program_waits=True, wait=False), target="emulator")
    with pytest.raises(tilecraft.TileError, match="async-not-waited"):
        kernel(k, idx, np.zeros((64, D), np.float16))


@pytest.mark.parametrize("target", TARGETS)
def test_loop_layout_places_the_iterations(target):
    # element e = i * D + j on thread e % 128: rows interleaved over the threads
    given = T.Fragment((64, D), forward_fn=lambda i, j: ((i * D + j) % 128, (i * D + j) // 128))
    run(gather(loop_layout=given), target)


def test_loop_layout_reaches_the_generated_code():
    given = T.Fragment((64, D), forward_fn=lambda i, j: ((i * D + j) % 128, (i * D + j) // 128))
    with_layout = tilecraft.compile(gather(loop_layout=given), target="sm_80")
    inferred = tilecraft.compile(gather(), target="sm_80")
    assert with_layout.get_kernel_source() != inferred.get_kernel_source()


@pytest.mark.parametrize("kwargs,message", [
    (dict(annotations={"no_such_hint": 1}), "unknown annotation 'no_such_hint'"),
    (dict(annotations={"parallel_async_without_async_commit_wait": 1}), "takes True or False"),
    (dict(prefer_async="yes"), "prefer_async takes True or False"),
    (dict(loop_layout="row"), "loop_layout takes a T.Fragment"),
    (dict(loop_layout=T.Fragment((32, 8), forward_fn=lambda i, j: (i, j))),
     r"Fragment over \(32, 8\), but the nest's extents are \(64, 8\)"),
])
def test_bad_options_are_errors(kwargs, message):
    def build():
        @T.prim_func
        def main(A: T.Tensor((64, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i, j in T.Parallel(64, 8, **kwargs):
                    A[i, j] = 1.0
        return main
    with pytest.raises(tilecraft.TileError, match=message):
        build()


def unrolled_sum(factor):
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_local((1,), "float32")
            tx = T.get_thread_binding()
            acc[0] = 0.0
            for k in T.unroll(64, unroll_factor=factor):
                acc[0] += A[tx, k]
            B[tx] = acc[0]
    return main


def test_unroll_factor_reaches_the_pragma():
    main = unrolled_sum(4)
    source = tilecraft.compile(main, target="sm_80").get_kernel_source()
    assert "#pragma unroll 4" in source
    # the factor is part of the program the compile cache keys by
    assert "#pragma unroll 8" in tilecraft.compile(unrolled_sum(8),
                                                   target="sm_80").get_kernel_source()
    assert "#pragma unroll\n" in tilecraft.compile(unrolled_sum(None),
                                                   target="sm_80").get_kernel_source()
    a = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    b = np.zeros(128, np.float32)
    tilecraft.compile(main, target="emulator")(a, b)
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5, atol=1e-5)


def _loop_with(**options):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.unroll(64, **options):
                A[i] = 1.0
    return main


@pytest.mark.parametrize("options,message", [
    (dict(annotations={"pragma": 1}), r"T.unroll: annotations= \['pragma'\] are not supported"),
    (dict(unroll_factor=0), "unroll_factor takes an int >= 1"),
    (dict(explicit=True, unroll_factor=2), "takes no unroll_factor"),
])
def test_bad_unroll_options_are_errors(options, message):
    with pytest.raises(tilecraft.TileError, match=message):
        _loop_with(**options)


@pytest.mark.parametrize("call,message", [
    ("T.copy(A_s, B_s, prefer_instruction='tma')", "prefer_instruction='tma' is not supported"),
    ("T.copy(A_s, B_s, loop_layout=1)", "loop_layout=1 is not supported"),
    ("T.copy(A_s, B_s, annotations={'x': 1})", r"T.copy: annotations= \['x'\]"),
    ("T.gemm(A_s, B_s, C_f, mbar=1)", "mbar=1 is not supported yet .an mbarrier the tcgen05"),
    ("T.gemm(A_s, B_s, C_f, annotations={'y': 1})", r"T.gemm: annotations= \['y'\]"),
    ("T.cumsum(A_s, annotations={'z': 1})", r"T.cumsum: annotations= \['z'\]"),
    ("T.serial(4, annotations={'w': 1})", r"T.serial: annotations= \['w'\]"),
    ("T.vectorized(4, annotations={'v': 1})", r"T.vectorized: annotations= \['v'\]"),
])
def test_op_options_tilecraft_does_not_have_are_errors(call, message):
    namespace = {"T": T}
    source = f'''
@T.prim_func
def main(A: T.Tensor((64, 64), "float16")):
    with T.Kernel(1, threads=128) as bx:
        A_s = T.alloc_shared((64, 64), "float16")
        B_s = T.alloc_shared((64, 64), "float16")
        C_f = T.alloc_fragment((64, 64), "float32")
        {call}
'''
    path = "/tmp/tilecraft_option_case.py"
    with open(path, "w") as f:
        f.write(source)
    with pytest.raises(tilecraft.TileError, match=message):
        exec(compile(source, path, "exec"), namespace)


def pipelined_gather(prefer):
    @T.prim_func
    def main(K: T.Tensor((N, D), "float16"), Idx: T.Tensor((256,), "int32"),
             O: T.Tensor((64, D), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, D), "float16")
            q = T.alloc_shared((64, D), "float16")
            acc = T.alloc_fragment((64, D), "float32")
            T.clear(acc)
            for i, j in T.Parallel(64, D):
                q[i, j] = K[i, j]
            for t in T.Pipelined(4, num_stages=2):
                for i, j in T.Parallel(64, D, prefer_async=prefer):
                    s[i, j] = T.if_then_else(Idx[t * 64 + i] < N, K[Idx[t * 64 + i], j], 0)
                T.gemm(q, s, acc, transpose_B=True)
            T.copy(acc, O)
    return main


def test_prefer_async_in_a_pipelined_loop_leaves_the_waits_to_the_pipeline():
    """A gather the pipeline runs ahead is already issued as cp.async and waited for in its
    stages: prefer_async adds nothing there (a wait of the nest's own after it would make
    every step wait for the copies just issued for the next)."""
    main = pipelined_gather(True)
    source = tilecraft.compile(main, target="sm_80").get_kernel_source()
    assert "cp_async_cg_16" in source
    assert source == tilecraft.compile(pipelined_gather(False), target="sm_80").get_kernel_source()
    rng = np.random.default_rng(2)
    k = rng.standard_normal((N, D)).astype(np.float16)
    idx = rng.integers(0, N + 10, 256).astype(np.int32)
    rows = np.where((idx < N)[:, None], k[np.minimum(idx, N - 1)], 0).astype(np.float32)
    want = sum(k[:64].astype(np.float32) @ rows[t * 64:(t + 1) * 64].T for t in range(4))
    for target in TARGETS:
        out = np.full((64, D), np.nan, np.float32)
        kernel = tilecraft.compile(main, target=target)
        kernel(k, idx, out)
        assert getattr(kernel, "reports", []) == []
        np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2)
