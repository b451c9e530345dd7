"""T.* scalar builtins (math, casts, dtype objects, extern calls, print, macros, symbolic
sizes) run on the interpreter and checked against numpy; tile ops are in test_builtins.py."""
import math
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T


def rng(seed=0):
    return np.random.default_rng(seed)


def run(func, *args, out_idx=-1):
    return tilecraft.compile(func, out_idx=out_idx)(*args)


UNARY = {"exp": (T.exp, np.exp), "exp2": (T.exp2, np.exp2),
         "exp10": (T.exp10, lambda x: 10.0 ** x),
         "log": (T.log, np.log), "log2": (T.log2, np.log2), "log10": (T.log10, np.log10),
         "log1p": (T.log1p, np.log1p), "sqrt": (T.sqrt, np.sqrt),
         "rsqrt": (T.rsqrt, lambda x: 1 / np.sqrt(x)), "sin": (T.sin, np.sin),
         "cos": (T.cos, np.cos), "tan": (T.tan, np.tan), "tanh": (T.tanh, np.tanh),
         "sigmoid": (T.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
         "erf": (T.erf, np.vectorize(math.erf)), "floor": (T.floor, np.floor),
         "ceil": (T.ceil, np.ceil),
         "round": (T.round, lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5)),
         "trunc": (T.trunc, np.trunc), "abs": (T.abs, np.abs)}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math(name):
    fn, ref = UNARY[name]

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[i] = fn(A[i])
    a = (rng(13).uniform(0.05, 3.0, 64) * np.where(np.arange(64) % 2, 1, -1)).astype(np.float32)
    a[:4] = [0.5, -0.5, 2.5, -1.5]  # halves: round goes away from zero
    if name in ("log", "log2", "log10", "log1p", "sqrt", "rsqrt"):
        a = np.abs(a)
    want = ref(a.astype(np.float64))
    np.testing.assert_allclose(run(main, a), want, rtol=2e-6, atol=1e-6)


def test_binary_integer_and_dtype_builtins():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32"),
             I: T.Tensor((32,), "int32"), J: T.Tensor((32,), "int32"),
             F: T.Tensor((6, 32), "float32"), N: T.Tensor((6, 32), "int32"),
             H: T.Tensor((3, 32), "float16")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                F[0, i] = T.pow(A[i], B[i])
                F[1, i] = T.fmod(A[i] * 7.0, B[i])
                F[2, i] = T.max(A[i], B[i]) - T.min(A[i], B[i], 1.5)
                F[3, i] = T.if_then_else(A[i] > B[i], A[i], -B[i])
                F[4, i] = T.max_value("float16") + T.min_value("float16") - T.infinity("float32")
                F[5, i] = T.cast(A[i] * 100.0, "int32") + T.Cast("float16", B[i] * 1000.0)
                N[0, i] = T.floordiv(I[i], J[i])
                N[1, i] = T.floormod(I[i], J[i])
                N[2, i] = T.truncdiv(I[i], J[i])
                N[3, i] = T.ceildiv(I[i] + 100, 7) + T.ceildiv(13, 4) + T.cdiv(12, 4)
                N[4, i] = T.max_value(T.int32) - I[i] + T.min_value("int8")
                N[5, i] = T.cast(T.int8(127) + T.int8(1), "int32") + T.int32(i)
                H[0, i] = A[i] * T.float16(1.5)
                H[1, i] = T.float16(1.5) * T.float16(1e-4) * 1.0
                H[2, i] = T.bfloat16(1.0039) + T.float16(0.0) * 0
    r = rng(14)
    a = r.uniform(0.5, 2.0, 32).astype(np.float32)
    b = r.uniform(0.5, 2.0, 32).astype(np.float32)
    i = r.integers(-50, 50, 32).astype(np.int32)
    j = r.choice([-7, -3, 2, 5], 32).astype(np.int32)
    f, n, h = run(main, a, b, i, j, out_idx=[4, 5, 6])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(f[0], a64 ** b64, rtol=1e-6)
    np.testing.assert_allclose(f[1], np.fmod(a * np.float32(7), b), rtol=1e-5)
    np.testing.assert_allclose(f[2], np.maximum(a, b) - np.minimum(np.minimum(a, b), 1.5),
                               rtol=1e-6)
    np.testing.assert_array_equal(f[3], np.where(a > b, a, -b))
    assert np.all(f[4] == -np.inf)
    # int32 + float16 promotes to float16: the sum is rounded to half precision
    want5 = (np.trunc(a * np.float32(100)) + (b * np.float32(1000)).astype(np.float16).astype(
        np.float32)).astype(np.float16)
    np.testing.assert_allclose(f[5], want5, rtol=1e-6)
    np.testing.assert_array_equal(n[0], i // j)
    np.testing.assert_array_equal(n[1], i % j)
    np.testing.assert_array_equal(n[2], np.trunc(i / j).astype(np.int32))
    np.testing.assert_array_equal(n[3], -(-(i + 100) // 7) + 4 + 3)
    np.testing.assert_array_equal(n[4], 2 ** 31 - 1 - i - 128)
    np.testing.assert_array_equal(n[5], -128 + np.arange(32))
    np.testing.assert_array_equal(h[0], (a * np.float32(1.5)).astype(np.float16))
    np.testing.assert_array_equal(h[1], np.float16(np.float16(1.5) * np.float16(1e-4)))
    np.testing.assert_array_equal(h[2], np.float16(ml_dtypes.bfloat16(1.0039)))


def test_call_extern_address_of_print_evaluate_macro(capsys):
    calls = []

    def saxpy(x_ptr, y_ptr, alpha, n):
        x, y = x_ptr.read(n), y_ptr.read(n)
        calls.append(n)
        y_ptr.write(alpha * x + y)
        return float(x.sum())

    tilecraft.register_extern("test_saxpy", saxpy)

    @T.macro
    def scale_row(buf, row, factor):
        for j in T.Parallel(8):
            buf[row, j] = buf[row, j] * factor

    @T.prim_func
    def main(X: T.Tensor((2, 8), "float32"), Y: T.Tensor((2, 8), "float32"),
             S: T.Tensor((2,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            s = T.alloc_shared((2, 8), "float32")
            T.copy(Y, s)
            S[bx] = T.call_extern("float32", "test_saxpy", T.address_of(X[bx, 0]),
                                  T.address_of(s[bx, 0]), 2.0, 8)
            T.evaluate(T.call_extern("test_saxpy", T.address_of(X[bx, 0]),
                                     T.address_of(s[bx, 0]), 1.0, 8))
            scale_row(s, bx, 3.0)
            T.print(S[bx], msg="total")
            T.copy(s[bx, :], Y[bx, :])
    r = rng(15)
    x = r.standard_normal((2, 8)).astype(np.float32)
    y = r.standard_normal((2, 8)).astype(np.float32)
    y_out = y.copy()
    s = run(main, x, y_out)
    assert calls == [8, 8, 8, 8]
    np.testing.assert_allclose(s, x.sum(1), rtol=1e-5)
    np.testing.assert_allclose(y_out, (y + 3 * x) * 3, rtol=1e-5)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    for bx, line in enumerate(out):
        assert line.startswith(f"total block ({bx},): ")
        assert float(line.split(": ")[1]) == pytest.approx(float(x[bx].sum()), rel=1e-5)


def test_symbolic_dims_and_policy_enum():
    n = T.symbolic("n")
    m, k = T.dynamic("m, k")

    @T.prim_func
    def main(A: T.Tensor((n, m), "float32"), B: T.Tensor((m, k), "float32"),
             C: T.Tensor((n, k), "float32")):
        with T.Kernel(n, threads=32) as bx:
            for j in T.Parallel(4):
                C[bx, j] = 0.0
                for q in T.serial(m):
                    C[bx, j] = C[bx, j] + A[bx, q] * B[q, j]
    assert [p.value for p in T.GemmWarpPolicy] == [0, 1, 2]
    assert T.GemmWarpPolicy.FullRow is tilecraft.GemmWarpPolicy.FullRow
    kernel = tilecraft.compile(main, out_idx=-1)
    for shape in [(3, 5, 4), (7, 2, 4)]:
        a = rng(16).standard_normal(shape[:2]).astype(np.float32)
        b = rng(17).standard_normal(shape[1:]).astype(np.float32)
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-6)


DTYPES = [(T.bool, np.bool_), (T.int8, np.int8), (T.int16, np.int16), (T.int32, np.int32),
          (T.int64, np.int64), (T.uint8, np.uint8), (T.uint16, np.uint16),
          (T.uint32, np.uint32), (T.uint64, np.uint64), (T.half, np.float16),
          (T.float16, np.float16), (T.bfloat16, ml_dtypes.bfloat16), (T.float, np.float32),
          (T.float32, np.float32), (T.float64, np.float64),
          (T.float8_e4m3fn, ml_dtypes.float8_e4m3fn), (T.float8_e4m3, ml_dtypes.float8_e4m3fn),
          (T.float8_e5m2, ml_dtypes.float8_e5m2)]


@pytest.mark.parametrize("d, npdt", DTYPES, ids=[str(d) for d, _ in DTYPES])
def test_dtype_objects_as_annotations_and_casts(d, npdt):
    assert T.dtype(str(d)) is d and isinstance(d, T.dtype)

    @T.prim_func
    def main(A: T.Buffer((24,), T.float32), B: T.Tensor[(24,), d]):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((24,), d)
            for i in T.Parallel(24):
                s[i] = T.cast(A[i], d)
            T.copy(s, B)
    a = (rng(18).standard_normal(24) * 40).astype(np.float32)
    b = run(main, a)
    assert b.dtype == np.dtype(npdt)
    if np.dtype(npdt).kind in "iu":  # float -> int truncates toward zero, then wraps
        want = np.trunc(a).astype(np.int64).astype(npdt)
    else:
        want = a.astype(npdt)
    np.testing.assert_array_equal(b, want)


def float_test_inputs(n, dtype):
    """Random values with NaN, +-inf, values past +-1 and, for float64, finite values beyond
    float32's range (which a float32 test would call infinite)."""
    x = rng(21).uniform(-3, 3, n).astype(dtype)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0]
    if dtype == np.float64:
        x[6:8] = [1e300, -1e300]
    return x


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("target", ["interp", "emulator"])
def test_isnan_isinf_isfinite_and_clamp(dtype, target):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
    import kernels
    npdt = np.dtype(dtype)
    x = float_test_inputs(200, npdt)
    kernel = tilecraft.compile(kernels.float_tests(200, dtype), out_idx=[1, 2], target=target)
    flags, y = kernel(x)
    np.testing.assert_array_equal(flags, [np.isnan(x), np.isinf(x), np.isfinite(x)])
    want = np.where(np.isnan(x), x, np.clip(x, -1, 1))
    np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))


def test_clamp_of_numbers_folds_and_float64_tests_stay_double_in_cuda():
    assert T.clamp(5, 0, 3) == 3 and T.clamp(-2.5, -1.0, 1.0) == -1.0

    @T.prim_func
    def main(X: T.Tensor((32,), "float64"), F: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                F[i] = T.cast(T.isinf(X[i]), "int32")
    from tilecraft.backends.cuda.runtime import has_nvcc
    if not has_nvcc():
        pytest.skip("nvcc is not installed")
    source = tilecraft.compile(main, target="sm_80").get_kernel_source()
    assert "isinf(X[" in source and "tc::cvt<float>" not in source


def test_min_max_of_python_numbers_fold():
    assert T.max(1, 2) == 2 and T.min(3, -1.5, 2) == -1.5 and T.max(2.5, 1) == 2.5


@pytest.mark.parametrize("target", ["interp", "emulator"])
def test_shifts_and_the_capitalized_serial(target):
    """T.shift_left / T.shift_right are << and >> (arithmetic on signed values); T.Serial is
    T.serial (TileLang writes both)."""
    @T.prim_func
    def main(X: T.Tensor((64,), "int32"), Y: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                Y[i] = T.shift_left(1, X[i] % 8) + T.shift_right(X[i], 2)
            for k in T.Serial(2):
                Y[k] = Y[k] + k
    x = np.random.default_rng(7).integers(-100, 100, 64).astype(np.int32)
    y = np.full(64, -1, np.int32)
    tilecraft.compile(main, target=target)(x, y)
    want = (1 << (x % 8)) + (x >> 2)
    want[:2] += np.arange(2, dtype=np.int32)
    np.testing.assert_array_equal(y, want)
