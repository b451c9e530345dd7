"""Shared by the GPU tests: poisoned outputs and relative errors."""
import torch


def poisoned(*shape, dtype=None):
    """An output tensor full of NaN (or -1 for integers), so unwritten elements show."""
    dtype = dtype or torch.float16
    t = torch.empty(*shape, dtype=dtype, device="cuda")
    t.fill_(float("nan") if dtype.is_floating_point else -1)
    return t


def rel_error(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))
