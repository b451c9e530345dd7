"""TVM's `tirx` names that TileLang kernel scripts use to build scalar expressions (typed
constants, bit reinterpretation, selection), as tilecraft expressions of the kernel being
traced. Anything else from TVM's tirx stops on a TileError naming it."""
from __future__ import annotations

from ..errors import TileError
from ..ir import expr as _ex
from ..ir.dtypes import dtype as _dtype
from ..language import math as _math

PrimExpr = _ex.Expr  # for annotations: `val: tirx.PrimExpr`


def const(value, dtype="int32"):
    """A constant of `dtype` (TVM's default type for an integer constant is int32)."""
    return _dtype(dtype)(value)


def reinterpret(dtype, value):
    """The bits of `value` read as `dtype` (TVM's argument order; T.reinterpret takes both)."""
    return _math.reinterpret(value, dtype)


def Select(condition, true_value, false_value):  # noqa: N802  (TVM's name)
    """condition ? true_value : false_value; both sides are evaluated, as TVM's Select."""
    return _math.if_then_else(condition, true_value, false_value)


Cast = _math.Cast  # TVM's order: Cast(dtype, value)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise TileError(f"tvm.tirx.{name} is not part of tilecraft (of tirx it has const, "
                    f"reinterpret, Select, Cast and PrimExpr)")
