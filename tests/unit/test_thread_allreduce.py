"""TVM's cross-thread reduction as TileLang's dequantizing GEMVs write it (T.attr with a
T.comm_reducer around T.tvm_thread_allreduce), within a warp by shuffles and across warps
through shared memory, on the interpreter and the emulators against numpy, compiled for
sm_80 and sm_90a; what it cannot do is refused at the user's line."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect

# The interpreter, then the emulator running the sm_80 and the sm_90a pipelines.
TARGETS = ("interp", "emulator", "emulator:sm_90a")


def gemv_allreduce(N, K, n_partition=4, reduce_thread=32, dtype="float16", accum="float32"):
    """threadIdx.x (kr) splits K, threadIdx.y (ni) picks the row; the partial sums of a row's
    threads meet in T.tvm_thread_allreduce over kr."""
    micro = 8
    block_K = reduce_thread * micro

    @T.prim_func
    def main(A: T.Tensor((1, K), dtype), B: T.Tensor((N, K), dtype),
             C: T.Tensor((1, N), dtype)):
        with T.Kernel(T.ceildiv(N, n_partition), 1,
                      threads=(reduce_thread, n_partition)) as (bx, by):
            A_local = T.alloc_local((micro,), dtype)
            B_local = T.alloc_local((micro,), dtype)
            accum_res = T.alloc_local((1,), accum)
            reduced = T.alloc_local((1,), accum)
            kr = T.thread_binding(0, reduce_thread, thread="threadIdx.x")
            ni = T.thread_binding(0, n_partition, thread="threadIdx.y")
            T.clear(accum_res)
            for ko in T.serial(T.ceildiv(K, block_K)):
                for v in T.vectorized(micro):
                    A_local[v] = A[by, ko * block_K + kr * micro + v]
                for v in T.vectorized(micro):
                    B_local[v] = B[bx * n_partition + ni, ko * block_K + kr * micro + v]
                for ki in T.serial(micro):
                    accum_res[0] += A_local[ki].astype(accum) * B_local[ki].astype(accum)
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.Cast(accum, 0)]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), accum_res[0], True, reduced[0],
                                                  kr, dtype="handle"))
            if kr == 0:
                C[by, bx * n_partition + ni] = reduced[0]
    return main


def on_all(func, *args):
    out = []
    for target in TARGETS:
        kernel = tilecraft.compile(func, out_idx=-1, target=target)
        out.append(kernel(*args))
        assert getattr(kernel, "reports", []) == []
    return out


@pytest.mark.parametrize("reduce_thread,n_partition", [(32, 4), (8, 8)])
def test_gemv_with_tvm_thread_allreduce(reduce_thread, n_partition):
    N, K = 16, 512
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    interp, *emulated = on_all(gemv_allreduce(N, K, n_partition, reduce_thread), a, b)
    want = b.astype(np.float64) @ a[0].astype(np.float64)
    np.testing.assert_allclose(interp[0].astype(np.float64), want, rtol=2e-3, atol=2e-2)
    for emu in emulated:
        np.testing.assert_array_equal(emu, interp)


def column_max(rows=8, cols=4):
    """A max over threadIdx.y (threads 4 apart in the warp), the reducer as a statement
    before the reduction."""
    @T.prim_func
    def main(A: T.Tensor((rows, cols), "float32"), M: T.Tensor((cols,), "float32")):
        with T.Kernel(1, threads=(cols, rows)) as bx:
            tx, ty = T.get_thread_binding(0), T.get_thread_binding(1)
            best = T.alloc_var("float32")
            T.attr(T.comm_reducer(lambda x, y: T.max(x, y), [T.float32(0)]), "reduce_scope",
                   T.reinterpret("handle", T.uint64(0)))
            T.evaluate(T.tvm_thread_allreduce(T.uint32(1), A[ty, tx], T.bool(True), best, ty))
            if ty == 0:
                M[tx] = best
    return main


def test_reduction_over_threadidx_y():
    a = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    for got in on_all(column_max(), a):
        np.testing.assert_array_equal(got, a.max(0))


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_allreduce_kernels_compile(arch):
    for func in (gemv_allreduce(16, 512), column_max(), splitk_over_y(), whole_block_max()):
        assert tilecraft.compile(func, target=arch).n_regs > 0


# --- refused --------------------------------------------------------------------------------

def test_allreduce_without_its_reducer():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                tx = T.get_thread_binding()
                r = T.alloc_local((1,), "float32")
                T.evaluate(T.tvm_thread_allreduce(1, A[tx], True, r[0], tx))  # <- here
    expect(program, "T.tvm_thread_allreduce needs its reducer", "T.tvm_thread_allreduce(")


def splitk_over_y(N=6, K=96, block_n=2, reduce_threads=32):
    """TileLang's split-K gemv with threads=(BLOCK_N, reduce_threads): the reduced index is
    threadIdx.y, its 32 threads 2 apart over two warps; they meet in shared memory."""
    @T.prim_func
    def main(A: T.Tensor((K,), "float16"), B: T.Tensor((N, K), "float16"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_n), threads=(block_n, reduce_threads)) as bn:
            tn, tk = T.get_thread_binding(0), T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            red = T.alloc_local((1,), "float32")
            T.clear(acc)
            for bk in T.serial(T.ceildiv(K, reduce_threads)):
                acc[0] += A[bk * reduce_threads + tk].astype("float32") * \
                    B[bn * block_n + tn, bk * reduce_threads + tk].astype("float32")
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, "float32")]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, red[0], tk,
                                                  dtype="handle"))
            if tk == 0:
                C[bn * block_n + tn] = red[0]
    return main


def whole_block_max(n=96):
    """A max over 96 threads: three warps, not a power of two."""
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), M: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n) as bx:
            tx = T.get_thread_binding()
            r = T.alloc_local((1,), "float32")
            with T.attr(T.comm_reducer(lambda x, y: T.max(x, y), [-T.infinity("float32")]),
                        "reduce_scope", 0):
                T.evaluate(T.tvm_thread_allreduce(1, A[tx], True, r[0], tx))
            M[tx] = r[0]
    return main


def test_allreduce_across_warps_meets_in_shared_memory():
    rng = np.random.default_rng(4)
    a = rng.standard_normal(96).astype(np.float16)
    b = rng.standard_normal((6, 96)).astype(np.float16)
    want = b.astype(np.float64) @ a.astype(np.float64)
    for got in on_all(splitk_over_y(), a, b):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    x = rng.standard_normal(96).astype(np.float32)
    for got in on_all(whole_block_max(), x):
        np.testing.assert_array_equal(got, np.full(96, x.max(), np.float32))


def test_other_attributes_are_not_supported_yet():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                with T.attr(A, "pragma_unroll", 1):  # <- here
                    A[0] = 1.0
    expect(program, "T.attr('pragma_unroll') is not supported by tilecraft yet", "T.attr(")
