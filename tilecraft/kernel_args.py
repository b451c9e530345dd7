"""A kernel call's arguments checked against the prim_func's parameters: out_idx, scalars in
their type's range, tensors of the declared dtype and shape with symbolic sizes bound
consistently, and the shapes of the outputs the call allocates."""
from __future__ import annotations

import numpy as np

from . import arrays
from .errors import TileError
from .ir import dtypes as dt
from .ir.buffer import Buffer
from .ir.expr import Const, Expr, Var


def normalize_out_idx(out_idx, func, span=None) -> list[int]:
    """out_idx as sorted non-negative indices; span is where out_idx was written, if known."""
    if out_idx is None:
        return []
    items = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    n = len(func.params)
    out = []
    for i in items:
        if not isinstance(i, int) or not -n <= i < n:
            raise TileError(f"out_idx {i!r} is out of range for {func.name}, which has {n} "
                            "parameters", span)
        i %= n
        if not isinstance(func.params[i], Buffer):
            raise TileError(f"out_idx {i} names the scalar parameter {func.params[i].name}; only "
                            "tensors can be outputs", span)
        out.append(i)
    return sorted(set(out))


def scalar_value(p: Var, arg):
    if isinstance(arg, (np.generic,)):
        arg = arg.item()
    if p.dtype.is_float:
        if not isinstance(arg, (int, float)) or isinstance(arg, bool):
            raise TileError(f"argument {p.name} must be a number ({p.dtype}), got "
                            f"{type(arg).__name__}")
        with np.errstate(over="ignore"):
            value = np.dtype(p.dtype.numpy).type(arg)
        if np.isfinite(arg) and not np.isfinite(value):
            raise TileError(f"argument {p.name} is {arg}, beyond the largest {p.dtype} "
                            f"({float(dt.max_value(p.dtype)):g})")
        return value
    if isinstance(arg, bool) or not isinstance(arg, int):
        raise TileError(f"argument {p.name} must be an int ({p.dtype}), got {type(arg).__name__}")
    info = np.iinfo(p.dtype.numpy)
    if not info.min <= arg <= info.max:
        raise TileError(f"argument {p.name} is {arg}, out of the range of {p.dtype} "
                        f"[{info.min}, {info.max}]; declare the parameter with a wider type "
                        "(T.int64)")
    return np.dtype(p.dtype.numpy).type(arg)


def check_tensor(p: Buffer, a: np.ndarray, sizes: dict):
    try:
        got = arrays.dtype_of(a)
    except (ValueError, TypeError):
        raise TileError(f"argument {p.name}: expected dtype {p.dtype}, got an array of "
                        f"unsupported dtype {getattr(a, 'dtype', type(a).__name__)}") from None
    if not p.dtype.holds(got):
        raise TileError(f"argument {p.name}: expected dtype {p.dtype}, got {got}")
    if a.ndim != len(p.shape):
        raise TileError(f"argument {p.name}: expected {len(p.shape)} dimension(s) "
                        f"{_shape_text(p.shape)}, got shape {tuple(a.shape)}")
    for d, (want, have) in enumerate(zip(p.shape, a.shape)):
        if isinstance(want, Var):
            bound = sizes.setdefault(id(want), int(have))
            if bound != have:
                raise TileError(f"argument {p.name}: dimension {d} is {have}, but the size "
                                f"{want.name} was already bound to {bound} by another argument")
        elif isinstance(want, (int, Const)):
            value = want if isinstance(want, int) else want.value
            if value != have:
                raise TileError(f"argument {p.name}: expected shape {_shape_text(p.shape)}, got "
                                f"{tuple(a.shape)}")


def bound_shape(p: Buffer, sizes: dict) -> tuple:
    """(p's shape with its symbolic sizes bound from sizes {id(var): int}, None), or (None,
    the first size var that is not bound)."""
    from .interp.values import evaluate
    shape = []
    for d in p.shape:
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, Const):
            shape.append(int(d.value))
        elif isinstance(d, Var):
            if id(d) not in sizes:
                return None, d
            shape.append(sizes[id(d)])
        elif isinstance(d, Expr):
            shape.append(int(evaluate(d, {k: np.int64(v) for k, v in sizes.items()})))
    return tuple(shape), None


def output_shape(p: Buffer, sizes: dict) -> tuple:
    shape, unbound = bound_shape(p, sizes)
    if unbound is not None:
        raise TileError(f"cannot allocate output {p.name}: its size {unbound.name} is not "
                        "given by any input")
    return shape


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(s) if isinstance(s, int) else repr(s) for s in shape) + \
        ("," if len(shape) == 1 else "") + ")"
