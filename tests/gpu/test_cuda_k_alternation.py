"""GEMMs whose blocks of odd waves walk K downwards (alternate_k_direction) against float64,
on random inputs into poisoned outputs: grids of two waves and more (more blocks than the GPU
has SMs), ragged M, N and K, the alternation on and off. On an sm_90a device the kernel asks
for the wave parity exactly when the alternation is on. (The GEMM is not persistent here: a
persistent kernel's tiles take turns in a serpentine order of its own.)"""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402

PLAIN = {tilecraft.PassConfigKey.TL_ENABLE_PERSISTENT_TILES: False}
OFF = {**PLAIN, tilecraft.PassConfigKey.TL_DISABLE_K_ALTERNATION: True}


# Rows of 16-byte multiples (TMA), so the copies run on the warp-specialized path.
@pytest.mark.parametrize("M, N, K", [(2176, 2048, 200), (1000, 4104, 328)])
@pytest.mark.parametrize("alternate", [True, False], ids=["alternating", "upwards"])
def test_gemm_over_several_waves(example, M, N, K, alternate):
    gemm = example("gemm")
    func = underlying(gemm.matmul)(M, N, K, block_M=128, block_N=128, block_K=64,
                                   threads=256, num_stages=3, swizzle_panel=8)
    kernel = tilecraft.compile(func, pass_configs=PLAIN if alternate else OFF)
    if torch.cuda.get_device_capability() == (9, 0):
        asks = "launch_wave_parity" in kernel.get_kernel_source()
        assert asks == alternate
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = poisoned(M, N)
    kernel(a, b, c)
    assert not torch.isnan(c).any(), "unwritten output elements"
    assert rel_error(c, a.double() @ b.double()) < 5e-3
