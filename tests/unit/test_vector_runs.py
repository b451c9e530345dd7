"""An element-wise loop that writes shared memory runs in runs of consecutive elements per
thread (passes/parallel_nests.store_run), each moved with one vector access through registers
(tileops/vector_runs.py): the results are those of the interpreter, at ragged shapes too, and
loops that do not qualify keep one element per thread in turn."""
import re

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda


def unpack_scale(M, N, bm=32, bn=64, in_place=False):
    """W = (nibble - 8) * S[row] built in shared memory from packed bytes in shared memory,
    then copied out (the dequantize step of a W4A16 GEMM); in_place also doubles W there."""
    @T.prim_func
    def main(P: T.Tensor((M, N // 2), "uint8"), S: T.Tensor((M,), "float16"),
             W: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            p = T.alloc_shared((bm, bn // 2), "uint8")
            w = T.alloc_shared((bm, bn), "float16")
            T.copy(P[by * bm, bx * (bn // 2)], p)
            for i, j in T.Parallel(bm, bn):
                nibble = (p[i, j // 2] >> ((j % 2) * 4)) & 0xF
                in_range = by * bm + i < M
                scale = T.if_then_else(in_range, S[by * bm + i], 0)
                w[i, j] = T.cast(T.cast(nibble, "int32") - 8, "float16") * scale
            if in_place:
                for i, j in T.Parallel(bm, bn):
                    w[i, j] = w[i, j] * 2
            T.copy(w, W[by * bm, bx * bn])
    return main


def reference(P, S, in_place):
    q = np.stack((P & 0xF, P >> 4), axis=-1).reshape(P.shape[0], -1).astype(np.float32) - 8
    w = (q * S.astype(np.float32)[:, None]).astype(np.float16)
    return w * np.float16(2) if in_place else w


def test_runs_are_stored_and_loaded_as_vectors():
    text = emit_cuda(pipelines.cuda_sm80(unpack_scale(64, 128)))[0]
    # eight float16 results a run, one 16-byte shared store; their four bytes, one 4-byte load
    assert re.search(r"tc::st_shared_128\(\(&w\[[^;]*tc::ld_regs_128\(\(&w_run\[0\]\)\)", text)
    # (into the run's registers, or into its part of the registers of every run of the loop
    # when batch_shared_loads issues the loads first)
    assert re.search(r"tc::st_regs_32\(\(&p_run(_ahead)?\[[^]]*\]\), tc::ld_shared_32\(\(&p\[",
                     text)
    assert "tc::st_pair(&w_run[" in text   # computed two at a time from the registers


@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("M,N,in_place", [(64, 128, False), (50, 100, True), (33, 66, False)])
def test_results_match_the_interpreter(target, M, N, in_place):
    rng = np.random.default_rng(M + N)
    P = rng.integers(0, 256, (M, N // 2)).astype(np.uint8)
    S = rng.uniform(0.5, 1.5, M).astype(np.float16)
    kernel = tilecraft.compile(unpack_scale(M, N, in_place=in_place), target=target)
    W = np.full((M, N), np.nan, np.float16)
    kernel(P, S, W)
    assert not kernel.reports
    np.testing.assert_array_equal(W, reference(P, S, in_place))


def test_loops_that_do_not_qualify_keep_one_element_per_thread():
    """Stored at another position than the loop's own: each thread keeps one element at a
    time."""
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            for i, j in T.Parallel(64, 64):
                s[j, i] = X[i, j]
            T.copy(s, Y)
    text = emit_cuda(pipelines.cuda_sm80(main))[0]
    assert "s_run" not in text and "tc::st_pair" not in text


def test_global_reads_along_the_run_are_one_vector_load():
    """A global read at the run's own elements is read 16 bytes at a time, like the store."""
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            for i, j in T.Parallel(64, 64):
                s[i, j] = X[i, j] * 2
            T.copy(s, Y)
    text = emit_cuda(pipelines.cuda_sm80(main))[0]
    assert "tc::st_regs_128((&X_run[0]), tc::ld_global_128(" in text
    assert "tc::st_shared_128((&s[" in text


def test_stores_independent_only_when_each_iteration_reads_its_own_elements():
    from tilecraft.ir import dtypes as dt
    from tilecraft.ir.buffer import LOCAL, Buffer
    from tilecraft.ir.expr import BufferLoad, Var
    from tilecraft.ir.stmt import BufferStore
    from tilecraft.ir.visitor import stores_independent
    l = Var("l", dt.int32)
    x, y = (Buffer(n, (8,), dt.dtype("float16"), LOCAL) for n in "xy")
    own = BufferStore(x, (l,), BufferLoad(x, (l,)) * BufferLoad(y, (l + 1,)))
    assert stores_independent([own])                     # y is only read: any element
    neighbour = BufferStore(x, (l,), BufferLoad(x, (l + 1,)))
    assert not stores_independent([neighbour])           # another iteration's x
    assert not stores_independent([own, BufferStore(x, (l,), BufferLoad(y, (l,)))])  # x twice
