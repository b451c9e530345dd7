"""Semantics of the reference interpreter: rounding, integer division, poison, bounds checks,
masked lanes, argument types, and the profiler's comparison."""
import inspect

import ml_dtypes
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft import TileError


def rng(seed=0):
    return np.random.default_rng(seed)


def run(func, *args, out_idx=-1):
    return tilecraft.compile(func, out_idx=out_idx)(*args)


def line_of(func, text):
    """The file line number of the first source line of func containing text."""
    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, l in enumerate(lines) if text in l)


@pytest.mark.parametrize("dtype, npdt", [("float16", np.float16),
                                         ("bfloat16", ml_dtypes.bfloat16),
                                         ("float8_e4m3", ml_dtypes.float8_e4m3fn),
                                         ("float8_e5m2", ml_dtypes.float8_e5m2)])
def test_narrow_float_stores_round(dtype, npdt):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32"),
             C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((64,), dtype)
            f = T.alloc_fragment((64,), dtype)
            for i in T.Parallel(64):
                s[i] = A[i] * 3.0            # computed in fp32, rounded when stored
            for i in T.Parallel(64):
                f[i] = s[i] + s[i] * 0.125   # narrow + narrow: rounded again
                B[i] = s[i]
            for i in T.Parallel(64):
                C[i] = f[i]
    a = rng(1).standard_normal(64).astype(np.float32)
    b, c = run(main, a, out_idx=[1, 2])
    s = (a * np.float32(3)).astype(npdt)
    s32 = s.astype(np.float32)
    np.testing.assert_array_equal(b, s32)
    want = (s32 + (s32 * np.float32(0.125)).astype(npdt).astype(np.float32)).astype(npdt)
    np.testing.assert_array_equal(c, want.astype(np.float32))
    assert not np.array_equal(b, a * 3)


def test_fp16_arithmetic_rounds_each_operation():
    @T.prim_func
    def main(A: T.Tensor((4,), "float16"), B: T.Tensor((4,), "float16")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                B[i] = A[i] + T.float16(1) - A[i]
    a = np.array([2048, 4096, 1, -4096], np.float16)
    # 2048 + 1 is 2048 in half precision (and -4096 + 1 is -4096), so the result is 0 there
    np.testing.assert_array_equal(run(main, a), ((a + np.float16(1)) - a).astype(np.float16))
    np.testing.assert_array_equal(run(main, a), [0, 0, 1, 0])


def test_integer_division_semantics():
    @T.prim_func
    def main(A: T.Tensor((40,), "int32"), B: T.Tensor((40,), "int32"),
             Q: T.Tensor((5, 40), "int32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(40):
                Q[0, i] = A[i] / B[i]
                Q[1, i] = A[i] // B[i]
                Q[2, i] = A[i] % B[i]
                Q[3, i] = T.int32(-7) / 2 + T.int32(-7) // 2 * 10 + T.int32(-7) % 3 * 100
                Q[4, i] = T.truncdiv(A[i], B[i])
    r = rng(2)
    a = r.integers(-100, 100, 40).astype(np.int32)
    b = r.choice([-9, -4, -1, 1, 3, 7], 40).astype(np.int32)
    q = run(main, a, b)
    trunc = (np.abs(a) // np.abs(b)) * np.sign(a) * np.sign(b)
    np.testing.assert_array_equal(q[0], trunc)
    np.testing.assert_array_equal(q[1], np.floor_divide(a, b))
    np.testing.assert_array_equal(q[2], np.mod(a, b))
    assert np.all(np.sign(q[2]) * np.sign(b) >= 0)  # % takes the divisor's sign
    np.testing.assert_array_equal(q[3], -3 + -4 * 10 + 2 * 100)
    np.testing.assert_array_equal(q[4], trunc)


def test_integer_division_by_zero_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((4,), "int32"), B: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                B[i] = 12 // A[i]
    np.testing.assert_array_equal(run(main, np.array([1, -5, 3, 12], np.int32)), [12, -3, 4, 1])
    with pytest.raises(TileError, match="integer division by zero"):
        run(main, np.array([1, 0, 3, 4], np.int32))


def test_uninitialized_memory_is_poison():
    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 8), "float32"),
             C: T.Tensor((8,), "float32"), D: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((8, 8), "float32")
            f = T.alloc_fragment((8,), "float32")
            n = T.alloc_shared((8,), "int32")
            T.copy(A[0:4, :], s[0:4, :])      # rows 4..7 are never written
            T.copy(s, B)
            T.reduce_sum(s[0:4, :], f[0:4], dim=1)
            T.copy(f, C)                       # f[4:] is never written
            T.copy(n, D)
    a = rng(3).standard_normal((8, 8)).astype(np.float32)
    b, c, d = run(main, a, out_idx=[1, 2, 3])
    np.testing.assert_array_equal(b[:4], a[:4])
    assert np.isnan(b[4:]).all()
    np.testing.assert_allclose(c[:4], a[:4].sum(1), rtol=1e-5)
    assert np.isnan(c[4:]).all()
    assert (d == 0x5A5A).all()  # integers get a recognisable pattern


def test_missing_copy_shows_in_the_result():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16"),
             C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((16, 16), "float16")
            B_s = T.alloc_shared((16, 16), "float16")
            C_f = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, B_s, C_f)     # B_s and C_f were never filled
            T.copy(C_f, C)
    a = rng(4).standard_normal((16, 16)).astype(np.float16)
    assert np.isnan(run(main, a, a)).all()
    outputs = tilecraft.compile(main, out_idx=-1)(a, a)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(outputs, a.astype(np.float32) @ a.astype(np.float32))


# The shifts below are arguments, so the compiler cannot bound the indices (a constant shift
# is refused when compiling, tests/unit/test_errors_bounds.py): the run finds them.
def test_out_of_bounds_shared_read_points_at_the_line():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), shift: T.int32, B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8,), "float32")
            T.copy(A, s)
            for i in T.Parallel(8):
                B[i] = s[i + shift] * 2.0
    with pytest.raises(TileError) as info:
        run(main, np.ones(8, np.float32), 1)
    err = info.value
    assert "out-of-bounds read of s (shape (8,)) at index (8,)" in err.message
    assert err.span.line == line_of(test_out_of_bounds_shared_read_points_at_the_line,
                                    "B[i] = s[i + shift] * 2.0")
    assert "s[i + shift]" in str(err)


def test_out_of_bounds_shared_write_and_global_write():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), stride: T.int32, B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8,), "float32")
            for i in T.Parallel(8):
                s[7 - i * stride] = A[i]
            T.copy(s, B)
    with pytest.raises(TileError, match=r"out-of-bounds write to s \(shape \(8,\)\) at index "
                                        r"\(-1,\)"):
        run(main, np.ones(8, np.float32), 2)


def test_masked_lanes_are_not_bounds_checked():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32"),
             C: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8,), "float32")
            T.copy(A, s)
            for i in T.Parallel(8):
                if i < 4:
                    B[i] = s[i + 4]             # lanes 4..7 would read past the end
                else:
                    B[i] = s[i - 4] * 10.0      # lanes 0..3 would read before the start
            for i in T.Parallel(8):
                C[i] = T.if_then_else(i >= 2, s[i - 2], s[i + 6] + 100.0)
    a = rng(5).standard_normal(8).astype(np.float32)
    b, c = run(main, a, out_idx=[1, 2])
    np.testing.assert_array_equal(b, np.concatenate([a[4:], a[:4] * 10]))
    np.testing.assert_allclose(c, np.concatenate([a[6:] + 100, a[:6]]), rtol=1e-6)


def test_select_does_not_load_on_dead_lanes_but_live_lanes_are_checked():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), shift: T.int32, B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8,), "float32")
            T.copy(A, s)
            for i in T.Parallel(8):
                B[i] = T.if_then_else(i < 7, s[i + shift], 0.0)   # lane 6 reads s[8]
    with pytest.raises(TileError, match=r"out-of-bounds read of s .* at index \(8,\)"):
        run(main, np.ones(8, np.float32), 2)


def test_numpy_and_torch_arguments():
    torch = pytest.importorskip("torch")

    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4, 8), "float32"),
             C: T.Tensor((4, 8), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for j in T.Parallel(8):
                B[bx, j] = A[bx, j] + 1.0
                C[bx, j] = A[bx, j] * 2.0
    kernel = tilecraft.compile(main, out_idx=[2])
    a = rng(6).standard_normal((4, 8)).astype(np.float32)
    b = np.zeros((4, 8), np.float32)
    c = kernel(a, b)
    assert isinstance(c, np.ndarray)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)   # written in place
    ta, tb = torch.from_numpy(a.copy()), torch.zeros(4, 8)
    tc = kernel(ta, tb)
    assert isinstance(tc, torch.Tensor) and tc.dtype == torch.float32
    np.testing.assert_allclose(tc.numpy(), a * 2, rtol=1e-6)
    np.testing.assert_allclose(tb.numpy(), a + 1, rtol=1e-6)
    with pytest.raises(TileError, match="expected dtype float32, got float64"):
        kernel(ta.double(), tb)


def test_bfloat16_torch_tensors_round_trip():
    torch = pytest.importorskip("torch")

    @T.prim_func
    def main(A: T.Tensor((16,), "bfloat16"), B: T.Tensor((16,), "bfloat16"),
             C: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(16):
                B[i] = A[i] * 3.0
                C[i] = A[i]
    ta = torch.randn(16, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    tb, tc = tilecraft.compile(main, out_idx=[1, 2])(ta)
    assert tb.dtype == torch.bfloat16 and tc.dtype == torch.float32
    assert torch.equal(tc, ta.float())
    assert torch.equal(tb, (ta.float() * 3).to(torch.bfloat16))


def test_profiler_assert_allclose():
    @tilecraft.jit(out_idx=-1)
    def scaled_rowsum(factor):
        @T.prim_func
        def main(A: T.Tensor((32, 16), "float16"), B: T.Tensor((32,), "float32")):
            with T.Kernel(2, threads=64) as bx:
                s = T.alloc_shared((16, 16), "float16")
                f = T.alloc_fragment((16,), "float32")
                T.copy(A[bx * 16, 0], s)
                T.reduce_sum(s, f, dim=1)
                for i in T.Parallel(16):
                    f[i] = f[i] * factor
                T.copy(f, B[bx * 16])
        return main

    def ref(a):
        a = a.float().numpy() if hasattr(a, "float") else a.astype(np.float32)
        return a.sum(1) * 2.0

    scaled_rowsum(2.0).get_profiler().assert_allclose(ref)
    with pytest.raises(AssertionError, match="elements differ"):
        scaled_rowsum(2.5).get_profiler().assert_allclose(ref)
    a = rng(8).standard_normal((32, 16)).astype(np.float16)
    scaled_rowsum(2.0).get_profiler().assert_allclose(ref, input_tensors=[a], atol=1e-3)
    with pytest.raises(AssertionError):
        scaled_rowsum(2.0).get_profiler().assert_allclose(lambda a: ref(a)[::-1],
                                                          input_tensors=[a])
