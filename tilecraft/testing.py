"""TileLang's `tilelang.testing`, for test scripts: `main()` runs the calling file's tests
under pytest, `set_random_seed`, `torch_assert_close`, decorators that skip a test where
the GPU it needs is missing (`requires_cuda`, `requires_cuda_compute_version(9, 0)` and its
_ge / _gt / _eq / _lt / _le forms, `requires_package("name")`; these need pytest), and the
performance-regression pair: `process_func(perf_fn, name)` runs one measurement and keeps its
result, `regression()` runs the calling script's `regression_*` functions and prints them."""
from __future__ import annotations

import importlib.util
import inspect
import random
import sys

from .errors import TileError
from .utils.tensor import torch_assert_close  # noqa: F401  (TileLang exports it here)

_MODES = {"ge": lambda have, want: have >= want, "gt": lambda have, want: have > want,
          "eq": lambda have, want: have == want, "le": lambda have, want: have <= want,
          "lt": lambda have, want: have < want}


def _pytest():
    try:
        import pytest
    except ImportError:
        raise TileError("tilecraft.testing needs pytest, which is not installed") from None
    return pytest


def main():
    """Run the calling test file with pytest (its command-line arguments passed on)."""
    test_file = inspect.getsourcefile(sys._getframe(1))
    sys.exit(_pytest().main([test_file] + sys.argv[1:]))


def set_random_seed(seed: int = 42) -> None:
    """Seed Python's, numpy's and (where installed) torch's generators, every GPU's too."""
    import numpy as np
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def cuda_usable() -> bool:
    """A CUDA GPU with torch to hand it tensors: what running a compiled kernel needs."""
    from .placement import _gpu_available
    return _gpu_available()


def compute_version() -> tuple:
    """(major, minor) of the current GPU, (0, 0) without one."""
    from .backends.cuda.runtime.device import compute_capability, has_cuda_device
    return compute_capability() if has_cuda_device() else (0, 0)


def requires_cuda(func):
    """Skip the test unless a CUDA GPU is usable."""
    return _pytest().mark.skipif(not cuda_usable(), reason="needs a CUDA GPU")(func)


requires_gpu = requires_cuda


def requires_cuda_compute_version(major_version: int, minor_version: int = 0, mode: str = "ge"):
    """Skip the test unless a CUDA GPU is usable and its compute capability compares to
    (major, minor) as mode says ("ge", "gt", "eq", "le", "lt")."""
    if mode not in _MODES:
        raise TileError(f"requires_cuda_compute_version: mode must be one of "
                        f"{', '.join(_MODES)}, got {mode!r}")
    want, have = (major_version, minor_version), compute_version()
    ok = cuda_usable() and _MODES[mode](have, want)
    reason = f"needs a CUDA GPU of compute capability {mode} {want[0]}.{want[1]} " \
             f"(here: {have[0]}.{have[1]})"
    return _pytest().mark.skipif(not ok, reason=reason)


def requires_cuda_compute_version_ge(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "ge")


def requires_cuda_compute_version_gt(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "gt")


def requires_cuda_compute_version_eq(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "eq")


def requires_cuda_compute_version_le(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "le")


def requires_cuda_compute_version_lt(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "lt")


def requires_package(*packages: str):
    """Skip the test unless every named package can be imported."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    return _pytest().mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


_measured: list = []  # (name, what the perf function returned), in the order they ran


def process_func(func, name: str | None = None, *args, **kwargs):
    """Run a performance function (TileLang's examples' `run_regression_perf`) and keep what it
    returns (its latency) under `name` (default: its module and name) for regression() to
    print. A function taking `argv` that is not given one gets an empty list: it measures its
    own defaults, not the command line of the script that called it."""
    if "argv" in inspect.signature(func).parameters and "argv" not in kwargs and not args:
        kwargs["argv"] = []
    result = func(*args, **kwargs)
    _measured.append((name or f"{func.__module__}.{func.__qualname__}", result))
    return result


def regression(functions=None) -> list:
    """Run every `regression_*` function of the calling script (or the given ones), then print
    one line per measurement process_func kept: its name and result. Returns those pairs."""
    if functions is None:
        scope = sys._getframe(1).f_globals
        functions = [f for n, f in scope.items() if n.startswith("regression_") and callable(f)
                     and getattr(f, "__module__", None) == scope.get("__name__")]
    start = len(_measured)
    for f in functions:
        f()
    found = _measured[start:]
    width = max((len(n) for n, _ in found), default=0)
    for n, result in found:
        shown = f"{result:.4f}" if isinstance(result, float) else str(result)
        print(f"{n:<{width}}  {shown}")
    return found
