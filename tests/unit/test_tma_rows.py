"""1-d shared tiles moved by TMA on sm_90a (a chunk's row of a [B, H, T] tensor, loaded in a
pipelined loop and stored back) are stored in order; the emulator runs such a kernel against
numpy, with a ragged last row."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda


def chunk_cumsums(H, n, block=64):
    """Y[h, c * block + i] = the sum of X[h, c * block .. c * block + i]: a cumulative sum
    within each chunk of a row."""
    @T.prim_func
    def main(X: T.Tensor((H, n), "float32"), Y: T.Tensor((H, n), "float32")):
        with T.Kernel(H, threads=128) as bh:
            row = T.alloc_shared((block,), "float32")
            for c in T.Pipelined(T.ceildiv(n, block), num_stages=2):
                T.copy(X[bh, c * block:(c + 1) * block], row)
                T.cumsum(row, dim=0)
                T.copy(row, Y[bh, c * block:(c + 1) * block])
    return main


def test_rows_move_as_tma_boxes_on_sm90a():
    text = emit_cuda(pipelines.cuda(chunk_cumsums(4, 1024), "sm_90a", 227 * 1024))[0]
    assert "tc::tma_load_2d(" in text and "tc::tma_store_2d(" in text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_chunk_cumsums_on_the_emulator(arch):
    H, n = 3, 1000   # 15 full chunks of 64 and one of 40
    X = np.random.default_rng(0).standard_normal((H, n)).astype(np.float32)
    kernel = tilecraft.compile(chunk_cumsums(H, n), out_idx=[-1], target=f"emulator:{arch}")
    Y = kernel(X)
    assert kernel.reports == []
    padded = np.zeros((H, 16 * 64), np.float32)
    padded[:, :n] = X
    want = np.cumsum(padded.reshape(H, 16, 64), axis=2).reshape(H, -1)[:, :n]
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-5)
