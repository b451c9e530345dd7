"""A kernel built by NVRTC instead of nvcc (runtime/nvrtc.py) loads and computes the same GEMM:
random inputs at a ragged shape against float64 torch, outputs poisoned first."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from tilecraft.backends.cuda.runtime import nvrtc  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_gemm_built_by_nvrtc_runs(example, monkeypatch, tmp_path):
    monkeypatch.setenv("TILECRAFT_COMPILER", "nvrtc")
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    M, N, K = 777, 520, 200
    kernel = tilecraft.compile(underlying(example("gemm").matmul)(
        M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=256))
    a = torch.rand(M, K, device="cuda").sub_(0.5).half()
    b = torch.rand(K, N, device="cuda").sub_(0.5).half()
    c = poisoned(M, N)
    kernel(a, b, c)
    assert rel_error(c, a.double() @ b.double()) < 1e-2
    assert kernel.n_regs > 0
