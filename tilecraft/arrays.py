"""Moving user arrays (numpy, CPU torch tensors) in and out of the interpreter without copies."""
from __future__ import annotations

import sys

import numpy as np

from .errors import TileError
from .ir import dtypes as dt

# torch dtypes that numpy cannot view directly travel as same-width integers.
_TORCH_VIEW = {"bfloat16": "int16", "float8_e4m3": "uint8", "float8_e5m2": "uint8"}


def _torch():
    return sys.modules.get("torch")


def is_torch(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def needs_grad(values) -> bool:
    """Whether autograd records operations on any of these tensors now."""
    t = _torch()
    return t is not None and t.is_grad_enabled() and \
        any(isinstance(x, t.Tensor) and x.requires_grad for x in values)


# The tensor classes of torch.compile's graph capture (AOT autograd's tracing): they hold no
# data a kernel could run on, so a call given one goes through the kernel's torch operator.
TRACING_TENSORS = frozenset({"FakeTensor", "FunctionalTensor"})


def traced(values) -> bool:
    """Whether any of these is a tensor of torch's tracing (TRACING_TENSORS)."""
    return any(type(x).__name__ in TRACING_TENSORS for x in values)


def to_numpy(x, name: str) -> np.ndarray:
    """A numpy view of x (numpy array or CPU torch tensor) sharing its memory."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch(x):
        if x.device.type != "cpu":
            raise TileError(f"argument {name} is on {x.device}, but this kernel runs on the CPU "
                            "interpreter; pass a CPU tensor or numpy array")
        d = dt.dtype(str(x.dtype))
        if d.name in _TORCH_VIEW:
            t = _torch()
            return x.detach().view(getattr(t, _TORCH_VIEW[d.name])).numpy().view(d.numpy)
        return x.detach().numpy()
    raise TileError(f"argument {name} must be a numpy array or a torch tensor, got "
                    f"{type(x).__name__}")


def import_torch():
    """torch, imported now where the caller has not (a script that never imports torch itself
    still gets its profiler's inputs on the GPU as torch tensors)."""
    t = _torch()
    if t is not None:
        return t
    try:
        import torch
    except ImportError:
        raise TileError("torch tensors are asked for here (a GPU kernel's inputs and outputs "
                        "are torch tensors), but torch is not installed") from None
    return torch


def from_numpy(a: np.ndarray, like_torch: bool):
    if not like_torch:
        return a
    t = import_torch()
    d = dt.dtype(a.dtype)
    if d.name in _TORCH_VIEW:
        raw = t.from_numpy(a.view(getattr(np, _TORCH_VIEW[d.name])))
        return raw.view(d.as_torch())
    return t.from_numpy(a)


def dtype_of(x) -> dt.DType:
    if isinstance(x, np.ndarray):
        return dt.dtype(x.dtype)
    return dt.dtype(str(x.dtype))


def torch_dtype(d: dt.DType):
    """The torch dtype of an IR dtype."""
    return d.as_torch()
