"""A pipelined loop reads the next iteration's read-only global scalars one iteration ahead
(transforms/prefetch_loop_scalars.py): a loop over a list of key tiles loads the next tile's
index at the top of each iteration, and its bound once before the loop; values a kernel
writes, values under a condition and values that change inside the loop stay where they are.
Checked in the generated CUDA and, for the kernels, on the emulators against the
interpreter."""
import re

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda


def gather_rows(N, D, tiles, block=32, write_back=False, stages=2):
    """Out[m] = sum over the row tiles Idx[m, :Num[m]] of A's tiles (a listed-tile loop)."""

    @T.prim_func
    def main(A: T.Tensor((N, D), "float32"), Num: T.Tensor((tiles,), "int32"),
             Idx: T.Tensor((tiles, tiles), "int32"), Out: T.Tensor((tiles * block, D), "float32")):
        with T.Kernel(tiles, threads=64) as m:
            tile = T.alloc_shared((block, D), "float32")
            acc = T.alloc_fragment((block, D), "float32")
            T.clear(acc)
            for n in T.Pipelined(Num[m], num_stages=stages):
                T.copy(A[Idx[m, n] * block, 0], tile)
                for i, j in T.Parallel(block, D):
                    acc[i, j] += T.if_then_else(Idx[m, n] * block + i < N, tile[i, j], 0)
                if write_back:
                    Idx[m, n] = Idx[m, n] + 0
            T.copy(acc, Out[m * block, 0])

    return main


def inputs(N, D, tiles, block=32, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((N, D)).astype(np.float32)
    count = -(-N // block)
    num = rng.integers(1, count + 1, tiles).astype(np.int32)
    idx = np.stack([rng.permutation(tiles)[:tiles] % count for _ in range(tiles)]).astype(np.int32)
    return A, num, idx


def reference(A, num, idx, block=32):
    N, D = A.shape
    padded = np.zeros((-(-N // block) * block, D), np.float32)
    padded[:N] = A
    out = [sum(padded[t * block:(t + 1) * block] for t in idx[m, :num[m]])
           for m in range(len(num))]
    return np.concatenate(out)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_next_index_is_loaded_ahead(arch):
    text = emit_cuda(pipelines.cuda(gather_rows(200, 32, 6), arch))[0]
    assert re.search(r"tc_trips_\d+\[0\] = Num\[", text)
    assert re.search(r"tc_next_\d+\[0\] = .*Idx\[.*n \+ 1", text)
    assert not re.search(r"acc.*Idx\[", text)   # the body reads the register


def test_a_tensor_the_kernel_writes_is_read_in_place():
    text = emit_cuda(pipelines.cuda(gather_rows(200, 32, 6, write_back=True), "sm_80"))[0]
    assert "tc_next" not in text


@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
def test_listed_tiles_agree_with_numpy(target):
    N, D, tiles = 200, 32, 6
    A, num, idx = inputs(N, D, tiles)
    kernel = tilecraft.compile(gather_rows(N, D, tiles), out_idx=[-1], target=target)
    out = kernel(A, num, idx)
    assert kernel.reports == []
    np.testing.assert_allclose(out, reference(A, num, idx), rtol=1e-5, atol=1e-4)
