"""torch without a GPU, for the census: a CUDA device asked of torch (device="cuda",
tensor.cuda(), tensor.to("cuda")) is answered with the CPU, and torch.cuda's bookkeeping
calls that need a driver (synchronize, seeding, the device's name and capability) answer as an
H100 would, so that an example gets as far as building its kernels."""
from __future__ import annotations


def _is_cuda(value) -> bool:
    import torch
    if isinstance(value, str):
        return value.split(":")[0] == "cuda"
    return isinstance(value, torch.device) and value.type == "cuda"


def install() -> bool:
    """Install the mode; False where torch is not installed."""
    try:
        import torch
        from torch.overrides import TorchFunctionMode
    except ImportError:
        return False

    class CpuForCuda(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return args[0]
            if _is_cuda(kwargs.get("device")):
                kwargs["device"] = "cpu"
            args = tuple("cpu" if _is_cuda(a) else a for a in args)
            return func(*args, **kwargs)

    CpuForCuda().__enter__()  # for the rest of the process
    cuda = torch.cuda
    cuda.synchronize = lambda *a, **k: None
    cuda.manual_seed = cuda.manual_seed_all = lambda *a, **k: None
    cuda.empty_cache = lambda *a, **k: None
    cuda.get_device_capability = lambda *a, **k: (9, 0)
    cuda.get_device_name = lambda *a, **k: "NVIDIA H100 80GB HBM3"
    cuda.current_device = lambda *a, **k: 0
    cuda.device_count = lambda *a, **k: 1
    return True
