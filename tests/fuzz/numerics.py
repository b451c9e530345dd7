"""The numeric model under the fuzzer's reference: typed values, element-wise steps, rounding,
error bounds and the comparison of an output with its expectation.

This is an independent model of the language's semantics, not a call into tilecraft: values are
kept in float64 and rounded to their dtype wherever the program stores or computes in that
dtype; integer values are float64 integers. Beside each value the model carries a bound on how
far a correct implementation may be from it (transcendental functions a few ulps apart,
another summation order), and where a value meets a discontinuity (a floor, a comparison, a
float -> int conversion) closer than that bound, the element is marked unreliable and left
out of the comparison.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
         "float64": np.float64, "int32": np.int32, "int8": np.int8,
         "float8_e4m3": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
# The relative error of one rounding (and of a math function, which may be off by an ulp or two).
UNIT = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -21,
        "float64": 2.0 ** -50, "int32": 0.0, "int8": 0.0, "float8_e4m3": 2.0 ** -3,
        "float8_e5m2": 2.0 ** -2}


# What the runner fills an output with before a launch; an element the program does not write
# keeps it (an integer's four 0x7f bytes; a float's NaN).
POISON_INT = 0x7F7F7F7F


def is_int(dtype: str) -> bool:
    return dtype.startswith("int")


def promote(a: str, b: str) -> str:
    """The dtype of a binary operation: a float beats an int, the wider float wins."""
    if a == b:
        return a
    if is_int(a) != is_int(b):
        return b if is_int(a) else a
    return a if np.dtype(NUMPY[a]).itemsize >= np.dtype(NUMPY[b]).itemsize else b


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """values (float64) stored in dtype and read back as float64; ints truncate toward zero."""
    values = np.asarray(values, np.float64)
    if is_int(dtype):
        return np.trunc(values)
    return values.astype(NUMPY[dtype]).astype(np.float64)


@dataclass
class Value:
    """Values of one dtype, how far an implementation may stray from each, and which elements
    sit too near a discontinuity to compare."""
    v: np.ndarray
    dtype: str
    err: np.ndarray
    unreliable: np.ndarray

    @classmethod
    def exact(cls, values, dtype):
        values = np.asarray(values, np.float64)
        return cls(values, dtype, np.zeros_like(values), np.zeros(values.shape, bool))

    def converted(self, dtype: str) -> "Value":
        """The value stored into a tile or tensor of dtype."""
        if dtype == self.dtype:
            return self
        out = round_to(self.v, dtype)
        bad = self.unreliable.copy()
        if is_int(dtype) and not is_int(self.dtype):
            bad |= _near_integer(self.v, self.err)
        # Rounding an exact value is the same everywhere (to nearest even; toward zero into
        # an integer); a value already off by err may round to the neighbour. An integer is
        # either right or marked unreliable.
        if is_int(dtype):
            return Value(out, dtype, np.zeros_like(out), bad)
        return Value(out, dtype, self.err + (self.err > 0) * UNIT[dtype] * np.abs(out), bad)


def _near_integer(v, err):
    return np.abs(v - np.round(v)) < 2 * err


def _near(v, point, err):
    return np.abs(v - point) < 2 * err


# Element-wise steps: (operand, f(v, w, c), lipschitz(v, w, c)). The operand is "const"
# (c typed like v), "w" (a second tile, promoted with v), "unary", "math" (float only), "cast"
# or "index" (a mask by the element's place).
def _trunc_div(v, c):
    return np.trunc(v / c)


STEPS = {
    "scale": ("const", lambda v, w, c: v * c, lambda v, w, c: abs(c)),
    "shift": ("const", lambda v, w, c: v + c, lambda v, w, c: 1.0),
    "max_c": ("const", lambda v, w, c: np.maximum(v, c), lambda v, w, c: 1.0),
    "min_c": ("const", lambda v, w, c: np.minimum(v, c), lambda v, w, c: 1.0),
    "clamp": ("const", lambda v, w, c: np.clip(v, -c, c), lambda v, w, c: 1.0),
    "floordiv": ("const", lambda v, w, c: np.floor(v / c), lambda v, w, c: 0.0),
    "mod": ("const", lambda v, w, c: v - c * np.floor(v / c), lambda v, w, c: 0.0),
    "truncdiv": ("const", lambda v, w, c: _trunc_div(v, c), lambda v, w, c: 0.0),
    "add_w": ("w", lambda v, w, c: v + w, lambda v, w, c: 2.0),
    "sub_w": ("w", lambda v, w, c: v - w, lambda v, w, c: 2.0),
    "mul_w": ("w", lambda v, w, c: v * w, lambda v, w, c: np.abs(v) + np.abs(w)),
    "max_w": ("w", lambda v, w, c: np.maximum(v, w), lambda v, w, c: 1.0),
    # w here is the denominator |w| + 0.5, which the program computes in w's dtype
    "div_w": ("w", lambda v, w, c: v / w, lambda v, w, c: (1 + np.abs(v)) / w ** 2 + 2),
    "select": ("w", lambda v, w, c: np.where(v > c, v, w), lambda v, w, c: 1.0),
    "abs": ("unary", lambda v, w, c: np.abs(v), lambda v, w, c: 1.0),
    "neg": ("unary", lambda v, w, c: -v, lambda v, w, c: 1.0),
    "exp": ("math", lambda v, w, c: np.exp(np.minimum(v, 2.0)), lambda v, w, c: 7.4),
    "exp2": ("math", lambda v, w, c: np.exp2(np.minimum(v, 3.0)), lambda v, w, c: 5.6),
    "log": ("math", lambda v, w, c: np.log(np.abs(v) + 1.0), lambda v, w, c: 1.0),
    "log2": ("math", lambda v, w, c: np.log2(np.abs(v) + 1.0), lambda v, w, c: 1.5),
    "sqrt": ("math", lambda v, w, c: np.sqrt(np.abs(v) + 0.25), lambda v, w, c: 1.0),
    "rsqrt": ("math", lambda v, w, c: 1 / np.sqrt(np.abs(v) + 0.5), lambda v, w, c: 1.5),
    "tanh": ("math", lambda v, w, c: np.tanh(v), lambda v, w, c: 1.0),
    "sigmoid": ("math", lambda v, w, c: 1 / (1 + np.exp(-v)), lambda v, w, c: 0.25),
    "sin": ("math", lambda v, w, c: np.sin(v), lambda v, w, c: 1.0),
    "cos": ("math", lambda v, w, c: np.cos(v), lambda v, w, c: 1.0),
    "pow": ("math", lambda v, w, c: (np.abs(v) + 0.5) ** c,
            lambda v, w, c: c * (np.abs(v) + 0.5) ** (c - 1) + 0.1),
    "floor": ("math", lambda v, w, c: np.floor(v * c), lambda v, w, c: 0.0),
}
# Masks by the element's place in the tensor ("index" steps get `at`, an Index): exact
# integer conditions, linear in the T.Parallel variables (the compiler may decide them per tile).
STEPS.update({
    "mask_tri": ("index", lambda v, at, c: np.where(at.rows + c >= at.cols, v, -v), None),
    "mask_edge": ("index", lambda v, at, c: np.where(at.cols + c < at.n_cols, v, -v), None),
})
CASTS = ("float16", "bfloat16", "float32", "int32")
STEPS.update({f"cast_{d}": ("cast", None, None) for d in CASTS})
# How a step rounds. Exact steps give a value of their dtype unrounded. An add rounds once,
# alike everywhere when its operands are exact; a multiply's rounding may be skipped when a
# compiler contracts it with the next add into one fma. Division and the math functions may be
# an ulp or two apart between implementations, and their sub-expressions (|v| + 0.5) round in
# the value's dtype.
EXACT_STEPS = ("abs", "neg", "max_c", "min_c", "clamp", "max_w", "select", "floordiv", "mod",
               "truncdiv", "floor")
ADD_STEPS = ("shift", "add_w", "sub_w")
MULTIPLY_STEPS = ("scale", "mul_w")


def step_dtype(op: str, v_dtype: str, w_dtype: str) -> str:
    """The dtype an element-wise step computes in (what its expression's type is)."""
    operand = STEPS[op][0]
    if operand == "w":
        return promote(v_dtype, w_dtype)
    if operand == "cast":
        return op[len("cast_"):]
    return v_dtype


@dataclass
class Index:
    """Where each element sits in its tensor (arrays broadcast against the values)."""
    rows: np.ndarray
    cols: np.ndarray
    n_cols: int

    @classmethod
    def of(cls, shape: tuple, n_cols: int):
        rows, cols = np.indices(shape)
        return cls(rows, cols, n_cols)


def apply_step(x: Value, op: str, const: float, w: Value | None, at: Index | None = None
               ) -> Value:
    operand, fn, lipschitz = STEPS[op]
    dtype = step_dtype(op, x.dtype, w.dtype if w is not None else x.dtype)
    if operand == "cast":
        return x.converted(dtype)
    if operand == "index":  # -v where the mask is off: exact, no rounding
        return Value(fn(x.v, at, const), dtype, x.err.copy(), x.unreliable.copy())
    wv = w.v if w is not None else 0.0
    if op == "div_w":
        wv = round_to(np.abs(wv) + 0.5, w.dtype)
    exact = fn(x.v, wv, const)
    out = round_to(exact, dtype)
    err_in = x.err + (w.err if w is not None else 0.0)
    lip = lipschitz(x.v, wv, const)
    if op in EXACT_STEPS or is_int(dtype) or np.array_equal(out, exact):
        rounding = 0.0
    elif op in ADD_STEPS:
        rounding = (err_in > 0) * UNIT[dtype] * np.abs(out)
    elif op in MULTIPLY_STEPS:
        rounding = UNIT[dtype] * np.abs(out)
    else:
        rounding = UNIT[dtype] * (2 * np.abs(out) + lip * (np.abs(x.v) + 1))
    err = lip * err_in + rounding
    bad = x.unreliable | (w.unreliable if w is not None else False)
    if op == "floor":  # v * c rounds in v's dtype before the floor
        bad = bad | _near_integer(x.v * const, (err_in + (err_in > 0) * UNIT[dtype] *
                                                np.abs(x.v)) * abs(const))
    elif op == "select":
        bad = bad | _near(x.v, const, err_in)
    if is_int(dtype) or op == "floor":
        err = np.zeros_like(out)
    return Value(out, dtype, err, bad)


# --- comparing ---------------------------------------------------------------------------
@dataclass
class Expect:
    """An output's expected values (the poison where the program must not write), the
    tolerance per element, and the elements too close to a discontinuity to judge."""
    values: np.ndarray
    tol: np.ndarray
    skip: np.ndarray

    @classmethod
    def of(cls, value: Value, dtype: str, written=None):
        out = value.converted(dtype)
        values = out.v.copy()
        if written is not None:
            values[~written] = POISON_INT if is_int(dtype) else np.nan
        tol = 1.5 * out.err + (0 if is_int(dtype) else 1e-6)
        return cls(values, np.nan_to_num(tol), out.unreliable.copy())


def mismatches(expect: Expect, got: np.ndarray) -> str | None:
    """None when got matches; else a short description of the first differences."""
    got = np.asarray(got).astype(np.float64)
    want = expect.values
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    nan_want, nan_got = np.isnan(want), np.isnan(got)
    bad = (nan_want != nan_got) | (~nan_want & ~nan_got & (np.abs(got - want) > expect.tol))
    bad &= ~expect.skip
    if not bad.any():
        return None
    where = np.argwhere(bad)
    shown = ", ".join(f"{tuple(int(i) for i in w)}: got {got[tuple(w)]:.6g} want "
                      f"{want[tuple(w)]:.6g}" for w in where[:4])
    return f"{len(where)} of {want.size} elements differ ({shown})"


def tiles_of(array: np.ndarray, block: tuple) -> np.ndarray:
    """array padded with zeros to whole tiles (what a tile copy reads past the edge)."""
    pads = [(0, -n % b) for n, b in zip(array.shape, block)]
    return np.pad(array, pads)


def log2_ceil(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))
