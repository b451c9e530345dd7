"""Binding the T.const sizes of an eager @tilecraft.jit function from a call's tensors.

Each size takes its value from a keyword of the call (`f(a, b, M=64)`), else from the first
tensor argument, in the function's order, that has it as a dimension of its declaration;
every tensor is then checked against its declaration (rank, dtype, each dimension: a size
bound elsewhere, a fixed int, an expression of sizes). A mismatch is reported at the call,
naming the argument, the dimension and where the size it contradicts came from, with a note
at the declaration.
"""
from __future__ import annotations

import numpy as np

from . import arrays
from .errors import TileError
from .ir import dtypes as dt
from .ir.expr import Const, Expr, Var
from .ir.visitor import walk


def is_tensor(x) -> bool:
    return isinstance(x, np.ndarray) or arrays.is_torch(x)


def _note(declaration) -> tuple:
    return ((f"{declaration.name} is declared here", declaration.span),)


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else repr(d) for d in shape) + "]"


def _given(func_name: str, consts: dict, given: dict) -> dict:
    """The sizes passed by keyword: {name: (value, origin text)}."""
    out = {}
    for name, value in given.items():
        if name not in consts:
            known = ", ".join(consts) or "none"
            raise TileError(f"{func_name} got an unexpected keyword argument {name!r}: it is "
                            f"neither a parameter nor a T.const (its T.consts: {known})")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise TileError(f"{name}={value!r}: a T.const size takes a non-negative int")
        out[name] = (int(value), f"{name}={int(value)} was passed")
    return out


def _check_declared(name: str, declaration, tensor):
    """Rank and dtype of a tensor argument against its declaration."""
    spec = declaration.spec
    shape = tuple(tensor.shape)
    if len(shape) != len(spec.shape):
        raise TileError(f"argument {name}: declared with {len(spec.shape)} dimension(s) "
                        f"{_shape_text(spec.shape)}, got a tensor of shape {shape}",
                        notes=_note(declaration))
    try:
        got = arrays.dtype_of(tensor)
    except (ValueError, TypeError):
        got = getattr(tensor, "dtype", type(tensor).__name__)
    if not (isinstance(got, dt.DType) and spec.dtype.holds(got)):
        raise TileError(f"argument {name}: declared {spec.dtype}, got a {got} tensor",
                        notes=_note(declaration))


def bind_sizes(trace, tensors: dict, given: dict) -> dict:
    """{T.const name: int} for a call; tensors: {argument name: array}, in the function's
    order; given: the call's keywords that name no parameter."""
    consts = trace.consts                     # name -> Var, in declaration order
    by_var = {id(v): name for name, v in consts.items()}
    bound = _given(trace.func_name, consts, given)
    for name, tensor in tensors.items():
        declaration = trace.declared.get(name)
        if declaration is None:
            raise TileError(f"tensor argument {name} of {trace.func_name} has no declaration "
                            "before its first T.Kernel; declare it there: "
                            f"`{name}: T.Tensor[shape, dtype]`")
        _check_declared(name, declaration, tensor)
        for d, (want, have) in enumerate(zip(declaration.spec.shape, tensor.shape)):
            have = int(have)
            size = by_var.get(id(want))
            if size is not None:
                value, origin = bound.setdefault(size, (have, f"{name}'s dimension {d}"))
                if value != have:
                    raise TileError(f"argument {name}: dimension {d} is {have}, but {size} is "
                                    f"{value} ({origin})", notes=_note(declaration))
            elif isinstance(want, (int, Const)):
                fixed = want if isinstance(want, int) else int(want.value)
                if fixed != have:
                    raise TileError(f"argument {name}: dimension {d} is {have}, but its "
                                    f"declaration {_shape_text(declaration.spec.shape)} "
                                    f"fixes it at {fixed}", notes=_note(declaration))
    for size, var in consts.items():
        if size not in bound:
            raise _unbound(trace, size, var)
    values = {size: bound[size][0] for size in consts}
    _check_size_expressions(trace, tensors, values)
    return values


def _unbound(trace, size: str, var: Var) -> TileError:
    holders = [d.name for d in trace.declared.values()
               if any(dim is var for dim in d.spec.shape)]
    if holders:
        return TileError(f"{trace.func_name}: the size {size} is not known; pass the tensor "
                         f"argument {holders[0]} (its declaration has {size} as a dimension) "
                         f"or {size}=... when calling")
    return TileError(f"T.const {size} is a dimension of no declared tensor argument, so no "
                     f"call can bind it; give a tensor the dimension {size} (`A: "
                     f"T.Tensor[[{size}, ...], dtype]`) or pass {size}=... when calling",
                     var.span)


def _check_size_expressions(trace, tensors: dict, values: dict):
    """Dimensions declared as expressions of sizes only (`[M * 2]`): their value must be the
    tensor's. Those with T.dynamic sizes in them are the kernel's to check."""
    from .interp.values import evaluate
    env = {id(trace.consts[n]): np.int64(v) for n, v in values.items()}
    for name, tensor in tensors.items():
        declaration = trace.declared[name]
        for d, (want, have) in enumerate(zip(declaration.spec.shape, tensor.shape)):
            if not isinstance(want, Expr) or isinstance(want, (Var, Const)):
                continue
            if not all(id(v) in env for v in walk(want) if isinstance(v, Var)):
                continue
            expected = int(evaluate(want, env))
            if expected != int(have):
                raise TileError(f"argument {name}: dimension {d} is {int(have)}, but its "
                                f"declaration {want!r} is {expected}", notes=_note(declaration))
