"""Element-wise loops that gather from global memory into shared memory (an im2col tile, a
padded or ragged read) read each thread's run of 8 halves with one 16-byte load when the run
is consecutive in the tensor and its condition is the same for the whole run
(tileops/global_runs.py), and in a T.Pipelined loop run ahead as cp.async copies that zero-fill
where the condition fails; otherwise element by element. Checked in the generated CUDA and on
the thread-level emulator against the interpreter."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import conv2d  # noqa: E402

VECTOR = "tc::ld_global_128_pred("
ASYNC = "tc::cp_async_cg_16((&data_shared["


def emulated_equals_interpreted(func, inputs):
    got = tilecraft.compile(func, out_idx=[-1], target="emulator")
    out = got(*inputs)
    assert got.reports == []
    want = tilecraft.compile(func, out_idx=[-1], target="interp")(*inputs)
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=1e-2,
                               atol=1e-2)


@pytest.mark.parametrize("N, C, H, W, F, K, stride, padding, dilation, vector", [
    (2, 16, 9, 7, 16, 3, 1, 1, 1, True),     # channels a multiple of 8: 16-byte runs
    (1, 8, 11, 10, 16, 3, 2, 1, 2, True),    # stride and dilation, ragged output
    (2, 12, 6, 6, 16, 3, 1, 1, 1, False),    # a run of 8 crosses a pixel: one at a time
])
@pytest.mark.parametrize("use_im2col", [False, True], ids=["T.Parallel", "T.c2d_im2col"])
def test_im2col_tiles(N, C, H, W, F, K, stride, padding, dilation, vector, use_im2col):
    func = conv2d.convolution.__wrapped__(N, C, H, W, F, K, K, stride, padding, dilation,
                                          block_M=32, block_N=16, block_K=16, num_stages=2,
                                          threads=64, use_im2col=use_im2col)
    text = emit_cuda(pipelines.cuda_sm80(func))[0]
    assert (ASYNC in text) == vector
    if vector:   # two stages: issued in the prologue and in the loop for the next step
        assert text.count(ASYNC) == 2 and VECTOR not in text
    rng = np.random.default_rng(C)
    data = rng.uniform(-1, 1, (N, H, W, C)).astype(np.float16)
    weight = rng.uniform(-1, 1, (K * K * C, F)).astype(np.float16)
    emulated_equals_interpreted(func, (data, weight))


def ragged_rows(cols, keep):
    """Y = X[:, :64] with the columns from `keep` on zeroed, through a shared tile."""
    @T.prim_func
    def main(X: T.Tensor((64, cols), "float16"), Y: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            for i, j in T.Parallel(64, 64):
                s[i, j] = T.if_then_else(j < keep, X[i, j], 0)
            T.copy(s, Y)
    return main


@pytest.mark.parametrize("cols, keep, vector", [
    (64, 40, True),    # the edge falls between runs
    (64, 42, False),   # ... inside one: element by element
    (60, 64, False),   # the tensor's own edge inside a run (and rows not 16-byte aligned)
])
def test_conditions_split_runs_only_at_their_edges(cols, keep, vector):
    func = ragged_rows(cols, keep)
    assert (VECTOR in emit_cuda(pipelines.cuda_sm80(func))[0]) == vector
    X = np.random.default_rng(cols + keep).uniform(-1, 1, (64, cols)).astype(np.float16)
    emulated_equals_interpreted(func, (X,))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_gather_of_listed_rows_into_two_tiles_runs_ahead(example, arch):
    # vertical-slash attention's columns: K and V rows at positions the block listed in shared
    # memory, one T.Parallel nest filling both tiles, run ahead as cp.async copies
    vs = example("vertical_slash_sparse_attention")
    func = vs.vertical_slash_attention.__wrapped__(1, 2, 130, 16, 20, 3, block_M=32, block_N=32,
                                                   num_stages=3, threads=64)
    text = tilecraft.compile(func, target=arch).get_kernel_source()
    for tile in ("K_shared_2", "V_shared_2"):
        assert f"tc::cp_async_cg_16((&{tile}[(c + 2) % 3 * " in text, tile


def indexed_rows(rows=48, cols=64, listed=96, tile=16):
    """O[i] = sum over steps of KV[Ind[step * tile + i], :] in float32: rows of a tensor at
    indices read from another, gathered into a shared tile in a pipelined loop (sparse MLA's
    top-k rows, paged KV); an index out of range reads zeros."""
    @T.prim_func
    def main(KV: T.Tensor((rows, cols), "float16"), Ind: T.Tensor((listed,), "int32"),
             O: T.Tensor((tile, cols), "float32")):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((tile, cols), "float16")
            acc = T.alloc_fragment((tile, cols), "float32")
            T.clear(acc)
            for k in T.Pipelined(listed // tile, num_stages=2):
                for i, j in T.Parallel(tile, cols):
                    s[i, j] = KV[Ind[k * tile + i], j]
                for i, j in T.Parallel(tile, cols):
                    acc[i, j] += s[i, j]
            T.copy(acc, O)
    return main


def test_rows_gathered_at_loaded_indices_are_16_byte_async_copies():
    """The run of 8 halves a thread copies has one row, Ind[(q * 8 + r) // 8 ...] = Ind[q ...]
    for every r: one 16-byte cp.async, zero-filled where the index is out of range."""
    func = indexed_rows()
    text = emit_cuda(pipelines.cuda_sm80(func))[0]
    assert text.count("tc::cp_async_cg_16((&s[") == 2 and "s_run" not in text
    rng = np.random.default_rng(5)
    kv = rng.uniform(-1, 1, (48, 64)).astype(np.float16)
    ind = rng.integers(-4, 52, 96).astype(np.int32)   # some outside [0, 48): zeros
    emulated_equals_interpreted(func, (kv, ind))
    got = tilecraft.compile(func, out_idx=[-1], target="interp")(kv, ind)
    rows = np.where(((ind >= 0) & (ind < 48))[:, None], kv[np.clip(ind, 0, 47)], 0)
    np.testing.assert_allclose(got, rows.astype(np.float32).reshape(6, 16, 64).sum(0),
                               rtol=1e-3, atol=1e-3)
