"""Scalar math and the other expression builtins (casts, selects, extern calls, print)."""
from __future__ import annotations

import builtins

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir import dtypes as dt
from ..ir import expr as ex
from ..ir import tileop as top
from ..ir.buffer import Buffer, BufferRegion
from ..ir.annotations import IMPORT_SOURCE_CALL
from ..ir.expr import BufferLoad, Expr, is_python_number
from ..ir.stmt import Evaluate


def _device(what: str):
    bld.active(what, need_kernel=False)


def _numeric(what: str, x):
    if isinstance(x, Expr) or is_python_number(x):
        return x
    if isinstance(x, Buffer):
        raise TileError(f"{what} takes a scalar; index the buffer {x.name}[...] (use T.Parallel "
                        "for whole tiles)", current_span())
    raise TileError(f"{what} takes a number or a device expression, got {type(x).__name__}",
                    current_span())


def _unary_math(name: str, doc: str = "Element-wise {} of a scalar expression (float math)."):
    def fn(x):
        what = f"T.{name}"
        _device(what)
        return ex.call(name, [_numeric(what, x)])
    fn.__name__ = name
    fn.__doc__ = doc.format(name)
    return fn


exp, exp2, exp10, log, log2, log10, log1p = (_unary_math(n) for n in (
    "exp", "exp2", "exp10", "log", "log2", "log10", "log1p"))
sqrt, rsqrt, sin, cos, tan, tanh, sigmoid, erf = (_unary_math(n) for n in (
    "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "erf"))
floor, ceil, round, trunc = (_unary_math(n) for n in ("floor", "ceil", "round", "trunc"))


isnan, isinf, isfinite = (_unary_math(n, "{}(x) as a bool expression.")
                          for n in ("isnan", "isinf", "isfinite"))


def abs(x):  # noqa: A001 - TileLang's name
    """Absolute value."""
    _device("T.abs")
    return ex.call("abs", [_numeric("T.abs", x)])


def pow(x, y):  # noqa: A001
    """x ** y in floating point."""
    _device("T.pow")
    return ex.call("pow", [_numeric("T.pow", x), _numeric("T.pow", y)])


def fmod(x, y):
    _device("T.fmod")
    return ex.call("fmod", [_numeric("T.fmod", x), _numeric("T.fmod", y)])


def _minmax(op: str, args):
    what = f"T.{op}"
    if len(args) < 2:
        raise TileError(f"{what} takes at least two values", current_span())
    args = [_numeric(what, a) for a in args]
    if all(is_python_number(a) for a in args):
        return (builtins.min if op == "min" else builtins.max)(args)
    _device(what)
    result = args[0]
    for a in args[1:]:
        result = ex.binary(op, result, a)
    return result


def max(*args):  # noqa: A001
    """The larger of two (or more) values; plain Python numbers fold at compile time."""
    return _minmax("max", args)


def min(*args):  # noqa: A001
    """The smaller of two (or more) values; plain Python numbers fold at compile time."""
    return _minmax("min", args)


def clamp(x, lo, hi):
    """x limited to [lo, hi]: min(max(x, lo), hi)."""
    return _minmax("min", [_minmax("max", [x, lo]), hi])


def ceildiv(a, b):
    """ceil(a / b) for non-negative integers; folds when both are Python ints."""
    for x in (a, b):
        _numeric("T.ceildiv", x)
    if is_python_number(a) and is_python_number(b):
        if isinstance(a, float) or isinstance(b, float):
            raise TileError("T.ceildiv takes integers", current_span())
        if b == 0:
            raise TileError("T.ceildiv: division by zero", current_span())
        return -(-a // b)
    from ..ir.linear import simplify
    return simplify((a + b - 1) // b)


cdiv = ceildiv


def floordiv(a, b):
    return a // b


def floormod(a, b):
    return a % b


def shift_left(a, b):
    """a << b on integers (TVM's spelling of the operator)."""
    return ex.binary("<<", _numeric("T.shift_left", a), _numeric("T.shift_left", b))


def shift_right(a, b):
    """a >> b on integers: arithmetic for signed types, logical for unsigned ones."""
    return ex.binary(">>", _numeric("T.shift_right", a), _numeric("T.shift_right", b))


def truncdiv(a, b):
    _device("T.truncdiv")
    return ex.binary("/", a, b)


def infinity(dtype):
    """+inf of a float dtype (write -T.infinity(d) for -inf)."""
    try:
        return ex.infinity(dtype)
    except ValueError as e:
        raise TileError(f"T.infinity: {e}", current_span()) from None


def _limit_dtype(what: str, dtype):
    try:
        return dt.dtype(dtype)
    except (ValueError, TypeError) as e:
        raise TileError(f"{what}: {e}", current_span()) from None


def max_value(dtype):
    d = _limit_dtype("T.max_value", dtype)
    return ex.const(dt.max_value(d), d)


def min_value(dtype):
    d = _limit_dtype("T.min_value", dtype)
    return ex.const(dt.min_value(d), d)


def cast(x, dtype):
    """Convert a scalar to dtype (`T.cast(x, "float16")`)."""
    try:
        d = dt.dtype(dtype)
    except ValueError as e:
        raise TileError(f"T.cast: {e}", current_span()) from None
    return ex.cast(_numeric("T.cast", x), d)


def Cast(dtype, x):  # noqa: N802 - TVM spelling, dtype first
    return cast(x, dtype)


def reinterpret(value, dtype):
    """The bits of a scalar read as another dtype of the same size (`T.reinterpret(x,
    "uint32")`); TVM's order `T.reinterpret("uint32", x)` is taken too."""
    what = "T.reinterpret"
    if dt.is_dtype_like(value) and not dt.is_dtype_like(dtype):
        value, dtype = dtype, value
    d = _limit_dtype(what, dtype)
    x = ex.convert(_numeric(what, value))
    if d.is_handle and x.dtype.is_int and x.dtype.bits == 64:
        return ex.Call("reinterpret", (x,), d, current_span())   # T.attr's null handle
    if d.is_handle or x.dtype.is_handle:
        raise TileError(f"{what}: pointers are not supported ({x.dtype} to {d})", current_span())
    if d.bits != x.dtype.bits or d.is_bool or x.dtype.is_bool:
        raise TileError(f"{what}: a {x.dtype} ({x.dtype.bits} bits) cannot be read as a {d} "
                        f"({d.bits} bits): the sizes must agree", current_span())
    if d is x.dtype:
        return x
    return ex.Call("reinterpret", (x,), d, current_span())


def if_then_else(cond, then_value, else_value):
    """cond ? then_value : else_value, evaluated on the device."""
    for v in (cond, then_value, else_value):
        _numeric("T.if_then_else", v)
    return ex.select(cond, then_value, else_value)


def call_extern(*args, dtype=None):
    """Call an external device function: `T.call_extern("fn", a, b, dtype="float16")` or TVM's
    order `T.call_extern("float16", "fn", a, b)`. On the interpreter the function must be
    registered with tilecraft.interp.register_extern."""
    _device("T.call_extern")
    args = list(args)
    if len(args) >= 2 and isinstance(args[1], str) and dt.is_dtype_like(args[0]) and dtype is None:
        dtype = args.pop(0)
    if not args or not isinstance(args[0], str):
        raise TileError("T.call_extern needs the function name as a string", current_span())
    name = args.pop(0)
    for a in args:
        if not (isinstance(a, (Expr, str)) or is_python_number(a)):
            raise TileError(f"T.call_extern({name!r}): argument of type {type(a).__name__} is not "
                            "a scalar or a pointer", current_span())
    call_args = (name,) + tuple(a if isinstance(a, (Expr, str)) else ex.convert(a) for a in args)
    return ex.Call("call_extern", call_args, dt.dtype(dtype or "handle"), current_span())


def address_of(load):
    """The address of a buffer element: `T.address_of(B_local[0])`."""
    _device("T.address_of")
    if not isinstance(load, BufferLoad):
        raise TileError("T.address_of takes a buffer element such as buf[0]", current_span())
    return ex.Call("address_of", (load,), dt.handle, current_span())


def access_ptr(base, access_type="r", *extents, offset=0, extent=None):
    """TileLang's pointer into a buffer, for T.call_extern and the PTX calls: the address of
    base's first element (a buffer, one of its elements or a slice), moved `offset` elements
    along its last dimension. `access_type` ("r", "w" or "rw") and the extents say how much is
    read or written from there; they are checked, not needed."""
    what = "T.access_ptr"
    _device(what)
    if access_type not in ("r", "w", "rw"):
        raise TileError(f"{what}: access_type is 'r', 'w' or 'rw', got {access_type!r}",
                        current_span())
    if isinstance(base, Buffer):
        load = BufferLoad(base, tuple(ex.const(0) for _ in base.shape))
    elif isinstance(base, BufferRegion):
        load = BufferLoad(base.buffer, tuple(base.starts))
    elif isinstance(base, BufferLoad):
        load = base
    else:
        raise TileError(f"{what} takes a buffer, one of its elements or a slice of it, got "
                        f"{type(base).__name__}", current_span())
    for n in (*extents, extent):
        if n is not None and not (isinstance(n, Expr) or is_python_number(n)):
            raise TileError(f"{what}: an extent is a number of elements, got "
                            f"{type(n).__name__}", current_span())
    if not (isinstance(offset, Expr) or is_python_number(offset)):
        raise TileError(f"{what}: offset is a number of elements, got {type(offset).__name__}",
                        current_span())
    if not (is_python_number(offset) and offset == 0):
        *head, last = load.indices
        load = BufferLoad(load.buffer, (*head, last + offset))
    return ex.Call("address_of", (load,), dt.handle, current_span())


def import_source(source: str):
    """C / CUDA source put in the kernel's module ahead of its kernels: the device functions
    T.call_extern calls. The interpreter and the emulator take Python implementations
    (tilecraft.register_extern) instead."""
    what = "T.import_source"
    bld.active(what)
    if not isinstance(source, str):
        raise TileError(f"{what} takes the source text, got {type(source).__name__}",
                        current_span())
    bld.emit(Evaluate(ex.Call(IMPORT_SOURCE_CALL, (source,), dt.handle, current_span()),
                      current_span()), what)


def print(obj=None, msg=""):  # noqa: A001
    """Print a scalar expression or a whole buffer (from one thread), prefixed by msg."""
    what = "T.print"
    b = bld.active(what)
    if isinstance(obj, BufferRegion):
        obj = obj.buffer
    if not (isinstance(obj, (Expr, Buffer)) or is_python_number(obj)):
        raise TileError(f"{what} takes a scalar expression or a buffer, got "
                        f"{type(obj).__name__}", current_span())
    if not isinstance(msg, str):
        raise TileError(f"{what}: msg must be a string", current_span())
    value = obj if isinstance(obj, Buffer) else ex.convert(obj)
    b.emit(top.Print(value, msg, current_span()))


def evaluate(value):
    """Run an expression for its effect (an extern call)."""
    from ..ir.stmt import Evaluate
    b = bld.active("T.evaluate")
    if value is not bld.EMITTED:
        b.emit(Evaluate(ex.convert(value), current_span()))
