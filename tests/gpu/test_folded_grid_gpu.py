"""A grid over 65535 blocks along y or z (known when written) runs folded along x
(grid_limits.py): every block gets its own coordinates, each element written once."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402


def coordinates(gx, gy, gz):
    @T.prim_func
    def main(Out: T.Tensor((gz, gy, gx), "int32")):
        with T.Kernel(gx, gy, gz, threads=32) as (bx, by, bz):
            tx = T.get_thread_binding()
            if tx == 0:
                Out[bz, by, bx] = (bz * gy + by) * gx + bx
    return main


@pytest.mark.parametrize("grid", [(3, 70000, 1), (2, 3, 65537), (1, 131072, 2)])
def test_every_block_of_a_folded_grid_writes_its_own_element(grid):
    gx, gy, gz = grid
    kernel = tilecraft.compile(coordinates(gx, gy, gz))
    out = torch.full((gz, gy, gx), -1, dtype=torch.int32, device="cuda")
    kernel(out)
    want = torch.arange(gx * gy * gz, dtype=torch.int32, device="cuda").reshape(gz, gy, gx)
    assert torch.equal(out, want)
