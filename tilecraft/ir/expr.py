"""Scalar expressions of the tile IR.

Expressions overload Python's operators, so the frontend builds IR by evaluating the user's
expressions with ordinary Python semantics. Python numbers mixed with expressions are
"weakly typed": they take the type of the expression they meet (`x_fp16 * 0.5` stays fp16).
Comparisons build IR too; an expression has no Python truth value (a device value cannot
steer compile-time control flow), so internal code compares nodes with `is`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import dtypes as dt
from .dtypes import DType
from ..errors import Span, TileError, current_span

ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max", "&", "|", "^", "<<", ">>")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("and", "or")


# What ir/linear.py remembers on an expression node: its structural key and its simplified
# form (both depend only on the node's fields, which never change after it is built).
STRUCTURAL_KEY, LINEAR_FORM = "_structural_key", "_linear_form"
_REMEMBERED = (STRUCTURAL_KEY, LINEAR_FORM)


class Expr:
    dtype: DType
    span: Span | None

    def __getstate__(self):
        # Copies and pickles leave out what ir/linear.py remembered: a deep copy or an
        # unpickled tree has new variables, and a key names variables by identity.
        state = self.__dict__
        if any(k in state for k in _REMEMBERED):
            state = {k: v for k, v in state.items() if k not in _REMEMBERED}
        return state

    # --- arithmetic -------------------------------------------------------
    def __add__(self, o): return binary("+", self, o)
    def __radd__(self, o): return binary("+", o, self)
    def __sub__(self, o): return binary("-", self, o)
    def __rsub__(self, o): return binary("-", o, self)
    def __mul__(self, o): return binary("*", self, o)
    def __rmul__(self, o): return binary("*", o, self)
    def __truediv__(self, o): return binary("/", self, o)
    def __rtruediv__(self, o): return binary("/", o, self)
    def __floordiv__(self, o): return binary("//", self, o)
    def __rfloordiv__(self, o): return binary("//", o, self)
    def __mod__(self, o): return binary("%", self, o)
    def __rmod__(self, o): return binary("%", o, self)
    def __and__(self, o): return binary("&", self, o)
    def __rand__(self, o): return binary("&", o, self)
    def __or__(self, o): return binary("|", self, o)
    def __ror__(self, o): return binary("|", o, self)
    def __xor__(self, o): return binary("^", self, o)
    def __rxor__(self, o): return binary("^", o, self)
    def __lshift__(self, o): return binary("<<", self, o)
    def __rlshift__(self, o): return binary("<<", o, self)
    def __rshift__(self, o): return binary(">>", self, o)
    def __rrshift__(self, o): return binary(">>", o, self)
    def __pow__(self, o): return call("pow", [self, o])
    def __rpow__(self, o): return call("pow", [o, self])
    def __neg__(self): return unary("-", self)
    def __pos__(self): return self
    def __invert__(self): return unary("~", self)
    def __abs__(self): return call("abs", [self])

    # --- comparisons ------------------------------------------------------
    def __lt__(self, o): return compare("<", self, o)
    def __le__(self, o): return compare("<=", self, o)
    def __gt__(self, o): return compare(">", self, o)
    def __ge__(self, o): return compare(">=", self, o)
    def __eq__(self, o): return compare("==", self, o)
    def __ne__(self, o): return compare("!=", self, o)
    __hash__ = object.__hash__

    def __bool__(self):
        raise TileError("a device value has no compile-time truth value; use it in an `if` "
                        "inside the kernel, or T.if_then_else, instead of Python logic",
                        current_span() or self.span)

    def __index__(self):
        raise TileError("a device value cannot be used where Python needs a compile-time "
                        "integer (range(), a shape, a list index)", current_span() or self.span)

    def astype(self, d) -> "Expr":
        return cast(self, d)

    def __repr__(self) -> str:
        from .printer import expr_text
        return expr_text(self)


@dataclass(eq=False, repr=False)
class Var(Expr):
    """A named scalar: loop and block indices, symbolic shapes, scalar parameters."""
    name: str
    dtype: DType = dt.int32
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Const(Expr):
    value: object
    dtype: DType
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Unary(Expr):
    op: str  # "-", "~", "not"
    a: Expr
    dtype: DType
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Select(Expr):
    """T.if_then_else(cond, a, b): both sides evaluated, one chosen."""
    cond: Expr
    a: Expr
    b: Expr
    dtype: DType
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Cast(Expr):
    value: Expr
    dtype: DType
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Call(Expr):
    """A math intrinsic (exp, sqrt, ...), call_extern, address_of and similar calls."""
    name: str
    args: tuple
    dtype: DType
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class BufferLoad(Expr):
    buffer: object  # ir.buffer.Buffer
    indices: tuple
    span: Span | None = field(default=None, compare=False)

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


# ----------------------------------------------------------------------------
# construction helpers

def const(value, d=None, span=None) -> Const:
    if d is None:
        d = dt.boolean if isinstance(value, bool) else dt.int32 if isinstance(value, int) else dt.float32
    d = dt.dtype(d)
    if d.is_float:
        value = float(value)
    elif d.is_bool:
        value = bool(value)
    elif d.is_int:
        value = _wrap_int(int(value), d)
    return Const(value, d, span)


def _wrap_int(v: int, d) -> int:
    """v reduced to d's width (two's complement), as the hardware would hold it."""
    v &= (1 << d.bits) - 1
    if not d.is_unsigned and v >> (d.bits - 1):
        v -= 1 << d.bits
    return v


def _round_narrow(v, d):
    """A folded float value rounded to a 16- or 8-bit float dtype (wider ones are left)."""
    if not d.is_float or d.bits > 16 or not isinstance(v, (int, float)):
        return v
    import numpy as np
    return float(np.asarray(float(v), dtype=np.float32).astype(d.numpy).astype(np.float64))


def is_python_number(x) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, Expr)


def convert(x, like: DType | None = None) -> Expr:
    """Turn a Python number into a Const, typed after `like` when given (weak typing)."""
    if isinstance(x, Expr):
        return x
    if hasattr(x, "dtype") and hasattr(x, "item") and getattr(x, "shape", None) == ():
        x = x.item()  # numpy scalar
    if isinstance(x, bool):
        return const(x, dt.boolean)
    if isinstance(x, int):
        if like is not None and (like.is_int or like.is_float):
            return const(x, like)
        return const(x, dt.int32 if -2**31 <= x < 2**31 else dt.int64)
    if isinstance(x, float):
        if like is not None and like.is_float:
            return const(x, like)
        return const(x, dt.float32)
    kind = type(x).__name__
    if kind in ("Buffer", "BufferRegion"):  # a tile where one value is needed
        name = x.name if kind == "Buffer" else x.buffer.name
        raise TileError(f"{'buffer' if kind == 'Buffer' else 'a slice of buffer'} {name} is a "
                        f"tile, not a value: index it ({name}[i]) to use one element")
    raise TileError(f"expected a number or a device expression, got {kind} {x!r}")


def _operands(a, b):
    if isinstance(a, Expr) and not isinstance(b, Expr):
        b = convert(b, a.dtype)
    elif isinstance(b, Expr) and not isinstance(a, Expr):
        a = convert(a, b.dtype)
    else:
        a, b = convert(a), convert(b)
    return a, b


def _python_arith(op, x, y):
    if op == "/" and isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool):
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y >= 0) else -q
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x / y,
            "//": lambda: x // y, "%": lambda: x % y, "min": lambda: min(x, y),
            "max": lambda: max(x, y), "&": lambda: x & y, "|": lambda: x | y,
            "^": lambda: x ^ y, "<<": lambda: x << y, ">>": lambda: x >> y}[op]()


def binary(op: str, a, b, span=None) -> Expr:
    span = span or current_span()
    a, b = _operands(a, b)
    if a.dtype.is_handle or b.dtype.is_handle:
        raise TileError(f"operator {op} is not defined on pointers", span)
    result = dt.promote(a.dtype, b.dtype)
    if op in ("&", "|", "^", "<<", ">>") and result.is_float:
        raise TileError(f"bitwise operator {op} needs integer operands, got {a.dtype} and {b.dtype}", span)
    if isinstance(a, Const) and isinstance(b, Const):
        if op in ("/", "//", "%") and b.value == 0:
            if not result.is_float:
                raise TileError("integer division by zero", span)
        else:
            value = _python_arith(op, _round_narrow(a.value, result),
                                  _round_narrow(b.value, result))
            return const(int(value) if result.is_int else _round_narrow(value, result), result,
                         span)
    if not result.is_float:
        # Identities that keep index arithmetic readable; only exact for integers.
        if op == "+" and _is_const(b, 0): return _retype(a, result)
        if op == "+" and _is_const(a, 0): return _retype(b, result)
        if op == "-" and _is_const(b, 0): return _retype(a, result)
        if op == "*" and (_is_const(a, 0) or _is_const(b, 0)): return const(0, result, span)
        if op == "*" and _is_const(b, 1): return _retype(a, result)
        if op == "*" and _is_const(a, 1): return _retype(b, result)
        if op in ("//", "/") and _is_const(b, 1): return _retype(a, result)
        if op in ("^", "|") and _is_const(b, 0): return _retype(a, result)
        if op in ("^", "|") and _is_const(a, 0): return _retype(b, result)
    if a.dtype is not result:
        a = Cast(a, result, a.span)
    if b.dtype is not result:
        b = Cast(b, result, b.span)
    return Binary(op, a, b, result, span)


def _is_const(e, v) -> bool:
    return isinstance(e, Const) and e.value == v


def _retype(e: Expr, d: DType) -> Expr:
    return e if e.dtype is d else Cast(e, d, e.span)


def compare(op: str, a, b, span=None) -> Expr:
    span = span or current_span()
    a, b = _operands(a, b)
    if isinstance(a, Const) and isinstance(b, Const):
        x, y = a.value, b.value
        value = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op]
        return const(bool(value), dt.boolean, span)
    common = dt.promote(a.dtype, b.dtype)
    a, b = _retype(a, common), _retype(b, common)
    return Binary(op, a, b, dt.boolean, span)


def logical(op: str, a, b, span=None) -> Expr:
    span = span or current_span()
    a, b = to_bool(convert(a)), to_bool(convert(b))
    if isinstance(a, Const):
        if op == "and":
            return b if a.value else const(False)
        return const(True) if a.value else b
    if isinstance(b, Const):
        if op == "and":
            return a if b.value else const(False)
        return const(True) if b.value else a
    return Binary(op, a, b, dt.boolean, span)


def to_bool(e: Expr) -> Expr:
    if e.dtype.is_bool:
        return e
    return compare("!=", e, convert(0, e.dtype))


def unary(op: str, a, span=None) -> Expr:
    span = span or current_span()
    a = convert(a)
    if op == "not":
        a = to_bool(a)
        if isinstance(a, Const):
            return const(not a.value)
        return Unary("not", a, dt.boolean, span)
    if isinstance(a, Const):
        if op == "-":
            return const(-a.value, a.dtype, span)
        if op == "~" and a.dtype.is_int:
            return const(~a.value, a.dtype, span)
    if op == "~" and not (a.dtype.is_int or a.dtype.is_bool):
        raise TileError(f"operator ~ needs an integer operand, got {a.dtype}", span)
    return Unary(op, a, a.dtype, span)


def cast(value, d, span=None) -> Expr:
    span = span or current_span()
    d = dt.dtype(d)
    if not isinstance(value, Expr):
        return convert(value, d) if not isinstance(value, bool) or d.is_bool else const(value, d)
    if value.dtype is d:
        return value
    if isinstance(value, Const) and not d.is_handle:
        v = value.value
        if d.is_int and isinstance(v, float):
            if math.isinf(v) or math.isnan(v):
                return Cast(value, d, span)
            v = int(v)
        return const(v, d, span)
    return Cast(value, d, span)


def select(cond, a, b, span=None) -> Expr:
    span = span or current_span()
    cond = to_bool(convert(cond))
    a, b = _operands(a, b)
    common = dt.promote(a.dtype, b.dtype)
    a, b = _retype(a, common), _retype(b, common)
    if isinstance(cond, Const):
        return a if cond.value else b
    return Select(cond, a, b, common, span)


FLOAT_MATH = ("exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
              "cos", "tan", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc")


def call(name: str, args, d: DType | None = None, span=None) -> Call:
    span = span or current_span()
    args = list(args)
    if name in FLOAT_MATH:
        x = convert(args[0])
        if not x.dtype.is_float:
            x = cast(x, dt.float32)
        return Call(name, (x,), x.dtype, span)
    if name in ("pow", "fmod"):
        a, b = _operands(args[0], args[1])
        common = dt.promote(a.dtype, b.dtype)
        if not common.is_float:
            common = dt.float32
        return Call(name, (_retype(a, common), _retype(b, common)), common, span)
    if name == "abs":
        x = convert(args[0])
        if isinstance(x, Const):
            return const(abs(x.value), x.dtype, span)
        return Call("abs", (x,), x.dtype, span)
    if name in ("isnan", "isinf", "isfinite"):
        return Call(name, (convert(args[0]),), dt.boolean, span)
    return Call(name, tuple(args), dt.dtype(d) if d is not None else dt.handle, span)


def address_of(buffer, *indices) -> Call:
    """The address of buffer[indices], as header functions take their pointer arguments."""
    return Call("address_of", (BufferLoad(buffer, tuple(indices)),), dt.handle)


def minmax(op: str, a, b, span=None) -> Expr:
    return binary(op, a, b, span)


def infinity(d) -> Const:
    d = dt.dtype(d)
    if not d.is_float:
        raise TileError(f"T.infinity needs a float dtype, got {d}")
    return const(math.inf, d)
