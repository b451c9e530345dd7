"""Frames: what `with T.Kernel(...)` and `for ... in T.Parallel/Pipelined/serial(...)` open.

The parser asks a frame for the values its targets bind to, parses the body into a new
statement list, and hands the body back for the frame to wrap into IR.
"""
from __future__ import annotations

import math

from ..ir.linear import simplify
from ..errors import Span, TileError, current_span
from . import builder as bld
from ..grid_limits import check_static_grid
from ..ir import dtypes as dt
from ..ir.annotations import (ASYNC_WITHOUT_WAIT, PREFER_ASYNC, PTX_COMMIT_CALL, PTX_WAIT_CALL,
                              WS_REGION)
from ..ir.expr import Call, Const, Expr, Var, const, convert
from ..ir.stmt import Evaluate, For, Kernel, seq


def _index_value(x, what: str, span) -> Expr:
    from ..ir.expr import is_python_number
    if not isinstance(x, Expr) and not (is_python_number(x) and not isinstance(x, float)):
        raise TileError(f"{what} must be an integer, got {type(x).__name__} {x!r}", span)
    e = convert(x)
    if not e.dtype.is_int:
        raise TileError(f"{what} must be an integer, got a {e.dtype} value", span)
    return e


class KernelFrame:
    def __init__(self, grid, threads, span: Span | None):
        self.span = span
        if not 1 <= len(grid) <= 3:
            raise TileError(f"T.Kernel takes 1 to 3 grid extents, got {len(grid)}", span)
        self.grid = tuple(simplify(_index_value(g, f"grid extent {i}", span))
                          for i, g in enumerate(grid))
        for i, g in enumerate(self.grid):
            if isinstance(g, Const) and g.value < 1:
                raise TileError(f"T.Kernel grid extent {i} must be at least 1, got {g.value}", span)
        check_static_grid(self.grid, span)
        if isinstance(threads, (int,)) and not isinstance(threads, bool):
            threads = (threads,)
        if not isinstance(threads, (tuple, list)) or not 1 <= len(threads) <= 3 or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in threads):
            raise TileError("T.Kernel threads= must be a compile-time int or a tuple of 1 to 3 "
                            f"ints, got {threads!r}", span)
        if any(t < 1 for t in threads):
            raise TileError(f"T.Kernel threads= must be positive, got {tuple(threads)}", span)
        total = 1
        for t in threads:
            total *= t
        if total > 1024:
            raise TileError(f"T.Kernel asks for {total} threads per block; a block has at most "
                            "1024", span)
        self.threads = tuple(threads)
        self.block_vars: tuple = ()
        self.thread_vars: list = [None, None, None]  # made when the program first reads one
        self.attrs: dict = {}  # what the body's directives ask of the whole launch

    @property
    def num_threads(self) -> int:
        return math.prod(self.threads)

    def thread_extent(self, dim: int) -> int:
        """blockDim along dim: the threads= entry, 1 where threads= gives none."""
        return self.threads[dim] if dim < len(self.threads) else 1

    def thread_binding(self, dim: int) -> Expr:
        """threadIdx along dim: one variable per kernel and dimension (0 where its extent
        is 1, as every thread has index 0 there)."""
        if self.thread_extent(dim) == 1:
            return convert(0)
        if self.thread_vars[dim] is None:
            self.thread_vars[dim] = Var("t" + "xyz"[dim], dt.int32, current_span())
        return self.thread_vars[dim]

    def is_index(self, v) -> bool:
        """v is one of this launch's thread or block indices."""
        return any(v is x for x in (*self.thread_vars, *self.block_vars))

    def bind(self, names: list[str]):
        defaults = ("bx", "by", "bz")
        self.block_vars = tuple(Var(names[i] if i < len(names) and names[i] else defaults[i],
                                    dt.int32, self.span) for i in range(len(self.grid)))
        return self.block_vars[0] if len(self.block_vars) == 1 else self.block_vars

    def build(self, body) -> Kernel:
        read = any(v is not None for v in self.thread_vars)
        bindings = tuple(self.thread_vars[:len(self.threads)]) if read else ()
        return Kernel(self.grid, self.block_vars, self.threads, body, self.span,
                      attrs=dict(self.attrs), thread_bindings=bindings)


class LoopFrame:
    """One loop kind over one or more dimensions (T.Parallel takes several)."""

    def __init__(self, kind: str, ranges, annotations=None, span=None, step=None):
        self.kind = kind
        self.span = span
        self.annotations = dict(annotations or {})
        self.step = step
        self.ranges = []
        for i, (start, stop) in enumerate(ranges):
            start = simplify(_index_value(start, f"T.{_public(kind)} start", span))
            stop = simplify(_index_value(stop, f"T.{_public(kind)} extent", span))
            extent = simplify(stop - start)
            if isinstance(extent, Const) and extent.value < 0:
                raise TileError(f"T.{_public(kind)}: loop {i} has a negative extent "
                                f"{extent.value}", span)
            self.ranges.append((start, extent))
        self.vars: tuple = ()

    @property
    def title(self) -> str:
        """How the user wrote the loop: T.Parallel, T.serial, ..."""
        return f"T.{_public(self.kind)}"

    def bind(self, names: list[str]):
        if len(names) != len(self.ranges):
            raise TileError(f"T.{_public(self.kind)} has {len(self.ranges)} dimension(s) but "
                            f"the loop binds {len(names)} name(s)", self.span)
        self.vars = tuple(Var(n, dt.int32, self.span) for n in names)
        values = list(self.vars)
        if self.step is not None:
            start = self.ranges[0][0]
            values[0] = start + self.vars[0] * self.step
        return values[0] if len(values) == 1 else tuple(values)

    def build(self, body):
        for var, (start, extent) in reversed(list(zip(self.vars, self.ranges))):
            if self.step is not None:
                body = For(var, convert(0), simplify(
                    (extent + (self.step - 1)) // self.step), self.kind, body,
                    self.annotations, self.span)
            else:
                body = For(var, start, extent, self.kind, body, self.annotations, self.span)
        if self.annotations.get(PREFER_ASYNC) and not self.annotations.get(ASYNC_WITHOUT_WAIT):
            # the copies the nest issues are complete when the statement after it runs
            body = seq([body] + [Evaluate(Call(name, args, dt.handle, self.span), self.span)
                                 for name, args in ((PTX_COMMIT_CALL, ()),
                                                    (PTX_WAIT_CALL, (const(0),)))], self.span)
        return body


class AttrFrame:
    """`with T.attr(reducer, "reduce_scope", ...):` (or the call as a statement, for what
    follows it in its block): the reducer of the T.tvm_thread_allreduce inside."""

    def __init__(self, builder, reducer, span):
        self.builder, self.span = builder, span
        self.outer = builder.reduce_scope
        builder.reduce_scope = reducer

    def close(self):
        self.builder.reduce_scope = self.outer


class WarpGroupFrame:
    """`with T.ws(g):` (or several warpgroups): the body runs on those warpgroups' threads
    only (language/warp_specialize.py; the parser emits the region as an `if` on this
    condition, which the interpreter takes as true and manual_warpgroups lowers)."""

    def __init__(self, groups, span):
        self.groups, self.span = groups, span

    def condition(self):
        return Call(WS_REGION, tuple(const(g) for g in self.groups), dt.boolean, self.span)


class IndexLoop(LoopFrame):
    """`for i in T.thread_binding(0, n, thread="threadIdx.x")`, TVMScript's loop over a thread
    (or block) index: inside a T.Kernel every thread already runs the body once with its own
    index, so `i` is that index and the body stands in place, with no loop around it."""

    def __init__(self, index: Var, span):
        super().__init__("thread_binding", [], None, span)
        self.index = index

    def bind(self, names: list[str]):
        if len(names) != 1:
            raise TileError(f"a loop over the thread index {self.index.name} binds one name, "
                            f"not {len(names)}", self.span)
        return self.index

    def build(self, body):
        return body


class PersistentLoop(LoopFrame):
    """`for bx, by in T.Persistent([m, n], wave, index, group_size)`: a block of a grid of
    `wave` blocks visits tiles index, index + wave, index + 2 * wave, ... of the domain, in
    one serial loop over the waves with each iteration's coordinates computed from its tile
    number, and a tile past the domain skipped. A 2-D domain is walked in groups of
    group_size columns (down all m rows, then the next group: neighbouring blocks share
    operand tiles in L2); other domains in row-major order."""

    def __init__(self, domain, wave, index, group_size, span):
        self.domain = [simplify(_index_value(d, "T.Persistent domain", span)) for d in domain]
        self.wave = simplify(_index_value(wave, "T.Persistent wave size", span))
        self.index = simplify(_index_value(index, "T.Persistent index", span))
        self.group = group_size if len(self.domain) == 2 else 1
        total = self.domain[0] if self.group == 1 else self.domain[0] * (
            (self.domain[1] + (self.group - 1)) // self.group * self.group)
        for d in self.domain[1:] if self.group == 1 else ():
            total = total * d
        self.total = simplify(total)
        super().__init__("serial", [(0, (self.total + (self.wave - 1)) // self.wave)], None,
                         span)

    def bind(self, names: list[str]):
        if len(names) != len(self.domain):
            raise TileError(f"T.Persistent walks a {len(self.domain)}-D domain but the loop "
                            f"binds {len(names)} name(s)", self.span)
        wave = Var(f"{names[0]}_wave", dt.int32, self.span)
        self.vars = (wave,)
        tile = simplify(wave * self.wave + self.index)
        if self.group > 1:
            m, g = self.domain[0], self.group
            coords = [(tile // g) % m, tile % g + (tile // g) // m * g]
            self.inside = coords[1] < self.domain[1]
        else:
            coords, rest = [], tile
            for d in reversed(self.domain):
                coords.insert(0, rest % d)
                rest = rest // d
            self.inside = tile < self.total
        coords = [simplify(c) for c in coords]
        return coords[0] if len(coords) == 1 else tuple(coords)

    def build(self, body):
        from ..ir.stmt import IfThenElse
        return super().build(IfThenElse(self.inside, body, None, self.span))


def _public(kind: str) -> str:
    return {"parallel": "Parallel", "pipelined": "Pipelined"}.get(kind, kind)


# ---- loops the language and the frontend (range) both open ----------------------------

def loop_range(what, start, stop):
    for bound in (start, stop):
        not_a_loop(what, bound)
    if stop is None:
        start, stop = 0, start
    return (start, stop)


def not_a_loop(what: str, value):
    """A loop given a range or another loop where it takes a number (T.Pipelined(range(4)))."""
    if isinstance(value, (range, LoopFrame)):
        raise TileError(f"{what} takes the loop's extent, as in {what}(4) or {what}(start, stop), "
                        f"not a range: write `for k in {what}(n)`", current_span())


def simple_loop(kind: str, start, stop, step, annotations=None):
    bld.active(f"T.{kind}")
    if step is not None:
        if not isinstance(step, int) or step <= 0:
            raise TileError(f"T.{kind} step must be a positive compile-time int, got {step!r}",
                            current_span())
        if step == 1:
            step = None
    return LoopFrame(kind, [loop_range(f"T.{kind}", start, stop)], annotations, current_span(),
                     step=step)


def serial_loop(start, stop=None, step=None):
    """T.serial, which is also what `range(...)` means inside a kernel."""
    return simple_loop("serial", start, stop, step)
