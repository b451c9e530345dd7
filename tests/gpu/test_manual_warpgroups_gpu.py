"""On the GPU: warp specialization written by hand (T.ws regions, mbarriers, T.tma_copy), the
programs of the unit test test_manual_warpgroups.py, on random inputs with poisoned outputs and
ragged sizes, against float64 numpy, repeated so that a phase error shows as a hang or a wrong
tile rather than passing once by luck."""
import pathlib
import sys

import numpy as np
import pytest

from gpu_requirements import require_cuda

torch = require_cuda()

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
import tilecraft  # noqa: E402
import test_manual_warpgroups as mw  # noqa: E402


@pytest.mark.parametrize("factory, shape, options", mw.CASES)
def test_hand_specialized_gemms_on_the_gpu(factory, shape, options):
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    A = torch.rand(M, K, device="cuda", generator=gen).mul_(2).sub_(1).half()
    B = torch.rand(K, N, device="cuda", generator=gen).mul_(2).sub_(1).half()
    kernel = tilecraft.compile(factory(M, N, K, **options), target="cuda")
    want = A.double() @ B.double()
    for _ in range(3):
        C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kernel(A, B, C)
        torch.cuda.synchronize()
        assert not torch.isnan(C).any()
        np.testing.assert_allclose(C.double().cpu().numpy(), want.cpu().numpy(),
                                   rtol=1e-2, atol=1e-2)
