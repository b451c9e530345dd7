"""T.c2d_im2col's tile loaded by TMA in im2col mode on a Hopper GPU: examples/conv2d.py at
shapes whose channels are a multiple of block_K (where the warp-specialized producer takes the
im2col load), with padding 0 / 1 / 2, stride 1 / 2, dilation 1 / 2, 1x1 kernels, tiles that
cross from one image into the next and a last tile past the final image; random inputs, the
output poisoned with NaN first, compared with torch's float32 convolution. Each kernel's source
must hold the im2col load (else the test would pass on the cp.async gather it replaces)."""
import sys
from pathlib import Path

import pytest

from gpu_requirements import require_hopper

torch = require_hopper("TMA im2col needs")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import conv2d  # noqa: E402
import tilecraft  # noqa: E402

CASES = [  # (N, C, H, W, F, K), (stride, padding, dilation), config
    ((2, 64, 7, 9, 72, 3), (1, 1, 1), dict(block_M=64, block_N=64, block_K=64)),
    ((3, 32, 11, 10, 40, 3), (2, 2, 2), dict(block_M=128, block_N=64, block_K=32)),
    ((5, 128, 5, 5, 64, 1), (1, 0, 1), dict(block_M=128, block_N=64, block_K=64)),
    ((2, 64, 14, 14, 128, 3), (2, 1, 1), dict(block_M=128, block_N=128, block_K=64,
                                              threads=256)),
    ((1, 256, 13, 13, 96, 3), (1, 1, 1), dict(block_M=64, block_N=96, block_K=128,
                                              num_stages=2)),
]


@pytest.mark.parametrize("shape, conv, config", CASES, ids=[str(i) for i in range(len(CASES))])
def test_conv2d_with_tma_im2col(shape, conv, config):
    N, C, H, W, F, K = shape
    S, P, D = conv
    kernel = tilecraft.compile(conv2d.convolution.get_tir(N, C, H, W, F, K, K, S, P, D,
                                                          **config))   # out passed, poisoned
    assert "tma_load_im2col_4d" in kernel.get_kernel_source()
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    data = torch.rand((N, H, W, C), device="cuda", generator=gen, dtype=torch.float16) * 2 - 1
    weight = torch.rand((K, K, C, F), device="cuda", generator=gen, dtype=torch.float16) * 2 - 1
    OH, OW = (conv2d.out_size(s, K, S, P, D) for s in (H, W))
    out = torch.full((N * OH * OW, F), float("nan"), device="cuda", dtype=torch.float16)
    kernel(data, weight.reshape(K * K * C, F), out)
    ref = torch.nn.functional.conv2d(data.permute(0, 3, 1, 2).float(),
                                     weight.permute(3, 2, 0, 1).float(), stride=S, padding=P,
                                     dilation=D).permute(0, 2, 3, 1).reshape(-1, F)
    assert not out.isnan().any()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    assert err < 2e-3, err
