"""Symbolic sizes (T.symbolic / T.dynamic) and scalar parameters bound at call time."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft import TileError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402


def rng(seed=0):
    return np.random.default_rng(seed)


@tilecraft.jit(out_idx=-1)
def symbolic_gemm(block_M=16, block_N=16, block_K=8):
    M, N, K = T.symbolic("M, N, K")

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main


@pytest.mark.parametrize("M, N, K", [(32, 16, 8), (17, 33, 9), (5, 3, 30), (48, 1, 1)])
def test_gemm_compiled_once_runs_every_size(M, N, K):
    kernel = symbolic_gemm()
    assert symbolic_gemm() is kernel  # one compile serves every size
    r = rng(M * 100 + N)
    a = r.standard_normal((M, K)).astype(np.float16)
    b = r.standard_normal((K, N)).astype(np.float16)
    c = kernel(a, b)
    assert c.shape == (M, N) and c.dtype == np.float32
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32),
                               rtol=1e-3, atol=1e-3)


def test_shared_dims_must_agree():
    kernel = symbolic_gemm()
    a = np.ones((8, 5), np.float16)
    with pytest.raises(TileError, match=r"dimension 0 is 6, but the size K was already bound "
                                        r"to 5"):
        kernel(a, np.ones((6, 4), np.float16))
    with pytest.raises(TileError, match="expected 2 dimension"):
        kernel(a, np.ones((5,), np.float16))
    with pytest.raises(TileError, match="expected dtype float16, got float32"):
        kernel(a, np.ones((5, 4), np.float32))
    # after the failed calls the kernel still binds fresh sizes
    b = rng(1).standard_normal((5, 3)).astype(np.float16)
    np.testing.assert_allclose(kernel(a, b), np.ones((8, 5)) @ b.astype(np.float32), rtol=1e-3)


def test_scalar_parameters_and_symbolic_loop_bounds():
    n = T.dynamic("n")

    @T.prim_func
    def axpy_prefix(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"), count: T.int32,
                    alpha: T.float32, Out: T.Tensor((n,), "float32"),
                    Sums: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 8), threads=32) as bx:
            for i in T.Parallel(8):
                if bx * 8 + i < count:
                    Out[bx * 8 + i] = alpha * X[bx * 8 + i] + Y[bx * 8 + i]
                else:
                    Out[bx * 8 + i] = Y[bx * 8 + i]
        with T.Kernel(1, threads=32) as bx:
            acc = T.alloc_var("float32", init=0.0)
            for i in T.serial(n):          # trip count from the tensor's size
                acc += Out[i]
                Sums[i] = acc
    kernel = tilecraft.compile(axpy_prefix, out_idx=[4, 5])
    for size, count, alpha in [(8, 3, 2.0), (21, 21, -0.5), (13, 0, 7.0), (1, 5, 1.5)]:
        r = rng(size)
        x, y = (r.standard_normal(size).astype(np.float32) for _ in range(2))
        out, sums = kernel(x, y, count, alpha)
        want = np.where(np.arange(size) < count, np.float32(alpha) * x + y, y)
        assert out.shape == (size,) and sums.shape == (size,)
        np.testing.assert_allclose(out, want, rtol=1e-6)
        np.testing.assert_allclose(sums, np.cumsum(want), rtol=1e-5, atol=1e-5)
    with pytest.raises(TileError, match="argument count must be an int"):
        kernel(x, y, 1.5, 2.0)
    with pytest.raises(TileError, match="argument alpha must be a number"):
        kernel(x, y, 1, "2")
    with pytest.raises(TileError, match=r"takes 4 argument\(s\)"):
        kernel(x, y, 1)


def test_scalar_parameter_as_grid_and_loop_extent():
    @T.prim_func
    def rows(A: T.Tensor((12, 6), "float32"), B: T.Tensor((12,), "float32"), nrows: T.int32,
             ncols: T.int32):
        with T.Kernel(nrows, threads=32) as bx:
            acc = T.alloc_var("float32")
            acc = 0.0
            for j in T.serial(ncols):
                acc += A[bx, j] * (j + 1)
            B[bx] = acc
    kernel = tilecraft.compile(rows)
    a = rng(2).standard_normal((12, 6)).astype(np.float32)
    for nrows, ncols in [(12, 6), (5, 2), (1, 0)]:
        b = np.full(12, -9.0, np.float32)
        kernel(a, b, nrows, ncols)
        want = np.full(12, -9.0, np.float32)
        want[:nrows] = (a[:nrows, :ncols] * np.arange(1, ncols + 1)).sum(1)
        np.testing.assert_allclose(b, want, rtol=1e-5)


def test_output_shapes_from_symbolic_expressions():
    n, m = T.symbolic("n, m")

    @T.prim_func
    def stack(A: T.Tensor((n, m), "float32"), B: T.Tensor((m, n), "float32"),
              Out: T.Tensor((2 * n + 1, m), "float32")):
        with T.Kernel(n, threads=32) as bx:
            t = T.alloc_fragment((1,), "float32")
            for j in T.serial(m):
                Out[bx, j] = A[bx, j]
                Out[n + bx, j] = B[j, bx] * 2.0
            T.fill(t, 0.5)
            for j in T.serial(m):
                Out[2 * n, j] = t[0] * m
    kernel = tilecraft.compile(stack, out_idx=-1)
    for shape in [(3, 4), (1, 7), (6, 1)]:
        r = rng(shape[0])
        a = r.standard_normal(shape).astype(np.float32)
        b = r.standard_normal(shape[::-1]).astype(np.float32)
        out = kernel(a, b)
        assert out.shape == (2 * shape[0] + 1, shape[1])
        want = np.concatenate([a, b.T * 2, np.full((1, shape[1]), 0.5 * shape[1])])
        np.testing.assert_allclose(out, want, rtol=1e-6)


def test_output_size_must_come_from_an_input():
    n, k = T.symbolic("n, k")

    @T.prim_func
    def bad(A: T.Tensor((n,), "float32"), B: T.Tensor((k,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            B[0] = A[0]
    kernel = tilecraft.compile(bad, out_idx=-1)
    with pytest.raises(TileError, match="its size k is not given by any input"):
        kernel(np.ones(3, np.float32))


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_ragged_tiles_with_symbolic_sizes_and_workspace(target):
    """The workspace (T.alloc_global) of a symbolic size carries the row sums from one launch
    to the next; on the emulator it is made poisoned for each call, as the CUDA launcher makes
    it uninitialized."""
    blocks = kernels.workspace_rows()
    kernel = tilecraft.compile(blocks, out_idx=[1, 2], target=target)
    for size in (8, 19, 3):
        a = rng(size).standard_normal((size, 4)).astype(np.float32)
        b, tot = kernel(a)
        np.testing.assert_allclose(b, a - a.mean(1, keepdims=True), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tot, [a.sum()], rtol=1e-5)


def test_dynamic_int64_size_and_mixed_static_dims():
    L = T.dynamic("L", "int64")

    @T.prim_func
    def scale(A: T.Tensor((3, L), "float32"), B: T.Tensor((3, L), "float32")):
        with T.Kernel(3, T.ceildiv(L, 16), threads=32) as (bx, by):
            for j in T.Parallel(16):
                if by * 16 + j < L:
                    B[bx, by * 16 + j] = A[bx, by * 16 + j] * (bx + 1)
    kernel = tilecraft.compile(scale, out_idx=-1)
    for length in (16, 37):
        a = rng(length).standard_normal((3, length)).astype(np.float32)
        np.testing.assert_allclose(kernel(a), a * np.arange(1, 4)[:, None], rtol=1e-6)
    with pytest.raises(TileError, match="expected shape"):
        kernel(np.ones((4, 16), np.float32))
