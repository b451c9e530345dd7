"""Accesses to shared, fragment and local buffers that leave the buffer, found when compiling.

Only global tensors are masked at their edges (by the copies); an element of any other buffer
indexed past its extent is another element's register or shared memory, or nothing at all.
A T.Parallel nest larger than the fragment it indexes is the common case: its iterations are
laid out over the threads like the fragment, and those past its end land on registers of other
elements. So each access is bounded by interval arithmetic over the ranges of the enclosing
loops and block indices, narrowed by the `if` conditions (and T.if_then_else selects) around
it; an index whose whole range is known and leaves its dimension is an error at the access.
An index that depends on a condition the bounds cannot follow, or on loaded data, is left to
the run (the interpreter and the emulator check every access).
"""
from __future__ import annotations

from contextlib import contextmanager

from ..arith.bounds import INF, bound_of, bounds_under
from ..errors import TileError
from ..ir.buffer import FRAGMENT, GLOBAL, BufferRegion, is_shared
from ..ir.expr import Binary, BufferLoad, Expr, Select, Var
from ..ir.stmt import Allocate, BufferStore, For, IfThenElse, Kernel
from ..ir.visitor import children


def check_access_bounds(body):
    """Raise a TileError at the first access of body provably outside its buffer."""
    _Bounds().stmt(body)


class _Bounds:
    def __init__(self):
        self.ranges: dict = {}      # id(var) -> (lo, hi) of the loop and block variables
        self.names: dict = {}       # id(var) -> var, for messages
        self.unknown: set = set()   # ids of variables an enclosing condition limits opaquely

    # --- statements ----------------------------------------------------------------------
    def stmt(self, s):
        if isinstance(s, Kernel):
            for var, extent in zip(s.block_vars, s.grid):
                self.bind(var, 0, bound_of(extent, self.ranges)[1] - 1)
            self.stmt(s.body)
        elif isinstance(s, For):
            self.expr(s.start)
            self.expr(s.extent)
            lo = bound_of(s.start, self.ranges)[0]
            hi = bound_of(s.start + s.extent, self.ranges)[1] - 1
            if hi < lo:  # the loop never runs
                return
            self.bind(s.var, lo, hi)
            self.stmt(s.body)
        elif isinstance(s, IfThenElse):
            self.expr(s.cond)
            with self.assuming(s.cond):
                self.stmt(s.then_body)
            if s.else_body is not None:
                with self.opaque(s.cond):
                    self.stmt(s.else_body)
        elif isinstance(s, Allocate):
            return
        elif isinstance(s, BufferStore):
            self.access(s.buffer, s.indices, s.span, "written")
            self.expr(s.value)
        else:
            for child in children(s):
                if isinstance(child, BufferRegion):
                    self.region(child, s.span)
                elif isinstance(child, Expr):
                    self.expr(child)
                else:
                    self.stmt(child)

    def bind(self, var: Var, lo, hi):
        self.ranges[id(var)] = (lo, hi)
        self.names[id(var)] = var

    # --- expressions -----------------------------------------------------------------------
    def expr(self, e):
        if isinstance(e, BufferLoad):
            self.access(e.buffer, e.indices, e.span, "read")
            return
        if isinstance(e, Select):
            self.expr(e.cond)
            with self.assuming(e.cond):
                self.expr(e.a)
            with self.opaque(e.cond):
                self.expr(e.b)
            return
        if isinstance(e, Binary) and e.op == "and":  # the right side runs where the left holds
            self.expr(e.a)
            with self.assuming(e.a):
                self.expr(e.b)
            return
        for child in children(e):
            if isinstance(child, Expr):
                self.expr(child)

    @contextmanager
    def assuming(self, cond):
        """Inside: the variables' ranges narrowed by each conjunct of cond the bounds can
        follow (`v < c`, `a * v + c >= d`); the variables of the other conjuncts unknown."""
        saved, unknown = {}, self.unknown
        for part in _conjuncts(cond):
            narrowed = bounds_under(part, self.ranges)
            if narrowed:
                for v in narrowed:
                    saved.setdefault(v, self.ranges[v])
                self.ranges.update(narrowed)
            else:
                self.unknown = self.unknown | _var_ids(part)
        try:
            yield
        finally:
            self.ranges.update(saved)
            self.unknown = unknown

    @contextmanager
    def opaque(self, cond):
        """Inside: where cond does not hold, which says nothing the bounds can use."""
        unknown = self.unknown
        self.unknown = unknown | _var_ids(cond)
        try:
            yield
        finally:
            self.unknown = unknown

    # --- accesses --------------------------------------------------------------------------
    def access(self, buffer, indices, span, how: str):
        for d, index in enumerate(indices):
            self.expr(index)
            self.within(buffer, d, index, 1, span, how)

    def region(self, r: BufferRegion, span):
        for d, (start, extent) in enumerate(r.ranges):
            self.expr(start)
            self.expr(extent)
            self.within(r.buffer, d, start, bound_of(extent, self.ranges)[1], span, "used")

    def within(self, buffer, d: int, start, count, span, how: str):
        """start .. start + count - 1 must lie in dimension d of buffer."""
        size = buffer.shape[d]
        if buffer.scope == GLOBAL or not isinstance(size, int) or count == INF:
            return
        used = _var_ids(start)
        if used & self.unknown:
            return
        lo, hi = bound_of(start, self.ranges)
        hi = hi + count - 1
        if lo == -INF or hi == INF or (0 <= lo and hi < size):
            return
        over = ", ".join(sorted(f"{self.names[v].name} in [{self.ranges[v][0]}, "
                                f"{self.ranges[v][1]}]" for v in used if v in self.ranges))
        where = f" (where {over})" if over else ""
        raise TileError(f"{_kind(buffer)} {buffer.name} is {how} out of bounds: index {d} "
                        f"takes values in [{lo}, {hi}]{where}, but dimension {d} has extent "
                        f"{size}", span)


def _conjuncts(cond):
    if isinstance(cond, Binary) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _var_ids(e) -> set:
    if isinstance(e, Var):
        return {id(e)}
    out = set()
    for child in children(e) if isinstance(e, Expr) else ():
        out |= _var_ids(child)
    return out


def _kind(buffer) -> str:
    if buffer.scope == FRAGMENT:
        return "fragment"
    return "shared tile" if is_shared(buffer.scope) else "local buffer"
