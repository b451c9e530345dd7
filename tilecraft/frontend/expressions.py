"""Evaluating the expressions of a prim_func body.

Python evaluates what is known at compile time; operators on device values build IR through
the Expr overloads; `and` / `or` / `not` / conditional expressions on device values become IR
(Python's own would ask the device value for a truth value). Every construct is evaluated with
its source span current, so IR and errors point at the user's text. What the user's own Python
raises (an IndexError of a list) is their error at that text; a call of Python's numeric
functions on a device value (max, math.exp) names the T builtin to use instead.
"""
from __future__ import annotations

import ast
import builtins
import math
import operator
import os
import sys

from ..errors import TileError, TileInternalError, span_scope
from ..ir import expr as ex
from ..ir.buffer import Buffer, BufferRegion, LOCAL_VAR
from ..ir.expr import BufferLoad, Expr

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
           ast.MatMult: operator.matmul}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_,
           ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b}
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_int_zero(x) -> bool:
    """x is the integer constant 0 (a Python int or an int-typed IR constant)."""
    if isinstance(x, ex.Const):
        return x.dtype.is_int and x.value == 0
    return isinstance(x, int) and not isinstance(x, bool) and x == 0


class _Return(Exception):
    def __init__(self, value, span=None):
        self.value = value
        self.span = span


class ExpressionEvaluator:
    """Mixed into the Parser, which provides span(), scope and source."""

    def python_op(self, fn, args, node):
        """fn(*args) for an operator of the user's expression (a subscript, an arithmetic or
        comparison operator): what it raises on plain Python values (an IndexError of a list,
        a KeyError of a dict) is the user's mistake, reported at the expression."""
        try:
            return fn(*args)
        except (TileError, _Return):
            raise
        except Exception as e:  # noqa: BLE001 - reported at the user's line
            err = self.wrap(e, self.span(node))
            if not isinstance(err, TileInternalError):
                err.message += f" (in `{ast.unparse(node)}`)"
            raise err from None

    def wrap(self, e: Exception, span) -> TileError:
        """A Python exception raised while evaluating user code, as a TileError."""
        tb = e.__traceback__
        # Raised by C code called right in the catching frame (a builtin such as open() or
        # int() that the user's code called): the user's mistake, not tilecraft's.
        direct = tb is not None and tb.tb_next is None
        last = None
        while tb is not None:
            last = tb.tb_frame.f_code.co_filename
            tb = tb.tb_next
        internal = not direct and last is not None and \
            os.path.abspath(last).startswith(_PACKAGE_DIR) and not isinstance(e, TypeError)
        if internal:
            return TileInternalError("the frontend", e, span)
        return TileError(f"{type(e).__name__}: {e}", span)

    # --- expressions ----------------------------------------------------------
    def expr(self, node):
        handler = getattr(self, "expr_" + type(node).__name__, None)
        if handler is None:
            return self.expr_python(node)
        return handler(node)

    def expr_python(self, node):
        """Constructs without device meaning (comprehensions, f-strings, lambdas): Python."""
        code = compile(ast.fix_missing_locations(ast.Expression(node)), self.source.filename,
                       "eval")
        with span_scope(self.span(node)):
            return eval(code, self.scope.namespace())  # noqa: S307 - the user's own code

    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node):
        value = self.scope.lookup(node.id, self.span(node))
        if isinstance(value, Buffer) and value.scope == LOCAL_VAR:
            return BufferLoad(value, (ex.convert(0),), self.span(node))  # a scalar variable
        return value

    def expr_raw(self, node):
        """Like expr, but a name bound to a T.alloc_var buffer gives the buffer itself."""
        if isinstance(node, ast.Name):
            return self.scope.lookup(node.id, self.span(node))
        return self.expr(node)

    def expr_Attribute(self, node):
        value = self.expr(node.value)
        try:
            return getattr(value, node.attr)
        except TileError as e:   # a TileLang name tilecraft does not have yet (T.tma_copy)
            e.span = self.span(node)
            raise
        except AttributeError:
            owner = getattr(value, "__name__", type(value).__name__)
            if owner == "tilecraft.language":
                owner = "T"
            raise TileError(f"{owner} has no attribute '{node.attr}'", self.span(node)) from None

    def expr_Subscript(self, node):
        value = self.expr_raw(node.value)
        key = self.expr(node.slice)
        with span_scope(self.span(node)):
            return self.python_op(operator.getitem, (value, key), node)

    def expr_Slice(self, node):
        part = lambda n: None if n is None else self.expr(n)  # noqa: E731
        return slice(part(node.lower), part(node.upper), part(node.step))

    def expr_Tuple(self, node):
        return tuple(self.expr(e) for e in node.elts)

    def expr_List(self, node):
        return [self.expr(e) for e in node.elts]

    def expr_Dict(self, node):
        return {self.expr(k): self.expr(v) for k, v in zip(node.keys, node.values)}

    def expr_BinOp(self, node):
        a, b = self.expr(node.left), self.expr(node.right)
        span = self.span(node)
        with span_scope(span):
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
                if _is_int_zero(b) and isinstance(a, Expr) and a.dtype.is_int:
                    raise TileError(f"integer division by zero in `{ast.unparse(node)}`", span)
                if ex.is_python_number(b) and b == 0 and not isinstance(a, Expr):
                    raise TileError(f"division by zero in `{ast.unparse(node)}` (the divisor "
                                    "is 0 at compile time)", span)
            return self.python_op(_BINOPS[type(node.op)], (a, b), node)

    def expr_UnaryOp(self, node):
        v = self.expr(node.operand)
        with span_scope(self.span(node)):
            if isinstance(node.op, ast.Not):
                return ex.unary("not", v) if isinstance(v, Expr) else not v
            return self.python_op({ast.USub: operator.neg, ast.UAdd: operator.pos,
                                   ast.Invert: operator.invert}[type(node.op)], (v,), node)

    def expr_BoolOp(self, node):
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.expr(node.values[0])
        for v in node.values[1:]:
            if not isinstance(result, Expr):
                if (op == "and" and not result) or (op == "or" and result):
                    return result
                result = self.expr(v)
                continue
            with span_scope(self.span(node)):
                result = ex.logical(op, result, self.expr(v))
        return result

    def expr_Compare(self, node):
        left = self.expr(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            with span_scope(self.span(node)):
                part = self.python_op(_CMPOPS[type(op)], (left, right), node)
                if result is None:
                    result = part
                elif isinstance(result, Expr) or isinstance(part, Expr):
                    result = ex.logical("and", result, part)
                else:
                    result = result and part
            left = right
        return result

    def expr_IfExp(self, node):
        cond = self.expr(node.test)
        if isinstance(cond, Expr):
            with span_scope(self.span(node)):
                return ex.select(cond, self.expr(node.body), self.expr(node.orelse))
        return self.expr(node.body) if cond else self.expr(node.orelse)

    def expr_Call(self, node):
        func = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.expr(a.value))
            else:
                args.append(self.expr(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs.update(self.expr(k.value))
            else:
                kwargs[k.arg] = self.expr(k.value)
        span = self.span(node)
        with span_scope(span):
            if func is range:
                from .frames import serial_loop
                return serial_loop(*args, **kwargs)
            try:
                return func(*args, **kwargs)
            except TileError as e:
                hint = python_function_on_device_values(func, args, kwargs)
                if hint is not None:
                    raise TileError(hint, span) from None
                raise e.with_span(span)
            except _Return:
                raise
            except Exception as e:  # noqa: BLE001
                hint = python_function_on_device_values(func, args, kwargs)
                raise (TileError(hint, span) if hint is not None else self.wrap(e, span)) \
                    from None


# --- Python's own numeric functions on device values ------------------------------------
# `max(x, 0.0)`, `math.exp(x)` or `numpy.sqrt(x)` on a buffer element runs in Python while the
# kernel is compiled; Python then asks the device value for a truth value or a float, which it
# does not have, and the error it gets says nothing about the function. When such a call fails
# and one of its arguments is a device value, the message names the function and the builtin
# of the language that computes it on the device.

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
    T = sys.modules.get("tilecraft.language")   # loaded by every program that has T.*
    instead = _RENAMED.get(name)
    if instead is None and T is not None and callable(getattr(T, name, None)) and name not in ("Tensor",
                                                                             "Buffer"):
        instead = f"T.{name}"
    if instead is None and home == "math" and hasattr(math, name):
        instead = "the T.* math builtins (T.exp, T.log, T.sqrt, ...)"
    advice = f"use {instead}" if instead else "compute it with the T.* builtins"
    return (f"{written} computes on numbers while the kernel is compiled and cannot take a "
            f"device value (a buffer element or an expression of one); {advice}")
