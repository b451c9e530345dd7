"""set_autotune_inputs (TileLang's): the tensors tuning runs candidates on, for the tuning
started inside the `with` block on this thread, instead of random inputs.

    with set_autotune_inputs(a, b):        # or set_autotune_inputs([a, b])
        kernel = matmul(M, N, K)           # every candidate (and the reference) runs on a, b
"""
from __future__ import annotations

import threading

from ..errors import TileError

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class AutotuneInputsCapture:
    """The context manager set_autotune_inputs returns."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: list):
        self.tensors = tensors

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        return False


def set_autotune_inputs(*args) -> AutotuneInputsCapture:
    """set_autotune_inputs(a, b, c) or set_autotune_inputs([a, b, c])."""
    tensors = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else \
        list(args)
    return AutotuneInputsCapture(tensors)


def get_autotune_inputs() -> list | None:
    """The innermost set_autotune_inputs' tensors on this thread, or None."""
    stack = _stack()
    return stack[-1].tensors if stack else None


def describe(tensors: list) -> list:
    """Shapes and dtypes of captured inputs (what tells one capture from another)."""
    return [[list(getattr(t, "shape", ())), str(getattr(t, "dtype", type(t).__name__))]
            for t in tensors]


def supply_of(tensors: list, name: str):
    """A supply_prog giving the captured tensors, checked against the kernel's inputs."""
    def captured_inputs(params):
        if len(params) != len(tensors):
            names = ", ".join(p.name for p in params)
            raise TileError(f"autotune {name}: set_autotune_inputs gave {len(tensors)} "
                            f"tensor(s), but the kernel takes {len(params)} input(s) ({names})")
        return list(tensors)
    return captured_inputs
