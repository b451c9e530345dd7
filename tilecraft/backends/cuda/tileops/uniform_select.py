"""Selects that a whole T.Parallel nest agrees on, decided once per nest instead of per element.

A mask written element by element, such as attention's

    acc_s[i, j] = T.if_then_else(bx * 128 + i >= k * 128 + j and k * 128 + j < seq_len, 0, -inf)

costs a few instructions for every element of every iteration, yet for most key tiles it holds
for every (i, j) of the tile: only the tiles on the diagonal and at the ragged end need it. When
a condition is a conjunction (or disjunction) of integer comparisons that are linear in the
nest's variables, "true for the whole tile" is one comparison on the variables outside the nest:
for `lhs >= rhs` with lhs - rhs = sum(c_v * v) + R, it holds everywhere iff R + min(sum c_v v) >= 0,
the minimum taken at the box's corners. `unswitch_selects` returns that tile-wide condition and the
body with such selects replaced by their true side, so the lowering can emit

    if (tile-wide condition) { the body without the mask } else { the body as written }

where the branch is uniform over the block (it names no thread), so no warp diverges.
"""
from __future__ import annotations

from ....ir.linear import linear_form, simplify
from ....ir.expr import Binary, BufferLoad, Const, Expr, Var, const, logical
from ....ir.visitor import Mutator, walk

_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def unswitch_selects(loop_vars: list, extents: list, starts: list, body):
    """(condition, body with the selects it decides replaced by their true side), or None when
    no select in body has a condition that depends on the nest's variables and can be decided
    for the whole nest at once."""
    ranges = {}
    for v, extent, start in zip(loop_vars, extents, starts):
        if not (isinstance(extent, Const) and isinstance(start, Const)):
            return None
        ranges[id(v)] = (int(start.value), int(start.value) + int(extent.value) - 1)
    if any(hi < lo for lo, hi in ranges.values()):
        return None
    guards = []

    class Replace(Mutator):
        def visit_Select(self, e):
            if _names_any(e.cond, ranges):
                whole = _holds_everywhere(e.cond, ranges)
                # Only scalars in the branch condition: it is evaluated outside the nest, where
                # tile accesses have not been rewritten to the thread's view.
                if whole is not None and not any(isinstance(n, BufferLoad) for n in walk(whole)):
                    guards.append(whole)
                    return self.visit(e.a)
            return self.generic_visit(e)

    fast = Replace().visit(body)
    if not guards:
        return None
    cond = guards[0]
    for g in guards[1:]:
        cond = logical("and", cond, g)
    return cond, fast


def _names_any(e, ranges: dict) -> bool:
    return any(isinstance(n, Var) and id(n) in ranges for n in walk(e))


def _holds_everywhere(cond: Expr, ranges: dict):
    """A condition over the variables outside the nest that implies cond for every point of
    the nest (exactly when each comparison is linear in the nest's variables), or None."""
    if isinstance(cond, Binary) and cond.op in ("and", "or"):
        a, b = _holds_everywhere(cond.a, ranges), _holds_everywhere(cond.b, ranges)
        if cond.op == "and":
            return None if a is None or b is None else logical("and", a, b)
        # Either side holding everywhere is enough; a side that cannot be decided is dropped.
        if a is None or b is None:
            return a if b is None else b
        return logical("or", a, b)
    if not _names_any(cond, ranges):
        return cond
    if not (isinstance(cond, Binary) and cond.op in _FLIPPED and cond.a.dtype.is_int and
            cond.b.dtype.is_int):
        return None
    terms, constant = linear_form(cond.a - cond.b)
    low = high = constant
    rest = None
    for atom, coeff in terms.values():
        if isinstance(atom, Var) and id(atom) in ranges:
            lo, hi = ranges[id(atom)]
            low += min(coeff * lo, coeff * hi)
            high += max(coeff * lo, coeff * hi)
            continue
        if _names_any(atom, ranges):
            return None  # i // 2, i * j, ...: not linear in the nest's variables
        term = atom * coeff if coeff != 1 else atom
        rest = term if rest is None else rest + term
    rest = const(0, cond.a.dtype) if rest is None else simplify(rest)
    # cond is `rest + d op 0` for d in [low, high]; it holds for every d iff it holds at the
    # worst end of the range.
    op = cond.op
    worst = high if op in ("<", "<=") else low
    return Binary(op, rest, const(-worst, rest.dtype), cond.dtype, cond.span)
