"""Python's own numeric functions called on device values, and what to call instead.

`max(x, 0.0)`, `math.exp(x)` or `numpy.sqrt(x)` on a buffer element runs in Python while the
kernel is compiled; Python then asks the device value for a truth value or a float, which it
does not have, and the error it gets says nothing about the function. When such a call fails
and one of its arguments is a device value, the message names the function and the builtin
of the language that computes it on the device.
"""
from __future__ import annotations

import builtins
import math

from ..ir.buffer import Buffer, BufferRegion
from ..ir.expr import Expr

# Modules whose functions compute on Python numbers only.
_NUMERIC_MODULES = ("builtins", "math", "cmath", "numpy", "operator")
# (bool() is left out: the truth-value error of a device value says what to do instead.)
_NUMERIC_BUILTINS = ("max", "min", "abs", "round", "pow", "float", "int", "sum", "divmod")
# Python names whose language builtin has another name (or is written differently).
_RENAMED = {"fabs": "T.abs", "maximum": "T.max", "minimum": "T.min", "fmax": "T.max",
            "fmin": "T.min", "power": "T.pow", "where": "T.if_then_else", "clip": "T.clamp",
            "float": 'T.cast(x, "float32")', "int": 'T.cast(x, "int32")',
            "sum": "+ (or T.reduce_sum over a tile)",
            "expm1": "T.exp(x) - 1", "hypot": "T.sqrt(x * x + y * y)"}


def _home(func) -> str | None:
    """'math', 'numpy', ... for a function of a numeric module, else None."""
    module = getattr(func, "__module__", None)
    if module is None and type(func).__name__ == "ufunc":
        module = "numpy"
    if module is None and getattr(builtins, getattr(func, "__name__", ""), None) is func:
        module = "builtins"
    if module is None:
        return None
    top = module.split(".")[0]
    return top if top in _NUMERIC_MODULES else None


def _device(value, depth: int = 0) -> bool:
    if isinstance(value, (Expr, Buffer, BufferRegion)):
        return True
    if isinstance(value, (list, tuple)) and depth < 2:
        return any(_device(v, depth + 1) for v in value)
    return False


def python_function_on_device_values(func, args, kwargs) -> str | None:
    """The message for a failed call of a Python numeric function given device values; None
    when func is not one, or no argument is a device value."""
    home = _home(func)
    name = getattr(func, "__name__", repr(func))
    if home is None or (home == "builtins" and name not in _NUMERIC_BUILTINS) or \
            not (_device(args) or _device(tuple(kwargs.values()))):
        return None
    written = f"Python's {name}()" if home == "builtins" else f"{home}.{name}()"
    from .. import language as T
    instead = _RENAMED.get(name)
    if instead is None and callable(getattr(T, name, None)) and name not in ("Tensor",
                                                                             "Buffer"):
        instead = f"T.{name}"
    if instead is None and home == "math" and hasattr(math, name):
        instead = "the T.* math builtins (T.exp, T.log, T.sqrt, ...)"
    advice = f"use {instead}" if instead else "compute it with the T.* builtins"
    return (f"{written} computes on numbers while the kernel is compiled and cannot take a "
            f"device value (a buffer element or an expression of one); {advice}")
