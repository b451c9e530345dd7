"""split_loop_tiles: a shared tile filled in two T.Pipelined loops gets a tile per loop, so both
loops pipeline (num_stages >= 2); checked in the CUDA source and on the sm_80 / sm_90a
emulators against numpy. A tile read after its loop is still refused with the tile's name."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T



def two_passes(rows=96, blk=32, D=32, stages=2, read_after=False):
    """Y = (sum of X's row tiles) + (sum of Z's row tiles), both through the tile `t`."""
    @T.prim_func
    def main(X: T.Tensor((rows, D), "float16"), Z: T.Tensor((rows, D), "float16"),
             Y: T.Tensor((blk, D), "float32")):
        with T.Kernel(1, threads=128) as bx:
            t = T.alloc_shared((blk, D), "float16")
            acc = T.alloc_fragment((blk, D), "float32")
            T.clear(acc)
            for i in T.Pipelined(rows // blk, num_stages=stages):
                T.copy(X[i * blk, 0], t)
                for r, c in T.Parallel(blk, D):
                    acc[r, c] += t[r, c]
            for i in T.Pipelined(rows // blk, num_stages=stages):
                for r, c in T.Parallel(blk, D):
                    t[r, c] = Z[i * blk + r, c]
                for r, c in T.Parallel(blk, D):
                    acc[r, c] += t[r, c]
            if read_after:
                T.copy(t, Y)
            else:
                T.copy(acc, Y)
    return main


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
def test_two_loops_through_one_tile(target, stages):
    rng = np.random.default_rng(stages)
    X, Z = (rng.uniform(-1, 1, (96, 32)).astype(np.float16) for _ in range(2))
    want = (X.astype(np.float32).reshape(3, 32, 32).sum(0) +
            Z.astype(np.float32).reshape(3, 32, 32).sum(0))
    kernel = tilecraft.compile(two_passes(stages=stages), out_idx=[-1], target=target)
    np.testing.assert_allclose(kernel(X, Z), want, rtol=1e-4, atol=1e-4)
    assert kernel.reports == []


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_each_loop_stages_through_its_own_versions(arch):
    text = tilecraft.compile(two_passes(), target=arch).get_kernel_source()
    assert "t_2[" in text and "t[" in text


def test_a_tile_read_after_its_loop_is_still_refused():
    def program():
        tilecraft.compile(two_passes(read_after=True), target="sm_80")
    with pytest.raises(tilecraft.TileError, match="shared tile t is filled inside a pipelined"):
        program()
