"""The expressions of a loop body that run in every iteration: what a transform may evaluate
ahead of time (in an earlier iteration, or before the loop) without making a read the program
would not make.

An expression runs whenever the statement holding it runs, except inside it a select's branches
(they run only as its condition says) and the right operand of a logical and / or (only as the
left says). A statement runs in every iteration unless it is under an `if` (whose condition
itself does run) or in a loop that might run no times (an inner loop with a constant, positive
trip count does run).
"""
from __future__ import annotations

from ....ir.expr import Binary, BufferLoad, Call, Cast, Select, Unary
from ....ir.linear import constant_value
from ....ir.stmt import BufferStore, Evaluate, For, IfThenElse, SeqStmt


def children(e) -> tuple:
    """The operands of an expression node."""
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Unary):
        return (e.a,)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, BufferLoad):
        return e.indices
    if isinstance(e, Call):   # less its text arguments (T.call_extern's function name)
        return tuple(a for a in e.args if not isinstance(a, str))
    return ()


def visit_expr(e, take):
    """take(x) for the subexpressions x of e that run whenever e does, outermost first; when
    take(x) returns True, x's own parts are not visited."""
    if take(e):
        return
    if isinstance(e, Select):
        visit_expr(e.cond, take)
    elif isinstance(e, Binary) and e.op in ("and", "or"):
        visit_expr(e.a, take)
    else:
        for child in children(e):
            visit_expr(child, take)


def visit_body(s, take, claim=None, depth: int = 0):
    """visit_expr(take) over every expression of statement s that runs whenever s does.
    claim(statement, depth) is asked first for each statement that is not a sequence (depth 0:
    the body's own statements, 1 and more: inside inner loops); when it returns True the
    statement is the caller's and is not visited."""
    if isinstance(s, SeqStmt):
        for x in s.stmts:
            visit_body(x, take, claim, depth)
        return
    if claim is not None and claim(s, depth):
        return
    if isinstance(s, For):
        n = constant_value(s.extent)
        if n is not None and n > 0:
            visit_body(s.body, take, claim, depth + 1)
    elif isinstance(s, IfThenElse):
        visit_expr(s.cond, take)
    elif isinstance(s, BufferStore):
        for i in s.indices:
            visit_expr(i, take)
        visit_expr(s.value, take)
    elif isinstance(s, Evaluate):
        visit_expr(s.value, take)
