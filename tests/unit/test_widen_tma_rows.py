"""widen_tma_rows: a pipelined loop whose shared tile has rows narrower than TMA's 16 bytes (four
float16 scales a row) still gets its TMA producer: the tile is widened to 16-byte rows, loaded
from 16-byte-aligned columns of the tensor, and read at its shift; the emulator (which reports a
box starting off a 16-byte boundary, as the GPU refuses it) agrees with the interpreter. Tiles
whose copies cannot be aligned that way keep the cp.async pipeline."""
import numpy as np
import pytest

import tilecraft
import tilecraft.backends.cuda.emulator as E
import tilecraft.language as T
from tilecraft.ir.annotations import PRODUCER_THREADS
from tilecraft.ir.stmt import Allocate, Kernel
from tilecraft.ir.visitor import walk


def scaled_rows(M, K, offset=0, bm=64, bk=64):
    """Y[m, :] = sum over K tiles of X[m, tile] * S[m, 4 k + offset + j // 16]."""
    groups = K // 16 + 8   # rows 16-byte multiples apart, as TMA needs

    @T.prim_func
    def main(X: T.Tensor((M, K), "float16"), S: T.Tensor((M, groups), "float16"),
             Y: T.Tensor((M, bk), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            xs = T.alloc_shared((bm, bk), "float16")
            ss = T.alloc_shared((bm, 4), "float16")
            acc = T.alloc_fragment((bm, bk), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(X[bx * bm, k * bk], xs)
                T.copy(S[bx * bm, k * 4 + offset], ss)
                for i, j in T.Parallel(bm, bk):
                    acc[i, j] += T.cast(xs[i, j], "float32") * T.cast(ss[i, j // 16], "float32")
            T.copy(acc, Y[bx * bm, 0])
    return main


def reference(X, S, offset, bk=64):
    out = np.zeros((X.shape[0], bk), np.float32)
    for k in range(X.shape[1] // bk):
        scale = S[:, 4 * k + offset:4 * k + offset + 4].astype(np.float32)
        out += X[:, k * bk:(k + 1) * bk].astype(np.float32) * np.repeat(scale, 16, axis=1)
    return out


def scale_tile_columns(lowered) -> int:
    (alloc,) = [n for n in walk(lowered.body) if isinstance(n, Allocate) and
                n.buffer.name == "ss"]
    return int(np.prod([int(d) for d in alloc.buffer.shape]))


@pytest.mark.parametrize("M, K", [(64, 512), (100, 384)])
def test_narrow_tile_is_loaded_by_tma_in_wide_rows(M, K):
    func = scaled_rows(M, K)
    lowered = E.lower(func, "sm_90a")
    (kernel,) = [n for n in walk(lowered.body) if isinstance(n, Kernel)]
    assert kernel.attrs.get(PRODUCER_THREADS)          # warp-specialized
    assert scale_tile_columns(lowered) == 2 * 64 * 8   # two versions of 64 rows of 8
    rng = np.random.default_rng(M)
    X = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    S = rng.uniform(0.5, 1.5, (M, K // 16 + 8)).astype(np.float16)
    Y = np.full((M, 64), np.nan, np.float32)
    assert list(E.run(lowered, [X, S, Y])) == []
    np.testing.assert_allclose(Y, reference(X, S, 0), rtol=1e-3, atol=1e-3)
    want = tilecraft.compile(func, target="interp")
    Y2 = np.zeros_like(Y)
    want(X, S, Y2)
    np.testing.assert_allclose(Y, Y2, rtol=1e-5, atol=1e-5)


def test_a_tile_that_cannot_start_on_a_wide_row_keeps_cp_async():
    # columns 4k + 2: the four scales straddle two aligned rows of eight
    lowered = E.lower(scaled_rows(64, 512, offset=2), "sm_90a")
    (kernel,) = [n for n in walk(lowered.body) if isinstance(n, Kernel)]
    assert not kernel.attrs.get(PRODUCER_THREADS)
