"""Comparing a kernel's outputs with a reference's, allowing a fraction of the elements to
differ (TileLang's tolerance rule): used by Profiler.assert_allclose, the autotuner's checks
and tilecraft.testing.torch_assert_close."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .. import arrays


def as_float64(x) -> np.ndarray:
    """x (a numpy array, a torch tensor on any device, or a number) as a float64 host array."""
    if arrays.is_torch(x):
        t = sys.modules["torch"]
        x = x.detach().cpu()
        if x.dtype in (t.bfloat16, t.float16) or "float8" in str(x.dtype) or x.dtype == t.bool:
            x = x.float()
        return np.asarray(x.numpy(), dtype=np.float64)
    return np.asarray(x, dtype=np.float64)


@dataclass
class Mismatch:
    """Which elements of `got` are not close to `want` (both float64 host arrays)."""
    got: np.ndarray
    want: np.ndarray
    close: np.ndarray

    @property
    def count(self) -> int:
        return int(self.close.size - np.count_nonzero(self.close))

    @property
    def total(self) -> int:
        return int(self.close.size)

    def first(self) -> tuple | None:
        """The index of the first element that differs, or None."""
        where = np.argwhere(~self.close)
        return tuple(int(i) for i in where[0]) if len(where) else None

    def max_abs_diff(self) -> float:
        diff = np.abs(self.got - self.want)
        return float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")

    def describe_first(self, got_name: str = "got", want_name: str = "expected") -> str:
        idx = self.first()
        if idx is None:
            return ""
        return (f"first at {idx}: {got_name} {float(self.got[idx])!r}, "
                f"{want_name} {float(self.want[idx])!r}")


def mismatch(got, want, atol: float, rtol: float, equal_nan: bool = False) -> Mismatch:
    """Compare elementwise on the host; ValueError when the shapes differ."""
    g, w = as_float64(got), as_float64(want)
    if g.shape != w.shape:
        raise ValueError(f"shape {g.shape} differs from {w.shape}")
    return Mismatch(g, w, np.isclose(g, w, atol=atol, rtol=rtol, equal_nan=equal_nan))


def compare(name: str, got, want, atol: float, rtol: float, max_mismatched_ratio: float):
    """Raise AssertionError when more than max_mismatched_ratio of the elements differ."""
    if arrays.is_torch(got) and arrays.is_torch(want) and got.device == want.device and \
            got.shape == want.shape:
        # On the tensors' device: copying an 8192 x 8192 output to the host and comparing it
        # there costs about a second per candidate an autotuner checks.
        g, w = got.detach().double(), want.detach().double()
        close = sys.modules["torch"].isclose(g, w, rtol=rtol, atol=atol, equal_nan=False)
        bad = int(close.numel() - int(close.sum()))
        if bad <= max_mismatched_ratio * max(1, close.numel()):
            return
    try:
        found = mismatch(got, want, atol, rtol)
    except ValueError:
        raise AssertionError(f"{name}: shape {as_float64(got).shape} differs from the "
                             f"reference's {as_float64(want).shape}") from None
    if found.count > max_mismatched_ratio * max(1, found.total):
        raise AssertionError(
            f"{name}: {found.count} of {found.total} elements differ beyond atol={atol}, "
            f"rtol={rtol} ({found.describe_first()}; max abs diff {found.max_abs_diff()})")
