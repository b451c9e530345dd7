"""Expression evaluation for the reference interpreter, vectorized over T.Parallel lanes.

Inside a T.Parallel nest every loop variable is a numpy array laid along its own axis, so one
evaluation computes all iterations at once. `mask` marks the lanes that are live (inside a
device `if`); loads are bounds-checked only on live lanes. Arithmetic rounds each result to its
IR dtype, as the GPU does: fp16 math is computed in fp32 and rounded back.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ..errors import TileError
from ..ir import dtypes as dt
from ..ir.buffer import GLOBAL
from ..ir.expr import Binary, BufferLoad, Call, Cast, Const, Select, Unary, Var
from ..ir.thread_varying import LANE_CALLS


def compute_dtype(d: dt.DType) -> np.dtype:
    """The numpy type arithmetic of IR type d is carried out in."""
    if d.is_float:
        return np.dtype(np.float64) if d.bits == 64 else np.dtype(np.float32)
    if d.is_bool:
        return np.dtype(np.bool_)
    return np.dtype(np.uint64) if d.name == "uint64" else np.dtype(np.int64)


def widen(values: np.ndarray) -> np.ndarray:
    """values in a type numpy computes with: ml_dtypes' narrow floats convert best through
    float32."""
    if values.dtype.kind == "V" or values.dtype.name in ("bfloat16", "float8_e4m3fn",
                                                         "float8_e5m2"):
        return values.astype(np.float32)
    return values


def to_dtype(value, d: dt.DType):
    """Round / wrap a computed value into IR dtype d."""
    arr = np.asarray(value)
    if arr.dtype == d.numpy or (d.is_int and arr.dtype.kind in "iub"):
        return arr.astype(d.numpy)     # a copy; integers wrap, with no warning to silence
    with np.errstate(all="ignore"):
        if d.is_bool:
            return arr.astype(np.bool_) if arr.dtype != np.bool_ else arr
        if d.is_int and arr.dtype.kind == "f":
            arr = np.trunc(np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0))
            arr = arr.astype(np.int64)
        if (d.name in ("bfloat16", "float8_e4m3", "float8_e5m2")) and arr.dtype.kind in "iub":
            arr = arr.astype(np.float32)
        return arr.astype(d.numpy)


class Pointer:
    """What T.address_of(buf[i]) evaluates to: a flat view of the buffer and an offset, so a
    registered extern can read and write through it."""

    def __init__(self, array: np.ndarray, offset: int):
        self.flat = array.reshape(-1)
        self.offset = int(offset)

    def read(self, count: int) -> np.ndarray:
        return self.flat[self.offset:self.offset + count]

    def write(self, values):
        values = np.asarray(values).reshape(-1)
        self.flat[self.offset:self.offset + values.size] = values.astype(self.flat.dtype)


class ThreadPointers(list):
    """T.address_of of an element that differs between threads: one Pointer a thread."""


def _truncdiv(a, b):
    q = np.floor_divide(a, b)
    fix = (np.mod(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix


_ARITH = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "min": np.minimum, "max": np.maximum,
    "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor, "<<": np.left_shift,
    ">>": np.right_shift, "<": np.less, "<=": np.less_equal, ">": np.greater,
    ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal, "and": np.logical_and,
    "or": np.logical_or,
}


# Integer operations whose int64 result wraps to the narrower type as C's would, and the
# divisions, which need a check for zero unless the divisor is a nonzero constant.
_WRAPPING = {op: _ARITH[op] for op in ("+", "-", "*", "min", "max", "&", "|", "^", "<<", ">>")}
_INT_DIVISIONS = {"/": _truncdiv, "//": np.floor_divide, "%": np.mod}


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


_erf = np.frompyfunc(math.erf, 1, 1)

_MATH = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x).astype(x.dtype),
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: _erf(x).astype(x.dtype), "floor": np.floor, "ceil": np.ceil,
    "round": _round_half_away, "trunc": np.trunc, "abs": np.abs,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
}


class Evaluator:
    """Evaluates expressions against the interpreter's variables and buffers."""

    def __init__(self, machine):
        self.m = machine
        self._consts: dict = {}
        self._methods: dict = {}   # node class -> its bound eval_ method
        self._integer: dict = {}   # id(Binary) -> (node, its integer closure or None)

    def eval(self, e, mask=None):
        try:
            method = self._methods[type(e)]
        except KeyError:
            method = self._methods[type(e)] = getattr(self, "eval_" + type(e).__name__)
        return method(e, mask)

    def eval_Var(self, e: Var, mask):
        try:
            return self.m.env[id(e)]
        except KeyError:
            raise TileError(f"variable {e.name} has no value here", e.span) from None

    def eval_Const(self, e: Const, mask):
        # constants are evaluated again for every element and block: once per node suffices
        known = self._consts.get(id(e))
        if known is None or known[0] is not e:
            known = self._consts[id(e)] = (e, to_dtype(e.value, e.dtype)[()])
        return known[1]

    def eval_Binary(self, e: Binary, mask):
        known = self._integer.get(id(e))
        if known is None or known[0] is not e:
            compiled = _integer_closure(self, e)
            known = self._integer[id(e)] = (e, compiled and compiled[0])
        if known[1] is not None:
            value = known[1](mask)
            if value is not None:
                return value
        return self._binary(e, mask)

    def _binary(self, e: Binary, mask):
        if e.op in ("and", "or"):
            return self._short_circuit(e, mask)
        a, b = self.eval(e.a, mask), self.eval(e.b, mask)
        fast = _WRAPPING.get(e.op)
        if fast is None and isinstance(e.b, Const) and e.b.value != 0:
            fast = _INT_DIVISIONS.get(e.op)  # no lane divides by zero: nothing to check
        if fast is not None and e.dtype.is_int and e.dtype.name != "uint64":
            # Index arithmetic, most of what kernels evaluate: int64 as below, with no error
            # state to set (integer ufuncs on arrays neither raise nor warn) and no copy of
            # operands that are int64 already.
            a, b = np.asarray(a), np.asarray(b)
            if a.dtype.kind in "iub" and b.dtype.kind in "iub" and \
                    np.uint64 not in (a.dtype, b.dtype):
                return to_dtype(fast(a.astype(np.int64, copy=False),
                                     b.astype(np.int64, copy=False)), e.dtype)
        with np.errstate(all="ignore"):
            if e.op in ("<", "<=", ">", ">=", "==", "!=", "and", "or"):
                return _ARITH[e.op](a, b)
            cd = compute_dtype(e.dtype)
            a, b = np.asarray(a).astype(cd), np.asarray(b).astype(cd)
            if e.op in ("/", "//", "%") and cd.kind in "iu":
                if np.any(np.asarray(b == 0) & (True if mask is None else mask)):
                    raise TileError("integer division by zero", e.span)
                b = np.where(b == 0, 1, b)
                r = _INT_DIVISIONS[e.op](a, b)
            elif e.op == "/":
                r = np.true_divide(a, b)
            elif e.op == "//":
                r = np.floor(np.true_divide(a, b))
            elif e.op == "%":
                r = np.mod(a, b)
            else:
                r = _ARITH[e.op](a, b)
            return to_dtype(r, e.dtype)

    def eval_Unary(self, e: Unary, mask):
        a = self.eval(e.a, mask)
        if e.op == "not":
            return np.logical_not(a)
        if e.op == "~":
            return np.invert(a) if e.dtype.is_int else np.logical_not(a)
        with np.errstate(all="ignore"):
            return to_dtype(np.negative(np.asarray(a).astype(compute_dtype(e.dtype))), e.dtype)

    def _short_circuit(self, e: Binary, mask):
        """a && b, a || b as C evaluates them: b only on the lanes a leaves undecided (the
        guard `i < n && list[i] >= 0` reads list[i] only where i < n)."""
        a = np.asarray(self.eval(e.a, mask), dtype=bool)
        undecided = a if e.op == "and" else ~a
        live = undecided if mask is None else (mask & undecided)
        if not np.any(live):
            return a
        b = np.asarray(self.eval(e.b, live), dtype=bool)
        return a & b if e.op == "and" else a | b

    def eval_Select(self, e: Select, mask):
        # Like TileLang's if_then_else, a side is only checked on the lanes that take it.
        c = np.asarray(self.eval(e.cond, mask), dtype=bool)
        live = c if mask is None else (mask & c)
        dead = ~c if mask is None else (mask & ~c)
        a = self.eval(e.a, live) if np.any(live) else np.zeros((), e.dtype.numpy)
        b = self.eval(e.b, dead) if np.any(dead) else np.zeros((), e.dtype.numpy)
        return np.where(c, a, b).astype(e.dtype.numpy)

    def eval_Cast(self, e: Cast, mask):
        v = self.eval(e.value, mask)
        if e.dtype.is_handle:
            return v
        return to_dtype(np.asarray(v), e.dtype)

    def eval_Call(self, e: Call, mask):
        if e.name == "address_of":
            load = e.args[0]
            array = self.m.array_of(load.buffer)
            idx = self.m.element_index(load.buffer, [np.asarray(self.eval(i, mask))
                                                     for i in load.indices])
            flat = np.ravel_multi_index(np.broadcast_arrays(*idx), array.shape)
            if flat.size == 1:
                return Pointer(array, flat.reshape(-1)[0])
            # each thread's own element (a per-thread local, or an index that differs)
            return ThreadPointers([Pointer(array, f) for f in flat.reshape(len(flat), -1)[:, 0]])
        if e.name == "call_extern":
            return self.m.call_extern(e, [a if isinstance(a, str) else self.eval(a, mask)
                                          for a in e.args[1:]], mask)
        args = [np.asarray(self.eval(a, mask)) for a in e.args]
        if e.name == "reinterpret":
            return np.asarray(to_dtype(args[0], e.args[0].dtype)).view(e.dtype.numpy)
        if e.name in LANE_CALLS:
            return self.m.lane_call(e, args, mask)
        with np.errstate(all="ignore"):
            if e.name in ("pow", "fmod"):
                cd = compute_dtype(e.dtype)
                fn = np.power if e.name == "pow" else np.fmod
                return to_dtype(fn(args[0].astype(cd), args[1].astype(cd)), e.dtype)
            fn = _MATH.get(e.name)
            if fn is None:
                raise TileError(f"the interpreter has no implementation of {e.name}", e.span)
            x = args[0]
            if e.name in ("isnan", "isinf", "isfinite"):
                return fn(x.astype(np.float64) if x.dtype.kind == "f" else x)
            cd = compute_dtype(e.dtype)
            return to_dtype(fn(x.astype(cd)), e.dtype)

    def eval_BufferLoad(self, e: BufferLoad, mask):
        array = self.m.array_of(e.buffer)
        idx = self.m.element_index(e.buffer, [np.asarray(self.eval(i, mask)).astype(np.int64)
                                              for i in e.indices])
        inside = in_bounds(idx, array.shape)
        if inside is True:
            return array[tuple(idx)]
        live = inside if mask is None else (inside | ~mask)
        if e.buffer.scope != GLOBAL and not np.all(live):
            raise TileError(f"out-of-bounds read of {e.buffer.name} (shape "
                            f"{tuple(array.shape)}) at index {first_bad(idx, live)}", e.span)
        # Global reads outside the tensor give zero, as bounds-guarded loads do on the GPU.
        safe = tuple(np.clip(i, 0, max(0, n - 1)) for i, n in zip(idx, array.shape))
        if array.size == 0:
            return np.zeros(np.broadcast(*idx).shape, array.dtype)
        return np.where(inside, array[safe], np.zeros((), array.dtype)).astype(array.dtype)


_INT64, _UINT64 = np.dtype(np.int64), np.dtype(np.uint64)


def _integer_closure(ev: Evaluator, e: Binary):
    """Index arithmetic compiled once into a closure: an integer Binary whose operation wraps
    (or divides by a nonzero constant), computed in int64 and wrapped to its type as
    eval_Binary's integer path does. Where the subtree reads only variables and constants, its
    value is kept with the variables' values it was computed from and given again while those
    are the very same objects (the interpreters rebind a variable to a new object whenever its
    value changes): a loop body's index arithmetic that depends on the thread and block alone
    is computed once per block, not once per iteration. (The closure, the ids of the
    variables it reads or None where it reads more), or None for other nodes; the closure
    returns None when an operand is not an integer array (the caller then takes the general
    path)."""
    fast = _WRAPPING.get(e.op)
    if fast is None and isinstance(e.b, Const) and e.b.value != 0:
        fast = _INT_DIVISIONS.get(e.op)
    if fast is None or not e.dtype.is_int or e.dtype.name == "uint64":
        return None
    (left, lvars), (right, rvars) = _operand(ev, e.a), _operand(ev, e.b)
    out = e.dtype.numpy

    def compute(mask):
        a, b = left(mask), right(mask)
        if a is None or b is None:
            return None
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind not in "iub" or b.dtype.kind not in "iub" or \
                a.dtype == _UINT64 or b.dtype == _UINT64:
            return None
        return fast(a.astype(_INT64, copy=False), b.astype(_INT64, copy=False)).astype(out)
    if lvars is None or rvars is None:
        return compute, None
    keys = tuple(dict.fromkeys(lvars + rvars))
    m, kept = ev.m, [None, None]   # (the variables' values, the result)

    def cached(mask):
        env = m.env
        values = kept[0]
        if values is not None and all(env.get(k) is v for k, v in zip(keys, values)):
            return kept[1]
        result = compute(mask)
        if result is not None:
            kept[0], kept[1] = tuple(env.get(k) for k in keys), result
        return result
    return cached, keys


def _operand(ev: Evaluator, e):
    """(a closure giving operand e's value for _integer_closure, the ids of the variables it
    reads, or None where it reads more than variables and constants)."""
    if isinstance(e, Binary):
        inner = _integer_closure(ev, e)
        if inner is not None:
            return inner
    if isinstance(e, Const) and e.dtype.is_int:
        value = to_dtype(e.value, e.dtype)[()]
        return (lambda mask: value), ()
    if isinstance(e, Var):
        m, key = ev.m, id(e)

        def var(mask):
            value = m.env.get(key)
            return value if value is not None else ev.eval(e, mask)   # the error, if unbound
        return var, (key,)
    return (lambda mask: ev.eval(e, mask)), None


def evaluate(expr, env: dict):
    """expr evaluated with its variables bound by env (id(var) -> number or numpy array);
    for compile-time enumeration of layouts and for sizes bound at launch."""
    return np.asarray(Evaluator(SimpleNamespace(env=env)).eval(expr))


def in_bounds(idx, shape):
    """True when every index is inside shape; else a boolean array (or False) per lane."""
    if all(i.ndim == 0 for i in idx):
        ok = all(0 <= int(i) < n for i, n in zip(idx, shape))
        return True if ok else np.bool_(False)
    ok = np.ones(np.broadcast(*idx).shape, dtype=bool)
    for i, n in zip(idx, shape):
        ok &= (i >= 0) & (i < n)
    return True if ok.all() else ok


def first_bad(idx, ok) -> tuple:
    bad = np.argwhere(~np.broadcast_to(ok, np.broadcast(*idx).shape))[0]
    return tuple(int(np.broadcast_to(i, ok.shape)[tuple(bad)]) for i in idx)
