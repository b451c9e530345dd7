"""A loop whose trip count reads the block index (a kernel written to run one tile per block
or, with fewer blocks, several: T.ceildiv(tiles - bx, grid)) becomes a constant loop where the
grid's range of bx leaves one value (passes/fold_loop_extents.py), so pipelining needs no
guard against the trip count; where it does not, the bound stays as written. Checked in the
generated CUDA and against numpy on the interpreter and the emulator."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda


def row_sums(N, K, grid, block_N=8, block_K=64):
    """C[n] = sum of row n of A; block bx takes row tiles bx, bx + grid, ..."""
    tiles, k_tiles = T.ceildiv(N, block_N), T.ceildiv(K, block_K)

    @T.prim_func
    def main(A: T.Tensor((N, K), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(grid, threads=64) as bx:
            tile = T.alloc_shared((block_N, block_K), "float32")
            part = T.alloc_fragment((block_N, block_K), "float32")
            acc = T.alloc_fragment((block_N,), "float32")
            T.clear(part)
            for t in T.Pipelined(T.ceildiv(tiles - bx, grid) * k_tiles, num_stages=2):
                n = (bx + t // k_tiles * grid) * block_N
                k = t % k_tiles
                T.copy(A[n, k * block_K], tile)
                for i, j in T.Parallel(block_N, block_K):
                    part[i, j] += tile[i, j]
                if k == k_tiles - 1:
                    T.reduce_sum(part, acc, dim=1)
                    T.copy(acc, C[n])
                    T.clear(part)

    return main


@pytest.mark.parametrize("N, K, grid, constant", [
    (64, 256, 8, True),      # one row tile per block: 4 iterations each
    (60, 200, 8, True),      # ragged rows and columns, still one tile per block
    (64, 256, 3, False),     # 8 tiles over 3 blocks: 3, 3 and 2 tiles
])
def test_trip_count_folds_where_the_grid_decides_it(N, K, grid, constant):
    func = row_sums(N, K, grid)
    text = emit_cuda(pipelines.cuda_sm80(func))[0]
    k_tiles = -(-K // 64)
    assert (f"t < {k_tiles};" in text) == constant
    assert ("/ 3" in text) == (not constant)
    A = np.random.default_rng(0).standard_normal((N, K)).astype(np.float32)
    for target in ("interp", "emulator"):
        kernel = tilecraft.compile(func, out_idx=[-1], target=target)
        np.testing.assert_allclose(kernel(A), A.sum(axis=1), rtol=1e-5, atol=1e-4)
