"""Linear normal form of integer expressions: sum of coefficient * atom + constant.

This is what makes `(bx + 1) * 128 - bx * 128` fold to 128, so slice extents written the
paper's way are known tile sizes. Atoms are variables or non-linear subterms, compared
structurally.
"""
from __future__ import annotations

from .expr import (COMPARE_OPS, LINEAR_FORM, STRUCTURAL_KEY, Binary, Cast, Const, Expr, Unary,
                   Var, const, convert)


def structural_key(e) -> tuple:
    """A hashable key equal for structurally equal expressions (variables by identity)."""
    if isinstance(e, Var):
        return ("var", id(e))
    if isinstance(e, Const):
        return ("const", e.value, e.dtype.name)
    if isinstance(e, Expr) and hasattr(e, "__dataclass_fields__"):
        # Expressions are never changed in place, so a node keeps its key (Expr.__getstate__
        # leaves it out of copies that may rename the variables under it).
        key = e.__dict__.get(STRUCTURAL_KEY)
        if key is None:
            parts = [type(e).__name__]
            for name in e.__dataclass_fields__:
                if name == "span":
                    continue
                parts.append(structural_key(getattr(e, name)))
            key = e.__dict__[STRUCTURAL_KEY] = tuple(parts)
        return key
    if isinstance(e, (tuple, list)):
        return tuple(structural_key(x) for x in e)
    if hasattr(e, "name") and hasattr(e, "scope"):  # a Buffer
        return ("buffer", id(e))
    return ("py", repr(e))


def linear_form(e: Expr):
    """(terms, constant) with terms = {key: [atom, coeff]}; only for integer expressions."""
    terms: dict = {}
    total = _collect(e, 1, terms)
    return {k: v for k, v in terms.items() if v[1] != 0}, total


def _collect(e: Expr, scale: int, terms: dict) -> int:
    if isinstance(e, Const):
        return scale * int(e.value)
    if isinstance(e, Binary) and e.op in ("+", "-"):
        sign = 1 if e.op == "+" else -1
        return _collect(e.a, scale, terms) + _collect(e.b, sign * scale, terms)
    if isinstance(e, Binary) and e.op == "*":
        if isinstance(e.b, Const):
            return _collect(e.a, scale * int(e.b.value), terms)
        if isinstance(e.a, Const):
            return _collect(e.b, scale * int(e.a.value), terms)
    if isinstance(e, Unary) and e.op == "-":
        return _collect(e.a, -scale, terms)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return _collect(e.value, scale, terms)
    atom = _simplify_atom(e)
    if isinstance(atom, Const):
        return scale * int(atom.value)
    key = structural_key(atom)
    if key in terms:
        terms[key][1] += scale
    else:
        terms[key] = [atom, scale]
    return 0


def _simplify_atom(e: Expr) -> Expr:
    if isinstance(e, Binary) and e.op in ("//", "%", "min", "max", "/"):
        a, b = simplify(e.a), simplify(e.b)
        if a is e.a and b is e.b:
            return e
        from ..ir.expr import binary
        return binary(e.op, a, b, e.span)
    return e


def simplify(e):
    """Canonical linear form of an integer expression (other expressions unchanged)."""
    if not isinstance(e, Expr) or not e.dtype.is_int:
        return e
    done = e.__dict__.get(LINEAR_FORM)
    if done is None:
        done = e.__dict__[LINEAR_FORM] = _simplified(e)
    return done


def _simplified(e):
    terms, c = linear_form(e)
    out = None
    for atom, coeff in terms.values():
        term = atom if coeff == 1 else atom * coeff if coeff != -1 else -atom
        out = term if out is None else (out - atom * (-coeff) if coeff < 0 else out + term)
    if out is None:
        return const(c, e.dtype, e.span)
    if c:
        out = out + c if c > 0 else out - (-c)
    if out.dtype is not e.dtype:
        out = Cast(out, e.dtype, e.span)
    return out


def constant_value(e) -> int | None:
    """The integer value of e if it simplifies to a constant, else None."""
    if isinstance(e, int):
        return e
    if not isinstance(e, Expr) or not e.dtype.is_int:
        return None
    terms, c = linear_form(e)
    return None if terms else c


def equal(a, b) -> bool:
    """Provably equal integer expressions (linear forms match)."""
    d = simplify(convert(a) - convert(b))
    return isinstance(d, Const) and d.value == 0


def decide(cond) -> bool | None:
    """The truth of an integer comparison whose sides differ by a constant (`N == N`,
    `M + 1 > M`), else None: it depends on values known only at launch."""
    if not (isinstance(cond, Binary) and cond.op in COMPARE_OPS and cond.a.dtype.is_int and
            cond.b.dtype.is_int):
        return None
    d = constant_value(cond.a - cond.b)
    if d is None:
        return None
    return {"<": d < 0, "<=": d <= 0, ">": d > 0, ">=": d >= 0, "==": d == 0,
            "!=": d != 0}[cond.op]
