"""Structural checks of a PrimFunc: what every pass may assume and must preserve.

A violation here is a bug in whatever built the IR (the frontend or a pass), so it is reported
as an internal error that names the check and the user line of the offending node.
"""
from __future__ import annotations

from .buffer import GLOBAL, Buffer, BufferRegion
from .expr import BufferLoad, Expr, Var
from .stmt import Allocate, BufferStore, For, IfThenElse, Kernel, LOOP_KINDS, PrimFunc, SeqStmt
from .tileop import Atomic, TileOp
from .visitor import children
from ..errors import TileInternalError


class VerifyError(Exception):
    pass


class _Verifier:
    def __init__(self, func: PrimFunc):
        self.func = func
        self.problems: list[tuple[str, object]] = []
        self.vars: set[int] = set()
        self.buffers: set[int] = set()
        for p in func.params:
            if isinstance(p, Var):
                self.vars.add(id(p))
            else:
                self.buffers.add(id(p))
                for d in p.shape:
                    if isinstance(d, Expr):
                        self._bind_free_vars(d)

    def _bind_free_vars(self, e):
        if isinstance(e, Var):
            self.vars.add(id(e))
        for c in children(e):
            self._bind_free_vars(c)

    def problem(self, text: str, node):
        self.problems.append((text, getattr(node, "span", None)))

    # --- statements -------------------------------------------------------------
    def stmt(self, s, in_kernel: bool, in_parallel: bool):
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x, in_kernel, in_parallel)
        elif isinstance(s, Kernel):
            if in_kernel:
                self.problem("a Kernel is nested inside another Kernel", s)
            if not 1 <= len(s.grid) == len(s.block_vars) <= 3:
                self.problem("a Kernel needs 1-3 grid extents, one block variable each", s)
            for g in s.grid:
                self.expr(g, s)
            self.vars.update(id(v) for v in s.block_vars)
            self.vars.update(id(v) for v in s.thread_bindings if v is not None)
            self.stmt(s.body, True, False)
        elif isinstance(s, For):
            if s.kind not in LOOP_KINDS:
                self.problem(f"unknown loop kind {s.kind!r}", s)
            if in_parallel and s.kind == "pipelined":
                self.problem("a pipelined loop is nested in a parallel loop", s)
            self.expr(s.start, s)
            self.expr(s.extent, s)
            self.vars.add(id(s.var))
            self.stmt(s.body, in_kernel, in_parallel or s.kind == "parallel")
        elif isinstance(s, IfThenElse):
            self.expr(s.cond, s)
            if not s.cond.dtype.is_bool:
                self.problem("an if condition is not boolean", s)
            self.stmt(s.then_body, in_kernel, in_parallel)
            if s.else_body is not None:
                self.stmt(s.else_body, in_kernel, in_parallel)
        elif isinstance(s, Allocate):
            if in_parallel:
                self.problem(f"{s.buffer.name} is allocated inside a parallel loop", s)
            if not in_kernel and s.buffer.scope != GLOBAL:
                self.problem(f"{s.buffer.name} ({s.buffer.scope}) is allocated outside a Kernel", s)
            self.buffers.add(id(s.buffer))
        elif isinstance(s, BufferStore):
            self.access(s.buffer, s.indices, s)
            self.expr(s.value, s)
            if s.value.dtype is not s.buffer.dtype:
                self.problem(f"a store into {s.buffer.name} ({s.buffer.dtype}) has a value of "
                             f"type {s.value.dtype}", s)
        elif isinstance(s, TileOp):
            if in_parallel and not (isinstance(s, Atomic) and not isinstance(s.value, BufferRegion)):
                self.problem(f"tile op {s.op_name} inside a parallel loop", s)
            for c in children(s):
                self.node(c, s)
            for b in list(s.reads()) + list(s.writes()):
                self.known(b, s)
        else:
            for c in children(s):
                self.node(c, s)
        if not in_kernel and not isinstance(s, (SeqStmt, Kernel, Allocate)):
            self.problem(f"{type(s).__name__} outside a Kernel", s)

    def node(self, n, owner):
        if isinstance(n, BufferRegion):
            self.known(n.buffer, owner)
            if len(n.ranges) != n.buffer.ndim:
                self.problem(f"a region of {n.buffer.name} has {len(n.ranges)} ranges for "
                             f"{n.buffer.ndim} dimensions", owner)
            for start, extent in n.ranges:
                self.expr(start, owner)
                self.expr(extent, owner)
        elif isinstance(n, Expr):
            self.expr(n, owner)

    # --- expressions ------------------------------------------------------------
    def expr(self, e, owner):
        if isinstance(e, Var) and id(e) not in self.vars:
            self.problem(f"variable {e.name} is used outside the scope that defines it", owner)
        if isinstance(e, BufferLoad):
            self.access(e.buffer, e.indices, owner)
        for c in children(e):
            if isinstance(c, Expr):
                self.expr(c, owner)

    def access(self, buffer: Buffer, indices, owner):
        self.known(buffer, owner)
        if len(indices) != buffer.ndim:
            self.problem(f"{buffer.name} has {buffer.ndim} dimensions but is indexed with "
                         f"{len(indices)}", owner)
        for i in indices:
            self.expr(i, owner)
            if not (i.dtype.is_int or i.dtype.is_bool):
                self.problem(f"an index of {buffer.name} has type {i.dtype}", owner)

    def known(self, buffer: Buffer, owner):
        if id(buffer) not in self.buffers:
            self.problem(f"buffer {buffer.name} is used before it is allocated", owner)


def problems(func: PrimFunc) -> list[tuple[str, object]]:
    """Every structural problem found, as (text, span) pairs; empty when the IR is sound."""
    v = _Verifier(func)
    v.stmt(func.body, False, False)
    return v.problems


def verify(func: PrimFunc, after: str = "the frontend"):
    """Raise an internal error naming the first problem, pointing at the user's line."""
    found = problems(func)
    if found:
        text, span = found[0]
        raise TileInternalError(after, VerifyError(text), span)
