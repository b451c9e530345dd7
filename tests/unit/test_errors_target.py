"""Malformed programs that no GPU target can run as written, refused when compiling for it
instead of in nvcc (or, for partial warps, silently on the GPU): atomics on element types the
atomic does not have (passes/infer_instructions.py), a gemm B operand outside shared memory, and
reductions that shuffle inside a warp of a block that is not whole warps. The errors come
from the passes every GPU target runs, so the emulators (the same passes, no nvcc) show them;
the supported types are built with nvcc where it is installed."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc
from tilecraft.backends.cuda.schedule.infer_instructions import ATOMIC_DTYPES, atomic_unsupported

from error_expect import expect

TARGETS = ["emulator", "emulator:sm_90a"]


def scalar_atomic(kind, dtype, target):
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), dtype), B: T.Tensor((32,), dtype)):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    getattr(T, f"atomic_{kind}")(B[i], A[i])  # <- here
        tilecraft.compile(main, target=target)
    return program


# --- atomics ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int8", "uint16", "bool", "int16", "uint8"])
def test_atomic_add_of_narrow_types(target, dtype):
    arch = "sm_90a" if target.endswith("sm_90a") else "sm_80"
    expect(scalar_atomic("add", dtype, target),
           f"T.atomic_add into B: {arch} has no atomic add of {dtype} (it takes float32, "
           "float64, float16, bfloat16, int32, uint32)", "getattr(T")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_atomic_max_and_min_of_16_bit_floats(target, kind, dtype):
    err = expect(scalar_atomic(kind, dtype, target),
                 f"has no atomic {kind} of {dtype}", "getattr(T")
    assert "keep the values in a float32 tensor" in err.message


def test_atomic_add_of_64_bit_integers():
    expect(scalar_atomic("add", "int64", "emulator"),
           "sm_80 has no atomic add of int64 (it takes float32, float64, float16, bfloat16, "
           "int32, uint32): use int32", "getattr(T")


def test_atomic_max_of_uint64():
    expect(scalar_atomic("max", "uint64", "emulator:sm_90a"),
           "sm_90a has no atomic max of uint64", "getattr(T")


def test_atomic_add_of_fp8():
    expect(scalar_atomic("add", "float8_e4m3", "emulator"),
           "has no atomic add of float8_e4m3", "getattr(T")


def test_tile_atomic_add_of_an_int8_fragment():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16, 16), "int8"), B: T.Tensor((16, 16), "int8")):
            with T.Kernel(1, threads=64) as bx:
                f = T.alloc_fragment((16, 16), "int8")
                T.copy(A, f)
                T.atomic_add(B, f)  # <- here
        tilecraft.compile(main, target="emulator")
    expect(program, "T.atomic_add into B: sm_80 has no atomic add of int8", "T.atomic_add(")


def test_atomic_max_into_a_shared_int16_tile():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "int16"), B: T.Tensor((32,), "int16")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((32,), "int16")
                T.fill(s, 0)
                for i in T.Parallel(32):
                    T.atomic_max(s[i % 4], A[i])  # <- here
                T.copy(s, B)
        tilecraft.compile(main, target="emulator:sm_90a")
    expect(program, "T.atomic_max into s: sm_90a has no atomic max of int16", "T.atomic_max(")


def test_atomic_table_by_architecture():
    assert atomic_unsupported("add", "bfloat16", "sm_80") is None
    assert atomic_unsupported("add", "float32", "sm_90a") is None
    assert "needs sm_80 or newer, not sm_75" in atomic_unsupported("add", "bfloat16", "sm_75")
    assert "needs sm_60 or newer" in atomic_unsupported("add", "float64", "sm_52")
    assert atomic_unsupported("max", "float16", "sm_90a") is not None


def every_supported_atomic(kind):
    """One kernel with an atomic `kind` into a tensor of each supported dtype."""
    d = list(ATOMIC_DTYPES[kind])
    op = getattr(T, f"atomic_{kind}")

    @T.prim_func
    def main(P0: T.Tensor((4,), d[0]), P1: T.Tensor((4,), d[1]), P2: T.Tensor((4,), d[2]),
             P3: T.Tensor((4,), d[3]), P4: T.Tensor((4,), d[4]), P5: T.Tensor((4,), d[-1])):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                for P in (P0, P1, P2, P3, P4, P5):
                    op(P[i % 4], i % 7)
    return main


@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_supported_atomics_run_on_the_emulator(kind):
    assert 5 <= len(ATOMIC_DTYPES[kind]) <= 6  # the kernel has a tensor of each
    kernel = tilecraft.compile(every_supported_atomic(kind), target="emulator")
    tensors = [np.full(4, 3, dtype=np.dtype(tilecraft.ir.dtypes.dtype(d).numpy))
               for d in list(ATOMIC_DTYPES[kind])[:5] + [list(ATOMIC_DTYPES[kind])[-1]]]
    kernel(*tensors)
    values = np.arange(32) % 7
    folded = {"add": lambda r: 3 + values[np.arange(32) % 4 == r].sum(),
              "max": lambda r: max(3, values[np.arange(32) % 4 == r].max()),
              "min": lambda r: min(3, values[np.arange(32) % 4 == r].min())}[kind]
    for t in tensors:
        np.testing.assert_array_equal(t.astype(np.float64), [folded(r) for r in range(4)])


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kind", ["add", "max"])
def test_supported_atomics_compile(arch, kind):
    assert tilecraft.compile(every_supported_atomic(kind), target=arch).n_regs > 0


# --- gemm operands ----------------------------------------------------------------------------

def gemm_with_b_in(scope, target, transpose_B=False):
    def program():
        b_shape = (64, 32) if transpose_B else (32, 64)

        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor(b_shape, "float16"),
                 C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_shared((64, 32), "float16")
                b = T.alloc_buffer(b_shape, "float16", scope=scope)
                c = T.alloc_fragment((64, 64), "float32")
                T.copy(A, a)
                T.copy(B, b)
                T.gemm(a, b, c, transpose_B=transpose_B, clear_accum=True)  # <- here
                T.copy(c, C)
        tilecraft.compile(main, target=target)
    return program


def test_gemm_b_in_a_local_buffer():
    expect(gemm_with_b_in("local", "emulator"),
           "T.gemm: operand B (b) is in local memory", "T.gemm(")


def test_gemm_b_in_registers_runs_on_the_interpreter():
    # The interpreter computes the tile op itself: only the tensor-core paths need B shared.
    gemm_with_b_in("local.fragment", "interp")()


# --- reductions in partial warps ---------------------------------------------------------------

def reduction(kind, threads, target, shape=(4, 64)):
    def program():
        @T.prim_func
        def main(A: T.Tensor(shape, "float32"), B: T.Tensor((shape[0],), "float32")):
            with T.Kernel(1, threads=threads) as bx:
                f = T.alloc_fragment(shape, "float32")
                r = T.alloc_fragment((shape[0],), "float32")
                T.copy(A, f)
                getattr(T, f"reduce_{kind}")(f, r, dim=1)  # <- here
                T.copy(r, B)
        return tilecraft.compile(main, target=target)
    return program


@pytest.mark.parametrize("target", TARGETS)
def test_reduction_with_48_threads(target):
    expect(reduction("sum", 48, target),
           "T.reduce_sum of f combines the threads of a warp with shuffles, which need whole "
           "warps, but the block has 48 threads: use a multiple of 32", "getattr(T")


def test_reduction_with_less_than_a_warp():
    expect(reduction("max", 16, "emulator"), "the block has 16 threads", "getattr(T")


def test_reduction_with_a_2d_block_of_partial_warps():
    expect(reduction("min", (16, 3), "emulator"), "the block has 48 threads", "getattr(T")


def test_reduction_with_whole_warps_runs():
    a = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    b = np.zeros(4, np.float32)
    reduction("sum", 64, "emulator")()(a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5)



@pytest.mark.parametrize("target", TARGETS + ["interp"])
def test_reduction_of_a_row_into_one_element_runs(target):
    # The lowering asked the one-element result's layout for a register with no index.
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            row = T.alloc_fragment((64,), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.copy(A, row)
            T.reduce_max(row, total, dim=0)
            T.copy(total, B)
    a = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    b = np.zeros(1, np.float32)
    tilecraft.compile(main, target=target)(a, b)
    assert b[0] == a.max()
