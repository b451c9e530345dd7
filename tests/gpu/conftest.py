"""GPU tests: numerics of compiled kernels against torch, on random inputs, with poisoned
outputs. Skipped where there is no usable CUDA GPU."""
import pytest


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        usable = torch.cuda.is_available()
    except ImportError:
        usable = False
    if usable:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and torch with CUDA")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
