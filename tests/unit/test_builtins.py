"""Every T.* builtin, run on the interpreter and checked against numpy."""
import ml_dtypes
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T


def rng(seed=0):
    return np.random.default_rng(seed)


def run(func, *args, out_idx=-1):
    return tilecraft.compile(func, out_idx=out_idx)(*args)


def test_kernel_grids_threads_and_two_launches():
    @T.prim_func
    def grid1(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(4, threads=(32, 4)) as bx:
            t = T.alloc_fragment((8,), "float32")
            T.copy(A[bx * 8:(bx + 1) * 8], t)
            for i in T.Parallel(8):
                B[bx * 8 + i] = t[i] * 2.0 + bx

    @T.prim_func
    def grid3(A: T.Tensor((4, 3, 2), "float32"), B: T.Tensor((4, 3, 2), "float32")):
        with T.Kernel(2, 3, 4, threads=[16, 2, 2]) as (bx, by, bz):
            B[bz, by, bx] = A[bz, by, bx] + bx * 100 + by * 10 + bz

    @T.prim_func
    def two(A: T.Tensor((4, 8), "float32"), W: T.Tensor((4, 8), "float32"),
            C: T.Tensor((4, 8), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for j in T.Parallel(8):
                W[bx, j] = A[bx, j] * A[bx, j]
        with T.Kernel(2, 4, threads=32) as (bx, by):
            for j in T.Parallel(4):  # reads a row the first launch wrote, in reverse
                C[by, bx * 4 + j] = W[3 - by, bx * 4 + j] + 1.0

    a = rng().standard_normal(32).astype(np.float32)
    np.testing.assert_allclose(run(grid1, a), a * 2 + np.repeat(np.arange(4), 8), rtol=1e-6)
    a3 = rng(1).standard_normal((4, 3, 2)).astype(np.float32)
    z, y, x = np.meshgrid(range(4), range(3), range(2), indexing="ij")
    np.testing.assert_allclose(run(grid3, a3), a3 + x * 100 + y * 10 + z, rtol=1e-6)
    a2 = rng(2).standard_normal((4, 8)).astype(np.float32)
    w, c = run(two, a2, out_idx=[1, 2])
    np.testing.assert_allclose(w, a2 * a2, rtol=1e-6)
    np.testing.assert_allclose(c, (a2 * a2)[::-1] + 1, rtol=1e-6)


def test_allocations_and_copies_between_scopes():
    @T.prim_func
    def main(A: T.Tensor((16, 12), "float32"), B: T.Tensor((16, 12), "float32"),
             C: T.Tensor((2,), "float32")):
        with T.Kernel(2, threads=64) as bx:
            s = T.alloc_shared((8, 12), "float32")
            s2 = T.alloc_buffer((8, 12), "float32", scope="shared")
            f = T.alloc_fragment((8, 12), "float32")
            loc = T.alloc_local((12,), "float32")
            acc = T.alloc_var("float32")
            cnt = T.alloc_var(T.int32, init=3)
            g = T.alloc_global((8, 12), "float32")
            T.copy(A[bx * 8:(bx + 1) * 8, :], s)   # slice -> shared
            T.copy(s, g)                           # shared -> global workspace
            T.copy(g, f)                           # global -> fragment
            T.copy(f, s2)                          # fragment -> shared (whole buffers)
            T.copy(s2[5, :], loc)                  # one row -> local
            acc = 0.0
            for j in T.serial(12):
                acc += loc[j]
            cnt += 1
            C[bx] = acc * cnt
            T.copy(s2, B[bx * 8, 0])               # tile-origin form
    a = rng(3).standard_normal((16, 12)).astype(np.float32)
    b, c = run(main, a, out_idx=[1, 2])
    np.testing.assert_array_equal(b, a)
    np.testing.assert_allclose(c, [a[5].sum() * 4, a[13].sum() * 4], rtol=1e-5)


@pytest.mark.parametrize("dtype, npdt", [("float16", np.float16),
                                         ("bfloat16", ml_dtypes.bfloat16),
                                         ("float8_e4m3", ml_dtypes.float8_e4m3fn),
                                         ("float8_e5m2", ml_dtypes.float8_e5m2)])
def test_copy_converts_dtype(dtype, npdt):
    @T.prim_func
    def main(A: T.Tensor((8, 16), "float32"), B: T.Tensor((8, 16), dtype),
             C: T.Tensor((8, 16), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8, 16), dtype)
            f = T.alloc_fragment((8, 16), "float32")
            T.copy(A, s)
            T.copy(s, B)
            T.copy(s, f)
            T.copy(f, C)
    a = (rng(4).standard_normal((8, 16)) * 4).astype(np.float32)
    b, c = run(main, a, out_idx=[1, 2])
    assert b.dtype == npdt
    want = a.astype(npdt)
    np.testing.assert_array_equal(b.astype(np.float32), want.astype(np.float32))
    np.testing.assert_array_equal(c, want.astype(np.float32))
    assert not np.array_equal(c, a)  # the narrow type really rounded


def test_copy_ragged_tiles_read_zero_and_drop_writes():
    M, bm = 50, 16

    @T.prim_func
    def main(A: T.Tensor((M, 3), "float32"), B: T.Tensor((M, 3), "float32"),
             P: T.Tensor((64, 3), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=32) as bx:
            s = T.alloc_shared((bm, 3), "float32")
            T.copy(A[bx * bm, 0], s)
            for i, j in T.Parallel(bm, 3):
                s[i, j] = s[i, j] + 1.0
            T.copy(s, P[bx * bm:(bx + 1) * bm, :])
            T.copy(s, B[bx * bm, 0])
    a = rng(5).standard_normal((M, 3)).astype(np.float32)
    b, p = run(main, a, out_idx=[1, 2])
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)
    np.testing.assert_allclose(p[:M], a + 1, rtol=1e-6)
    np.testing.assert_array_equal(p[M:], 1.0)  # padding rows were read as zeros


GEMM_CASES = [
    # in dtype, acc dtype, tA, tB, policy, from fragment, clear_accum
    ("float16", "float32", False, False, T.GemmWarpPolicy.Square, False, False),
    ("float16", "float32", True, False, T.GemmWarpPolicy.FullRow, False, True),
    ("float16", "float32", False, True, T.GemmWarpPolicy.FullCol, True, False),
    ("float16", "float32", True, True, T.GemmWarpPolicy.Square, False, False),
    ("bfloat16", "float32", False, True, T.GemmWarpPolicy.FullRow, False, False),
    ("int8", "int32", False, False, T.GemmWarpPolicy.Square, True, True),
    ("float64", "float64", True, False, T.GemmWarpPolicy.FullCol, False, False),
]


@pytest.mark.parametrize("dtype, acc, tA, tB, policy, frag, clear", GEMM_CASES)
def test_gemm(dtype, acc, tA, tB, policy, frag, clear):
    M, N, K, bk = 32, 24, 48, 16
    a_shape = (K, M) if tA else (M, K)
    b_shape = (N, K) if tB else (K, N)
    as_shape = (bk, M) if tA else (M, bk)
    bs_shape = (N, bk) if tB else (bk, N)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C0: T.Tensor((M, N), acc), C: T.Tensor((M, N), acc)):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared(as_shape, dtype)
            A_f = T.alloc_fragment(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((M, N), acc)
            T.copy(C0, C_f)
            for k in T.Pipelined(K // bk, num_stages=2):
                if tA:
                    T.copy(A[k * bk, 0], A_s)
                else:
                    T.copy(A[0, k * bk], A_s)
                if tB:
                    T.copy(B[0, k * bk], B_s)
                else:
                    T.copy(B[k * bk, 0], B_s)
                if frag:
                    T.copy(A_s, A_f)
                    T.gemm(A_f, B_s, C_f, transpose_A=tA, transpose_B=tB, policy=policy,
                           clear_accum=clear)
                else:
                    T.gemm(A_s, B_s, C_f, transpose_A=tA, transpose_B=tB, policy=policy,
                           clear_accum=clear)
            T.copy(C_f, C)
    r = rng(6)
    npdt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    if dtype == "int8":
        a, b = (r.integers(-128, 128, s).astype(np.int8) for s in (a_shape, b_shape))
        c0 = r.integers(-1000, 1000, (M, N)).astype(np.int32)
    else:
        a, b = (r.standard_normal(s).astype(npdt) for s in (a_shape, b_shape))
        c0 = r.standard_normal((M, N)).astype(acc)
    c = run(main, a, b, c0)
    wide = np.int64 if dtype == "int8" else np.float64
    aa, bb = a.astype(wide), b.astype(wide)
    aa, bb = (aa.T if tA else aa), (bb.T if tB else bb)
    if clear:  # the accumulator is cleared before the last k step only matters at k = last
        want = aa[:, K - bk:] @ bb[K - bk:, :]
    else:
        want = c0.astype(wide) + aa @ bb
    if dtype == "int8":
        np.testing.assert_array_equal(c, want)
    else:
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kind", ["max", "min", "sum", "abssum", "absmax"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("clear", [True, False])
def test_reductions(kind, dim, clear):
    reducer = {"max": T.reduce_max, "min": T.reduce_min, "sum": T.reduce_sum,
               "abssum": T.reduce_abssum, "absmax": T.reduce_absmax}[kind]

    @T.prim_func
    def main(A: T.Tensor((8, 12), "float32"), O0: T.Tensor((12 if dim == 0 else 8,), "float32"),
             O: T.Tensor((12 if dim == 0 else 8,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((8, 12), "float32")
            out = T.alloc_fragment((12 if dim == 0 else 8,), "float32")
            T.copy(A, s)
            T.copy(O0, out)
            reducer(s, out, dim=dim, clear=clear)
            T.copy(out, O)
    a = rng(7).standard_normal((8, 12)).astype(np.float32)
    o0 = rng(8).standard_normal(12 if dim == 0 else 8).astype(np.float32)
    fn = {"max": np.max, "min": np.min, "sum": np.sum,
          "abssum": lambda x, axis: np.abs(x).sum(axis), "absmax": lambda x, axis: np.abs(x).max(axis)}
    comb = {"max": np.maximum, "min": np.minimum, "sum": np.add, "abssum": np.add,
            "absmax": np.maximum}
    want = fn[kind](a, axis=dim)
    if not clear:
        want = comb[kind](o0, want)
    np.testing.assert_allclose(run(main, a, o0), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(dim, reverse):
    @T.prim_func
    def main(A: T.Tensor((6, 10), "float32"), B: T.Tensor((6, 10), "float32"),
             C: T.Tensor((6, 10), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((6, 10), "float32")
            d = T.alloc_shared((6, 10), "float32")
            T.copy(A, s)
            T.cumsum(s, d, dim=dim, reverse=reverse)
            T.cumsum(s, dim=dim, reverse=reverse)  # in place
            T.copy(d, B)
            T.copy(s, C)
    a = rng(9).standard_normal((6, 10)).astype(np.float32)
    want = np.flip(np.cumsum(np.flip(a, dim), dim), dim) if reverse else np.cumsum(a, dim)
    b, c = run(main, a, out_idx=[1, 2])
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-6)


def test_fill_clear_regions_and_parallel_control_flow():
    @T.prim_func
    def main(A: T.Tensor((4, 6, 5), "float32"), B: T.Tensor((6, 5), "float32"),
             C: T.Tensor((4, 6, 5), "float32"), D: T.Tensor((6,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((6, 5), "float32")
            T.fill(f, 7.5)
            T.fill(f[1:3, :], -2.0)
            T.clear(f[:, 3:5])
            T.copy(f, B)
            for i, j, k in T.Parallel(4, 6, 5):
                if A[i, j, k] > 0:
                    C[i, j, k] = A[i, j, k] * 2.0
                else:
                    C[i, j, k] = -1.0
            for j in T.Parallel(6):
                D[j] = 0.0
                for k in T.serial(5):
                    if k % 2 == 0:
                        D[j] = D[j] + A[1, j, k]
    a = rng(10).standard_normal((4, 6, 5)).astype(np.float32)
    b, c, d = run(main, a, out_idx=[1, 2, 3])
    want = np.full((6, 5), 7.5, np.float32)
    want[1:3] = -2.0
    want[:, 3:] = 0
    np.testing.assert_array_equal(b, want)
    np.testing.assert_array_equal(c, np.where(a > 0, a * 2, -1.0))
    np.testing.assert_allclose(d, a[1, :, ::2].sum(-1), rtol=1e-5)


def test_loop_kinds_pipeline_annotations_layout_and_swizzle():
    @T.prim_func
    def main(A: T.Tensor((8, 16), "float32"), B: T.Tensor((8,), "float32"),
             C: T.Tensor((8,), "float32")):
        with T.Kernel(2, 4, threads=64) as (bx, by):
            s = T.alloc_shared((8, 4), "float32")
            f = T.alloc_fragment((8,), "float32")
            acc = T.alloc_local((1,), "float32")
            T.annotate_layout({s: lambda i, j: i * 4 + j})
            T.use_swizzle(panel_size=2, order="column")
            T.clear(f)
            for k in T.Pipelined(4, num_stages=2, order=[0, 1], stage=[0, 1]):
                T.copy(A[0, k * 4], s)
                for i in T.Parallel(8):
                    for j in T.serial(4):
                        f[i] = f[i] + s[i, j] * (k + 1)
            if bx == 0 and by == 0:
                T.copy(f, B)
                acc[0] = 0.0
                for k in T.serial(0, 16, step=3):       # 0, 3, ..., 15
                    acc[0] += A[0, k]
                for k in T.unroll(2):
                    acc[0] += A[1, k]
                for k in T.vectorized(4):
                    acc[0] += A[2, k]
                for k in range(1, 3):
                    acc[0] += A[3, k]
                for i in T.Parallel(8):
                    C[i] = acc[0] + i
    a = rng(11).standard_normal((8, 16)).astype(np.float32)
    b, c = run(main, a, out_idx=[1, 2])
    np.testing.assert_allclose(b, (a * np.repeat(np.arange(1, 5), 4)).sum(1), rtol=1e-5)
    s = a[0, ::3].sum() + a[1, :2].sum() + a[2, :4].sum() + a[3, 1:3].sum()
    np.testing.assert_allclose(c, s + np.arange(8), rtol=1e-5)


def test_atomics_scalar_collisions_and_tiles():
    @T.prim_func
    def main(Idx: T.Tensor((64,), "int32"), V: T.Tensor((64,), "float32"),
             Add: T.Tensor((5,), "float32"), Mx: T.Tensor((5,), "float32"),
             Mn: T.Tensor((5,), "float32"), Tile: T.Tensor((4, 8), "float32")):
        with T.Kernel(2, threads=64) as bx:
            f = T.alloc_fragment((4, 8), "float32")
            for i in T.Parallel(32):
                T.atomic_add(Add[Idx[bx * 32 + i]], V[bx * 32 + i])
                T.atomic_max(Mx[Idx[bx * 32 + i]], V[bx * 32 + i])
                T.atomic_min(Mn[Idx[bx * 32 + i]], V[bx * 32 + i])
            for i, j in T.Parallel(4, 8):
                f[i, j] = V[i * 8 + j] * (bx + 1)
            T.atomic_add(Tile[0, 0], f)
            T.atomic_max(Tile[1:2, :], f[0:1, :])
            T.atomic_min(Tile[2, 0], f[3:4, :])
    r = rng(12)
    idx = r.integers(0, 5, 64).astype(np.int32)
    v = r.standard_normal(64).astype(np.float32)
    init = [r.standard_normal(5).astype(np.float32) for _ in range(3)]
    tile = r.standard_normal((4, 8)).astype(np.float32)
    add, mx, mn, out_tile = (x.copy() for x in init + [tile])
    run(main, idx, v, add, mx, mn, out_tile, out_idx=None)
    want_add, want_mx, want_mn = (x.copy() for x in init)
    np.add.at(want_add, idx, v)
    np.maximum.at(want_mx, idx, v)
    np.minimum.at(want_mn, idx, v)
    np.testing.assert_allclose(add, want_add, rtol=1e-5)
    np.testing.assert_array_equal(mx, want_mx)
    np.testing.assert_array_equal(mn, want_mn)
    vv = v[:32].reshape(4, 8)
    want_tile = tile.copy()
    for fac in (1, 2):  # block bx scales by bx + 1; blocks run one after the other
        want_tile += vv * fac
        want_tile[1] = np.maximum(want_tile[1], vv[0] * fac)
        want_tile[2] = np.minimum(want_tile[2], vv[3] * fac)
    np.testing.assert_allclose(out_tile, want_tile, rtol=1e-5)



@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_paired_and_four_wide_atomic_adds(target):
    """TileLang's atomic_addx2 / atomic_addx4: consecutive elements from the given ones, rows
    picked by an index tensor (sparse MLA's dKV) so that blocks collide."""
    @T.prim_func
    def main(Rows: T.Tensor((16,), "int32"), V: T.Tensor((16, 32), "float32"),
             G: T.Tensor((6, 32), "float32")):
        with T.Kernel(2, threads=64) as bx:
            s = T.alloc_shared((8, 32), "float32")
            T.copy(V[bx * 8, 0], s)
            for i, j in T.Parallel(8, 8):
                T.atomic_addx4(G[Rows[bx * 8 + i], j * 4], s[i, j * 4])
            for i, j in T.Parallel(8, 16):
                T.atomic_addx2(G[Rows[bx * 8 + i], j * 2], s[i, j * 2])
    r = rng(4)
    rows = r.integers(0, 6, 16).astype(np.int32)
    v = r.standard_normal((16, 32)).astype(np.float32)
    g = r.standard_normal((6, 32)).astype(np.float32)
    want = g.copy()
    np.add.at(want, rows, 2 * v)
    tilecraft.compile(main, target=target)(rows, v, g)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
