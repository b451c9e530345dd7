"""Role branches on the thread index (`if tx < 128: ... elif tx < 256: ... else: ...`) holding
tile operators are warpgroup regions, as TileLang's hand-specialized kernels write them: a
producer warpgroup copies tiles with hand-written cp.async (T.ptx_cp_async with T.access_ptr)
that signal an mbarrier on landing (T.cp_async_barrier_noinc), and moves registers
(T.set_max_nreg); consumer warpgroups multiply with T.wgmma_gemm / T.wait_wgmma and clear
their accumulator under a run-time condition. Checked on the interpreter and the emulators
against numpy, and in the generated sm_90a source; a branch splitting a warpgroup is refused.
"""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError


def role_branches(M=64, N=128, K=96, bk=32):
    """Warpgroup 2 loads the A and B tiles of each step by cp.async (16 bytes a thread, 8
    halves of a row); warpgroups 0 and 1 each multiply into their own half of C's columns.
    Two mbarriers pass the one tile pair back and forth."""
    half = N // 2

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=384):
            A_s = T.alloc_shared((M, bk), "float16")
            B_s = T.alloc_shared((bk, N), "float16")
            acc_l = T.alloc_fragment((M, half), "float32")
            acc_r = T.alloc_fragment((M, half), "float32")
            ready = T.alloc_barrier(arrive_count=128)
            free = T.alloc_barrier(arrive_count=256)
            tx = T.get_thread_binding()
            T.fence_proxy_async()
            if tx < 128:
                T.set_max_nreg(240, 1)
                for ko in T.serial(K // bk):
                    T.barrier_wait(ready, ko % 2)
                    T.wgmma_gemm(A_s, B_s[:, 0:half], acc_l, clear_accum=(ko == 0))
                    T.wait_wgmma(0)
                    T.barrier_arrive(free)
                T.copy(acc_l, C[0:M, 0:half])
            elif tx < 256:
                T.set_max_nreg(240, 1)
                for ko in T.serial(K // bk):
                    T.barrier_wait(ready, ko % 2)
                    T.gemm(A_s, B_s[:, half:N], acc_r, clear_accum=(ko == 0))
                    T.barrier_arrive(free)
                T.copy(acc_r, C[0:M, half:N])
            else:
                T.set_max_nreg(40, 0)
                p = tx - 256
                for ko in T.serial(K // bk):
                    T.barrier_wait(free, (ko + 1) % 2)
                    for r in T.serial(M * bk // 8 // 128):
                        row, col = (r * 128 + p) // (bk // 8), (r * 128 + p) % (bk // 8) * 8
                        T.ptx_cp_async(T.access_ptr(A_s[row, col], "w", 8),
                                       T.access_ptr(A[row, ko * bk + col], "r", 8), 8)
                    for r in T.serial(bk * N // 8 // 128):
                        row, col = (r * 128 + p) // (N // 8), (r * 128 + p) % (N // 8) * 8
                        T.ptx_cp_async(T.access_ptr(B_s[row, col], "w", 8),
                                       T.access_ptr(B[ko * bk + row, col], "r", 8), 8)
                    T.cp_async_barrier_noinc(ready)
    return main


def operands(M=64, N=128, K=96, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (M, K)).astype(np.float16),
            rng.uniform(-1, 1, (K, N)).astype(np.float16))


@pytest.mark.parametrize("target", ["emulator:sm_90a", "emulator"])
def test_role_branches_multiply(target):
    """The emulators run the warpgroups at once (the interpreter runs regions in program order,
    where the consumers' first wait has no producer before it); the race checker follows the
    mbarrier hand-offs, and wgmma's reads of tiles cp.async filled need the proxy fence the
    compiler puts before them."""
    a, b = operands()
    c = np.full((64, 128), np.nan, np.float32)
    func = role_branches()
    if target == "emulator":
        with pytest.raises(TileError, match="T.set_max_nreg is setmaxnreg, which exists on "
                                            "sm_90a only"):
            tilecraft.compile(func, target=target)
        return
    kernel = tilecraft.compile(func, target=target)
    kernel(a, b, c)
    assert kernel.reports == []
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3,
                               atol=2e-3)


def test_what_the_branches_become():
    from tilecraft.backends.cuda import pipeline
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    text = emit_cuda(pipeline.lower(role_branches(), "sm_90a"))[0]
    # one if / else-if chain on the warpgroup, each arm its own registers
    assert "if (tc::warpgroup_index() == 0) {" in text
    assert "} else {\n" in text and "if (tc::warpgroup_index() == 1) {" in text
    assert text.count("tc::setmaxnreg_inc<240>();") == 2
    assert "tc::setmaxnreg_dec<40>();" in text
    assert "tc::cp_async_cg_16((&A_s[" in text and "tc::cp_async_mbarrier_arrive_noinc(" in text
    assert "tc::fence_proxy_async_shared();" in text
    # before each wgmma gemm of the tiles the producer's cp.async filled
    assert text.count("tc::fence_proxy_async_shared();\n") >= 2


def test_a_branch_that_splits_a_warpgroup_is_refused():
    with pytest.raises(TileError, match=r"T.Parallel runs under `if tx < 32`, which differs "
                                        r"between threads \(an `if` on the thread index whose "
                                        r"arms select whole warpgroups"):
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=96):
                x = T.alloc_fragment((32,), "float32")
                if T.get_thread_binding() < 32:
                    for i in T.Parallel(32):
                        x[i] = A[i] * 2
                    T.copy(x, A)


def test_per_thread_code_under_a_thread_condition_stays_as_it_is():
    """No tile operator inside: the branch stays per-thread code (each thread its own store)."""
    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            if tx < 100:
                A[tx] = A[tx] + 1.0
            else:
                A[tx] = -1.0
    a = np.arange(256, dtype=np.float32)
    for target in ("interp", "emulator"):
        x = a.copy()
        tilecraft.compile(main, target=target)(x)
        np.testing.assert_array_equal(x, np.where(np.arange(256) < 100, a + 1, -1))


def test_a_fragment_only_per_thread_code_writes_is_per_thread():
    """Written with each thread's own values and touched by no tile op: each thread's copy."""
    @T.prim_func
    def main(A: T.Tensor((128, 4), "int32"), B: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            held = T.alloc_fragment((4,), "int32")
            for r in T.serial(4):
                held[r] = A[tx, r] * 2
            B[tx] = held[0] + held[1] + held[2] + held[3]
    a = np.random.default_rng(1).integers(-50, 50, (128, 4)).astype(np.int32)
    for target in ("interp", "emulator"):
        b = np.zeros(128, np.int32)
        tilecraft.compile(main, target=target)(a, b)
        np.testing.assert_array_equal(b, 2 * a.sum(1))


def test_a_fragment_one_thread_writes_for_all_stays_refused():
    """Written under `if tx == 0` with a value all threads share, it is meant for every
    thread: a per-thread copy would leave the others' unset, so it is refused as before."""
    with pytest.raises(TileError, match="fragment f is written under `if tx == 0`"):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                f = T.alloc_fragment((1,), "float32")
                if tx == 0:
                    f[0] = A[0]
                A[tx] = f[0]


def test_misuse_of_the_hand_written_copies():
    def program(kind):
        @T.prim_func
        def main(A: T.Tensor((64,), "float16")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((64,), "float16")
                if kind == "bytes":
                    T.ptx_cp_async(T.access_ptr(s[0], "w"), T.access_ptr(A[0], "r"), 3)
                elif kind == "direction":
                    T.ptx_cp_async(T.access_ptr(A[0], "w"), T.access_ptr(s[0], "r"), 8)
                else:
                    T.set_max_nreg(100, 1)
        return main
    for kind, message in (("bytes", "3 x float16 is 6 bytes; cp.async copies 4, 8 or 16"),
                          ("direction", "the destination must be in shared memory"),
                          ("regs", "a multiple of 8 in \\[24, 256\\], got 100")):
        with pytest.raises(TileError, match=message):
            program(kind)


def test_the_arms_tiles_do_not_share_bytes():
    """Tiles used in different arms are live at once (the arms run together): each its own
    bytes, where an ordinary `if` would let them share."""
    from tilecraft.backends.cuda import pipeline
    from tilecraft.ir.annotations import SMEM_OFFSETS

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            if tx < 128:
                a_s = T.alloc_shared((64, 64), "float16")
                T.copy(A, a_s)
                T.copy(a_s, A)
            else:
                b_s = T.alloc_shared((64, 64), "float16")
                T.copy(B, b_s)
                T.copy(b_s, B)
    offsets = sorted(pipeline.lower(main, "sm_90a").attrs[SMEM_OFFSETS].values())
    assert len(offsets) == 2 and offsets[0][0] + offsets[0][1] <= offsets[1][0]


def two_gemms_one_accumulator(H=64, N=64, D=256, P=64, kt=64):
    """In a warpgroup's arm, gemms of column slices of shared tiles (mma.sync: wgmma cannot
    address them) and one with A in registers accumulate into one fragment: they must agree on
    its layout over the warpgroup's 128 threads (the block's 256 made them seem to)."""
    @T.prim_func
    def main(Q: T.Tensor((H, D), "float16"), Qp: T.Tensor((H, P), "float16"),
             K: T.Tensor((N, D), "float16"), Kp: T.Tensor((N, P), "float16"),
             S: T.Tensor((H, N), "float32")):
        with T.Kernel(1, threads=256):
            q = T.alloc_shared((H, D), "float16")
            qp_s = T.alloc_shared((H, P), "float16")
            qp = T.alloc_fragment((H, P), "float16")
            k = T.alloc_shared((N, D), "float16")
            kp = T.alloc_shared((N, P), "float16")
            acc = T.alloc_fragment((H, N), "float32")
            T.copy(Q, q)
            T.copy(Qp, qp_s)
            T.copy(K, k)
            T.copy(Kp, kp)
            tx = T.get_thread_binding()
            if tx < 128:
                T.copy(qp_s, qp)
                for j in T.unroll(D // kt):
                    T.wgmma_gemm(q[:, j * kt:(j + 1) * kt], k[:, j * kt:(j + 1) * kt], acc,
                                 transpose_B=True, clear_accum=(j == 0))
                T.wgmma_gemm(qp, kp, acc, transpose_B=True)
                T.wait_wgmma(0)
                T.copy(acc, S)
    return main


def test_gemms_sharing_an_accumulator_in_an_arm():
    rng = np.random.default_rng(6)
    q, qp = (rng.uniform(-1, 1, s).astype(np.float16) for s in ((64, 256), (64, 64)))
    k, kp = (rng.uniform(-1, 1, s).astype(np.float16) for s in ((64, 256), (64, 64)))
    s = np.full((64, 64), np.nan, np.float32)
    kernel = tilecraft.compile(two_gemms_one_accumulator(), target="emulator:sm_90a")
    kernel(q, qp, k, kp, s)
    assert kernel.reports == []
    want = q.astype(np.float64) @ k.T.astype(np.float64) + qp.astype(np.float64) @ \
        kp.T.astype(np.float64)
    np.testing.assert_allclose(s, want, rtol=2e-3, atol=2e-3)


def test_reductions_of_concurrent_arms_keep_their_own_scratch():
    """Each arm sums columns across its warps through shared scratch at the same time as the
    other: their scratch bytes must not be shared (one region's barrier orders nothing of the
    other's)."""
    from tilecraft.backends.cuda import pipeline
    from tilecraft.ir.annotations import SMEM_ARENA, SMEM_OFFSETS
    from tilecraft.ir.stmt import Allocate
    from tilecraft.ir.visitor import walk

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), S: T.Tensor((2, 64), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            if tx < 128:
                f = T.alloc_fragment((64, 64), "float32")
                s = T.alloc_fragment((64,), "float32")
                T.copy(A, f)
                T.reduce_sum(f, s, dim=0)
                T.copy(s, S[0, :])
            else:
                g = T.alloc_fragment((64, 64), "float32")
                t = T.alloc_fragment((64,), "float32")
                T.copy(A, g)
                T.reduce_max(g, t, dim=0)
                T.copy(t, S[1, :])
    lowered = pipeline.lower(main, "sm_90a")
    planned, arena = lowered.attrs[SMEM_OFFSETS], lowered.attrs[SMEM_ARENA]
    scratch = [n.buffer for k in lowered.kernels() for n in walk(k.body)
               if isinstance(n, Allocate) and id(n.buffer) in arena and
               id(n.buffer) not in planned]
    assert len(scratch) >= 2 and len({arena[id(b)] for b in scratch}) == len(scratch)
    a = np.random.default_rng(8).standard_normal((64, 64)).astype(np.float32)
    out = np.full((2, 64), np.nan, np.float32)
    kernel = tilecraft.compile(main, target="emulator:sm_90a")
    kernel(a, out)
    assert kernel.reports == []
    np.testing.assert_allclose(out, np.stack([a.sum(0), a.max(0)]), rtol=1e-5, atol=1e-5)
