"""The guards of the GPU test modules: each skips its calling module where what it needs is
missing."""
import pytest

from tilecraft.backends.cuda.runtime import current_arch, has_cuda_device, has_nvcc


def require_cuda():
    """A CUDA GPU, nvcc and torch with CUDA. Returns torch."""
    if not has_cuda_device():
        pytest.skip("no CUDA device", allow_module_level=True)
    if not has_nvcc():
        pytest.skip("nvcc is not installed", allow_module_level=True)
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA", allow_module_level=True)
    return torch


def require_hopper(needs: str):
    """require_cuda, and the GPU an sm_90 one; `needs` says what for. Returns torch."""
    torch = require_cuda()
    if current_arch() != "sm_90a":
        pytest.skip(f"{needs} an sm_90 (Hopper) GPU", allow_module_level=True)
    return torch
