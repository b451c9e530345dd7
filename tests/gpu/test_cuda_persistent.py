"""Persistent warp-specialized kernels (tl.enable_persistent_tiles) on the GPU: the paper's GEMM,
attention (causal: tiles of different lengths), each block looping over the tiles
of the grid, against torch in float32 / float64 on random inputs with poisoned outputs, at
ragged sizes, with as many blocks as SMs and with a few blocks (many tiles each)."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402
from test_cuda_rotation import check_attention  # noqa: E402

PERSISTENT = tilecraft.PassConfigKey.TL_ENABLE_PERSISTENT_TILES
FAST = {tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True}


def _persistent_source(kernel) -> str:
    source = kernel.get_kernel_source()
    assert "_round * gridDim.x + (" in source, "no loop over tiles"
    return source


@pytest.mark.parametrize("M, N, K, tiles", [
    (1000, 1000, 1000, dict(block_M=128, block_N=256, block_K=64, num_stages=3)),
    (777, 1336, 520, dict(block_M=128, block_N=256, block_K=64, num_stages=4)),
    (300, 520, 136, dict(block_M=128, block_N=128, block_K=64, num_stages=3)),
    (64, 64, 40, dict(block_M=128, block_N=128, block_K=64, num_stages=3)),  # one tile
    # 4 stages: the staging tile goes in two column bands, of two register runs each here
    (1000, 1000, 520, dict(block_M=256, block_N=128, block_K=64, num_stages=4)),
])
@pytest.mark.parametrize("blocks", [True, 3], ids=["per_sm", "three_blocks"])
def test_gemm(example, M, N, K, tiles, blocks):
    gemm = example("gemm")
    kernel = tilecraft.compile(underlying(gemm.matmul)(M, N, K, threads=256, swizzle_panel=4,
                                                       **tiles),
                               pass_configs={PERSISTENT: blocks})
    source = _persistent_source(kernel)
    if tiles["num_stages"] == 4:
        runs = tiles["block_M"] // 128   # m64 instructions per warpgroup: register runs per band
        assert source.count("tc::stmatrix_x4(") == 2 * runs, "the epilogue is not in bands"
    a = torch.rand(M, K, device="cuda").sub_(0.5).half()
    b = torch.rand(K, N, device="cuda").sub_(0.5).half()
    c = poisoned(M, N)
    kernel(a, b, c)
    assert not torch.isnan(c).any(), "unwritten output elements"
    assert rel_error(c, a.double() @ b.double()) < 5e-3


@pytest.mark.parametrize("M, N, K", [(4000, 2104, 1000), (2176, 8200, 264)])   # TMA rows
def test_a_gemm_over_several_waves_is_persistent_by_default(example, M, N, K):
    gemm = example("gemm")
    kernel = tilecraft.compile(underlying(gemm.matmul)(M, N, K, block_M=128, block_N=256,
                                                       block_K=64, threads=256, num_stages=4))
    _persistent_source(kernel)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = poisoned(M, N)
    kernel(a, b, c)
    assert not torch.isnan(c).any(), "unwritten output elements"
    assert rel_error(c, a.double() @ b.double()) < 5e-3


@pytest.mark.parametrize("B, H, S, D, causal, tiles", [
    (2, 4, 1000, 128, False, dict(block_M=128, block_N=128, threads=256)),
    (2, 4, 1000, 128, True, dict(block_M=128, block_N=128, threads=256)),
    (1, 3, 333, 64, True, dict(block_M=64, block_N=64, threads=128)),
    (1, 2, 50, 64, False, dict(block_M=64, block_N=64, threads=128)),    # 1 iteration
])
@pytest.mark.parametrize("blocks", [True, 5], ids=["per_sm", "five_blocks"])
def test_attention(example, B, H, S, D, causal, tiles, blocks):
    fa = example("flash_attention")
    kernel = tilecraft.compile(underlying(fa.flash_attention)(B, H, S, D, causal, num_stages=3,
                                                              **tiles),
                               pass_configs={**FAST, PERSISTENT: blocks})
    _persistent_source(kernel)
    check_attention(kernel, B, H, S, D, causal)
