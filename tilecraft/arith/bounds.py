"""Interval bounds of integer expressions, and the div/mod simplification they allow.

Lowered index arithmetic is full of `(warp * 64 + lane // 4 + 8 * r) // 16`-shaped terms whose
parts have known ranges (a lane is in [0, 32), an unrolled local index in [0, n)). Knowing the
ranges lets `(a * 16 + b) // 16` become `a` when b is in [0, 16), and `x % 64` become `x` when x
is in [0, 64): the generated code gets shorter and register indices become constants.
"""
from __future__ import annotations

import math

from ..ir.expr import (Binary, BufferLoad, Cast, Const, Expr, Select, Unary, Var, binary,
                       const, convert)
from ..ir.linear import linear_form, simplify as linear_simplify

INF = float("inf")


def bound_of(e, var_bounds: dict) -> tuple:
    """Inclusive (lo, hi) of an integer expression; var_bounds maps id(var) -> (lo, hi). An
    integer type narrower than int wraps: where the arithmetic may leave its range (a uint16
    plus 300), the value can be anything the type holds."""
    lo, hi = _bound(e, var_bounds)
    d = getattr(e, "dtype", None)
    if d is not None and d.is_int and d.bits <= 16:
        whole = _dtype_range(d)
        if lo < whole[0] or hi > whole[1]:
            return whole
    return (lo, hi)


def _bound(e, var_bounds: dict) -> tuple:
    if isinstance(e, int):
        return (e, e)
    if isinstance(e, Const):
        v = e.value
        return (v, v) if isinstance(v, (int, bool)) else (-INF, INF)
    if isinstance(e, Var):
        return var_bounds.get(id(e), (-INF, INF))
    if isinstance(e, BufferLoad):
        return e.buffer.value_bounds or _dtype_range(e.dtype)
    if isinstance(e, Cast):
        return bound_of(e.value, var_bounds) if e.dtype.is_int else (-INF, INF)
    if isinstance(e, Unary) and e.op == "-":
        lo, hi = bound_of(e.a, var_bounds)
        return (-hi, -lo)
    if isinstance(e, Select):
        a, b = bound_of(e.a, var_bounds), bound_of(e.b, var_bounds)
        return (min(a[0], b[0]), max(a[1], b[1]))
    if not isinstance(e, Binary):
        return (-INF, INF)
    a, b = bound_of(e.a, var_bounds), bound_of(e.b, var_bounds)
    op = e.op
    if op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if op == "*":
        products = [x * y for x in a for y in b if not (x == 0 and abs(y) == INF)
                    and not (y == 0 and abs(x) == INF)] or [0]
        return (min(products), max(products))
    if op in ("//", "/") and b[0] == b[1] and b[0] > 0:
        d = b[0]
        return (_floordiv(a[0], d), _floordiv(a[1], d))
    if op == "%" and b[0] == b[1] and b[0] > 0:
        d = b[0]
        if a[0] >= 0 and a[1] < d:
            return a
        if a[0] != -INF and a[1] != INF and _floordiv(a[0], d) == _floordiv(a[1], d):
            return (a[0] % d, a[1] % d)
        # A multiple of g (dividing d) stays one: (tx * 4) % 48 is at most 44.
        return (0, d - math.gcd(divisor_of(e.a), d))
    if op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if op in ("<", "<=", ">", ">=", "==", "!=", "and", "or"):
        return (0, 1)
    if op == "&" and (a[0] >= 0 or b[0] >= 0):
        # A nonnegative mask keeps the result in [0, mask] whatever the other operand's sign.
        return (0, min(x[1] for x in (a, b) if x[0] >= 0))
    return (-INF, INF)


def _dtype_range(d) -> tuple:
    """What any value of a narrow integer type lies in (a loaded uint8 is in [0, 255])."""
    if d.is_bool:
        return (0, 1)
    if d.is_int and d.bits <= 16:
        return (0, (1 << d.bits) - 1) if d.is_unsigned else \
            (-(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1)
    return (-INF, INF)


def _floordiv(x, d):
    if x in (INF, -INF):
        return x
    return x // d


def simplify(e, var_bounds: dict | None = None):
    """Linear normal form plus range-aware floordiv / floormod elimination (integers only)."""
    if not isinstance(e, Expr) or not e.dtype.is_int or e.dtype.bits < 32:
        return e    # (the normal form reassociates, which a type that wraps does not allow)
    var_bounds = var_bounds or {}
    return linear_simplify(_rewrite(e, var_bounds))


def simplify_int_ops(node, var_bounds: dict):
    """node (an expression or a statement) with every integer operation in it simplified with
    var_bounds: once a register index has its range, or is 2p / 2p + 1, a shift amount such as
    (tx * 16 % 512 * 2 + l // 2 % 16 * 2 + l % 2) % 2 * 4 becomes l % 2 * 4 (or 4), which nvcc
    folds per unrolled register instead of shifting by thread-dependent bits."""
    from ..ir.visitor import Mutator

    class Simplify(Mutator):
        def visit_Binary(self, e):
            out = self.generic_visit(e)
            if isinstance(out, Binary) and out.dtype.is_int:
                return simplify(out, var_bounds)
            return out
    return Simplify().visit(node)


def _rewrite(e, vb):
    if isinstance(e, Binary) and e.dtype.is_int:
        a, b = _rewrite(e.a, vb), _rewrite(e.b, vb)
        if e.op in ("//", "%") and isinstance(b, Const) and b.value > 0:
            return _divmod(e.op, linear_simplify(a), int(b.value), vb, e)
        if e.op in ("min", "max"):
            ba, bb = bound_of(a, vb), bound_of(b, vb)
            if e.op == "min":
                if ba[1] <= bb[0]:
                    return a
                if bb[1] <= ba[0]:
                    return b
            else:
                if ba[0] >= bb[1]:
                    return a
                if bb[0] >= ba[1]:
                    return b
        if a is e.a and b is e.b and not (isinstance(a, Const) and isinstance(b, Const)):
            return e
        return binary(e.op, a, b, e.span)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        inner = _rewrite(e.value, vb)
        return inner if inner.dtype is e.dtype else Cast(inner, e.dtype, e.span)
    return e


def divisor_of(e) -> int:
    """A positive integer that always divides the integer expression e (1 when nothing is
    known; 0 for the constant 0, which every integer divides): `tx * 16 % 512 * 2` is a
    multiple of 32."""
    if isinstance(e, Const):
        return abs(int(e.value)) if isinstance(e.value, (int, bool)) else 1
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return divisor_of(e.value)
    if not isinstance(e, Binary) or not e.dtype.is_int:
        return 1
    if e.op == "*":
        return divisor_of(e.a) * divisor_of(e.b)
    if e.op in ("+", "-"):
        return math.gcd(divisor_of(e.a), divisor_of(e.b))
    if e.op == "%" and isinstance(e.b, Const) and e.b.value > 0:
        return math.gcd(divisor_of(e.a), int(e.b.value))
    if e.op in ("//", "/") and isinstance(e.b, Const) and e.b.value > 0:
        # an exact quotient of a multiple: (tx * 8 % 64) // 2 is a multiple of 4
        a, d = divisor_of(e.a), int(e.b.value)
        return a // d if a and a % d == 0 else 1
    if e.op == "<<" and isinstance(e.b, Const) and 0 <= e.b.value < 32:
        return divisor_of(e.a) << int(e.b.value)
    if e.op == "&" and isinstance(e.b, Const) and e.b.value > 0:
        m = int(e.b.value)
        return max(m & -m, math.gcd(divisor_of(e.a), 1 << 30))   # the larger power of two
    return 1


def _divmod(op: str, a, d: int, vb, original):
    """x // d or x % d where x = sum(c_i * t_i) + k: move the terms whose coefficients d
    divides out of the division, and drop the division when the rest lies in [0, d). Terms
    known to be multiples of d (divisor_of) leave the division as one exact quotient; terms
    that are multiples of some g dividing d, next to a rest in [0, g), keep the division to
    themselves: (tx * 16 % 512 * 2 + 1) // 32 is tx * 16 % 512 * 2 // 32, and
    (tx * 16 + 3) % 512 is tx * 16 % 512 + 3 (the loads of one group's scale, or of one
    16-byte run, become one expression that nvcc loads or computes once)."""
    terms, k = linear_form(a)
    whole, multiple, rest = [], [], []
    for atom, coeff in terms.values():
        if coeff % d == 0:
            whole.append((atom, coeff))
        elif (coeff * divisor_of(atom)) % d == 0:
            multiple.append((atom, coeff))
        else:
            rest.append((atom, coeff))
    whole_k, rest_k = (k // d) * d, k % d
    if multiple:
        exact = binary("//", _sum(multiple, 0, a), const(d, a.dtype), original.span)
        whole.append((exact, d))
    rest_expr = _sum(rest, rest_k, a)
    lo, hi = bound_of(rest_expr, vb)
    quotient = _sum([(t, c // d) for t, c in whole], whole_k // d, a)
    if 0 <= lo and hi < d:
        if op == "//":
            return quotient
        return rest_expr
    aligned, small, g = [], [], 0
    for atom, coeff in rest:
        t = abs(coeff) * divisor_of(atom)
        if t > 1:
            aligned.append((atom, coeff))
            g = math.gcd(g, t)
        else:
            small.append((atom, coeff))
    if aligned and d % g == 0:
        # the constant's multiple of g stays with the aligned terms: (k * 32 + 35) % 64 is
        # (k * 32 + 32) % 64 + 3
        small_expr = _sum(small, rest_k % g, a)
        slo, shi = bound_of(small_expr, vb)
        if 0 <= slo and shi < g:
            inner = binary(op, _sum(aligned, rest_k - rest_k % g, a), const(d, a.dtype),
                           original.span)
            if op == "//":
                return linear_simplify(quotient + inner)
            return linear_simplify(inner + small_expr)
    if not whole and whole_k == 0:
        if 0 <= lo and hi < d:
            return rest_expr if op == "%" else const(0, a.dtype)
        return binary(op, rest_expr, const(d, a.dtype), original.span)
    inner = binary(op, rest_expr, const(d, a.dtype), original.span)
    if op == "//":
        return linear_simplify(quotient + inner)
    return inner


def _sum(terms, k, like):
    out = None
    for atom, coeff in terms:
        t = atom if coeff == 1 else atom * coeff
        out = t if out is None else out + t
    if out is None:
        return const(k, like.dtype)
    return linear_simplify(out + k) if k else linear_simplify(out)


def var_range(var: Var, extent: int, start: int = 0) -> dict:
    return {id(var): (start, start + extent - 1)}


def bounds_under(cond, var_bounds: dict) -> dict:
    """{id(var): (lo, hi)}, the bounds of var_bounds' variables narrowed where cond holds, for
    each conjunct of cond of the form `a * v + c < d` (or <=, >, >=) with a single variable v:
    a pipelined loop's guard `k + 2 < 128` tells what its copies may assume of k."""
    out = {}

    def narrow(c):
        if not isinstance(c, Binary):
            return
        if c.op == "and":
            narrow(c.a)
            narrow(c.b)
            return
        if c.op not in ("<", "<=", ">", ">=") or not (c.a.dtype.is_int and c.b.dtype.is_int):
            return
        terms, k = linear_form(binary("-", c.a, c.b))
        if len(terms) != 1:
            return
        (v, a), = terms.values()
        if not isinstance(v, Var) or id(v) not in var_bounds:
            return
        if c.op in (">", ">="):  # a v + k > 0  <=>  -a v - k < 0
            a, k = -a, -k
        strict = c.op in ("<", ">")
        # a v + k < 0 (strict) or <= 0: v against -k / a, rounded inward.
        lo, hi = out.get(id(v), var_bounds[id(v)])
        if a > 0:
            hi = min(hi, (-k - 1) // a if strict else (-k) // a)
        else:
            lo = max(lo, -((-k - 1) // -a) if strict else -((-k) // -a))
        out[id(v)] = (lo, hi)
    narrow(cond)
    return out


__all__ = ["bound_of", "bounds_under", "simplify", "var_range", "convert"]
