"""Fragments a T.Parallel nest indexes with the variables of a T.serial / T.unroll loop inside
its body (infer_layouts.walked_in_registers): each thread runs an iteration's inner loop whole,
so the fragment is partitioned like the nest with the inner dims in the thread's registers,
instead of kept whole in every thread. Checked by the register arrays and indices of the CUDA,
and by results against numpy on the interpreter and the emulators (race checker on), ragged
sizes included."""
import warnings

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T


def row_dot(M, K, threads, inner="serial"):
    """y = A x with a row of A per iteration, walked by an inner loop."""
    loop = T.serial if inner == "serial" else T.unroll

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), X: T.Tensor((K,), "float32"),
             Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((M, K), "float32")
            x = T.alloc_fragment((K,), "float32")
            acc = T.alloc_fragment((M,), "float32")
            T.copy(A, a)
            T.copy(X, x)
            T.clear(acc)
            for i in T.Parallel(M):
                for k in loop(K):
                    acc[i] += a[i, k] * x[k]
            T.copy(acc, Y)
    return main


def sliced_dot(N, K, rows=8, lanes=16, vec=8, threads=64):
    """Each (row, lane) iteration sums a vec-long slice of a row against the matching slice of
    x (merged `t * vec + e` and coarsened `t * (vec // 2) + e // 2` indices), then the row is
    reduced over the lanes: the form of a GEMV that keeps one partial sum per row and thread."""
    block_K = lanes * vec

    @T.prim_func
    def main(A: T.Tensor((N, K), "float32"), X: T.Tensor((K,), "float32"),
             S: T.Tensor((N, K // 2), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, rows), threads=threads) as bx:
            a = T.alloc_fragment((rows, block_K), "float32")
            s = T.alloc_fragment((rows, block_K // 2), "float32")
            x = T.alloc_fragment((block_K,), "float32")
            partial = T.alloc_fragment((rows, lanes), "float32")
            out = T.alloc_fragment((rows,), "float32")
            T.clear(partial)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[bx * rows, k * block_K], a)
                T.copy(S[bx * rows, k * (block_K // 2)], s)
                T.copy(X[k * block_K], x)
                for i, t in T.Parallel(rows, lanes):
                    for e in T.serial(vec):
                        partial[i, t] += a[i, t * vec + e] * x[t * vec + e] * \
                            s[i, t * (vec // 2) + e // 2]
            T.reduce_sum(partial, out, dim=1)
            T.copy(out, Y[bx * rows])
    return main


def source_of(func, target="sm_80"):
    with warnings.catch_warnings():
        warnings.simplefilter("error")    # no "kept whole in every thread" warning
        return tilecraft.compile(func, target=target).get_kernel_source()


@pytest.mark.parametrize("inner", ["serial", "unroll"])
def test_a_row_walked_by_an_inner_loop_is_the_iterations_own(inner):
    source = source_of(row_dot(64, 16, 64, inner))
    assert "float a[16];" in source and "float x[16];" in source and "float acc[1];" in source
    body = [line for line in source.splitlines() if "* x[" in line]
    assert len(body) == 1 and "= acc[" in body[0] and "tx" not in body[0]  # registers, no thread


def test_slices_and_coarsened_slices_are_partitioned():
    source = source_of(sliced_dot(64, 256))
    # 8 rows x 16 lanes over 64 threads: two iterations a thread, each an 8-long slice.
    assert "float a[16];" in source and "float s[8];" in source and "float x[8];" in source
    body = [line for line in source.splitlines() if "partial[" in line and "] = partial[" in line]
    assert body and all("tx" not in line for line in body)


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("shape", [(64, 256), (52, 200)])
def test_results_agree_with_numpy(target, shape):
    N, K = shape
    rng = np.random.default_rng(N + K)
    A = rng.standard_normal((N, K)).astype(np.float32)
    X = rng.standard_normal(K).astype(np.float32)
    S = rng.uniform(0.5, 1.5, (N, K // 2)).astype(np.float32)
    Y = np.full(N, np.nan, np.float32)
    kernel = tilecraft.compile(sliced_dot(N, K), target=target)
    kernel(A, X, S, Y)
    if target != "interp":
        assert kernel.reports == []
    want = (A.astype(np.float64) * np.repeat(S, 2, axis=1)) @ X
    np.testing.assert_allclose(Y, want, rtol=1e-4, atol=1e-4)



@pytest.mark.parametrize("target", ["interp", "emulator"])
def test_row_dot_agrees_with_numpy(target):
    rng = np.random.default_rng(7)
    A = rng.standard_normal((64, 16)).astype(np.float32)
    X = rng.standard_normal(16).astype(np.float32)
    Y = np.full(64, np.nan, np.float32)
    kernel = tilecraft.compile(row_dot(64, 16, 64), target=target)
    kernel(A, X, Y)
    np.testing.assert_allclose(Y, A.astype(np.float64) @ X, rtol=1e-5, atol=1e-5)
