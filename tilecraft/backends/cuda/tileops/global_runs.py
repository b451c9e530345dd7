"""Global reads of an element-wise run loaded as one vector: gathers such as an im2col tile.

vector_runs.py moves a thread's run of w consecutive elements of a shared-memory store at once.
A value read from global memory at an offset that advances by one element along the run
(data[n, ih, iw, c] with c = kk % C, kk the run's position, C a multiple of w) is w consecutive
elements too, so the run reads it with 16-byte loads instead of w loads of one element each. A
read under a condition (T.if_then_else(valid, data[...], 0): padding, a ragged edge) is loaded
by a predicated vector load, zero where the condition is false, when the condition is the same
for the whole run; the select then is the staged value itself. The condition is the same for
the whole run when each comparison in it compares expressions that do not change along the
run, or compares x + d (d in [0, w), x a multiple of w) with a bound that is a multiple of w
(kk < K_total with K_total = KH * KW * C): the run lies wholly on one side of such a bound.
"""
from __future__ import annotations

from ....arith.bounds import divisor_of
from ....ir.expr import Binary, Const, Expr, Select, Unary
from ....ir.linear import structural_key
from ....ir.visitor import children
from ....passes.parallel_nests import guarded_global_read

_ORDER = ("<", "<=", ">", ">=")


def guarded_global_loads(value):
    """(expression to stage, the load, its guard or None) for each outermost expression of
    value that parallel_nests.guarded_global_read recognises, outside the branches of any other select (a load read
    only on some path cannot be read ahead unconditionally)."""
    out = []

    def visit(e, conditional):
        found = None if conditional else guarded_global_read(e)
        if found is not None:
            out.append((e, *found))
            return
        inside = conditional or isinstance(e, Select)
        for c in children(e):
            if isinstance(c, Expr):
                visit(c, inside and c is not getattr(e, "cond", None))
    visit(value, False)
    return out


def uniform_over_run(cond, at, w: int, simplify) -> bool:
    """cond takes one value for the whole run (module docstring); at(e, k) is e at element k
    of the run, simplified."""
    if isinstance(cond, Binary) and cond.op in ("and", "or"):
        return all(uniform_over_run(x, at, w, simplify) for x in (cond.a, cond.b))
    if isinstance(cond, Unary) and cond.op in ("not", "!"):
        return uniform_over_run(cond.a, at, w, simplify)
    if not (isinstance(cond, Binary) and cond.op in _ORDER + ("==", "!=")):
        first = structural_key(at(cond, 0))
        return all(structural_key(at(cond, k)) == first for k in range(1, w))
    moves = [[simplify(at(side, k) - at(side, 0)) for k in range(w)]
             for side in (cond.a, cond.b)]
    if all(isinstance(d, Const) and d.value == 0 for side in moves for d in side):
        return True
    if cond.op not in _ORDER or \
            not all(isinstance(d, Const) and d.value == 0 for d in moves[1]) or \
            not all(isinstance(d, Const) and 0 <= d.value < w for d in moves[0]):
        return False
    bound = at(cond.b, 0)
    if not isinstance(bound, Const):
        return False
    # x + d < b and x + d >= b split runs at b; x + d <= b and x + d > b at b + 1
    edge = int(bound.value) + (1 if cond.op in ("<=", ">") else 0)
    return edge % w == 0 and divisor_of(at(cond.a, 0)) % w == 0
