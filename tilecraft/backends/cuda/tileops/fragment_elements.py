"""Single fragment elements read or written outside T.Parallel.

A statement outside T.Parallel (`f[6, 29] = 2.0`, `P[0] = f[1, 3]`, `if f[0, 0] > 0:`) runs on
every thread of the block, but each element of a fragment lives in the registers of the threads
its layout gives: one thread, a few replicas, or all of them. So

- a write `f[idx] = v` happens in the threads that hold f[idx] (every replica), and nowhere else;
- a read of an element that some executing thread does not hold is broadcast: the element's
  first holder stores it into a shared slot, and after a barrier every thread loads the slot
  into a register of its own; a second barrier frees the slot for the next statement (or the
  next iteration) before anyone could overwrite it. The statement itself then reads that
  register.

A read needs no broadcast when every executing thread holds the element: a fragment every thread
holds whole (a T.reduce_* result of a row, say), or the element being updated in place by its
holders (`f[i, j] = f[i, j] * 2`).
"""
from __future__ import annotations

import numpy as np

from ....ir.linear import constant_value
from ....errors import TileError
from ....ir.buffer import FRAGMENT, LOCAL, SHARED, Buffer
from ....ir.expr import BufferLoad, Expr, const, logical
from ....ir.printer import expr_text
from ....ir.stmt import Allocate, BufferStore, IfThenElse
from ....ir.visitor import Mutator
from ....ir.annotations import sync_stmt


def _constant_indices(ctx, indices) -> tuple | None:
    values = [constant_value(ctx.simplify(i)) for i in indices]
    return None if any(v is None for v in values) else tuple(int(v) for v in values)


def _check_indices(buffer: Buffer, values: tuple, span):
    for d, (v, n) in enumerate(zip(values, buffer.shape)):
        if not 0 <= v < n:
            raise TileError(f"index {v} is outside dimension {d} of fragment {buffer.name} "
                            f"(extent {n})", span)


def threads_condition(tx, threads: frozenset, num_threads: int) -> Expr | None:
    """A condition true exactly for the threads in `threads` among 0..num_threads-1 (None: all).
    Replicas usually agree on some bits of the thread index (a row's quad of lanes, one lane
    of each warp), which one mask test says; otherwise each run of consecutive threads is a
    range test."""
    everyone = range(num_threads)
    if threads >= frozenset(everyone):
        return None
    first = min(threads)
    full = (1 << max(num_threads - 1, 1).bit_length()) - 1
    mask = full
    for t in threads:
        mask &= ~(t ^ first)
    if frozenset(t for t in everyone if t & mask == first & mask) == threads:
        return tx == first if mask == full else (tx & mask) == (first & mask)
    cond = None
    ordered = sorted(threads)
    start = prev = ordered[0]
    for t in ordered[1:] + [None]:
        if t is not None and t == prev + 1:
            prev = t
            continue
        part = (tx == start) if start == prev else logical("and", tx >= start, tx <= prev)
        cond = part if cond is None else logical("or", cond, part)
        if t is not None:
            start = prev = t
    return cond


def holders(layout, values: tuple, buffer: Buffer, span) -> tuple[frozenset, int]:
    """(threads that hold element `values` of a fragment layout, its local index)."""
    points = layout.table()[values].reshape(-1, 2)
    if np.any(points[:, 1] != points[0, 1]):
        raise TileError(f"fragment {buffer.name} is accessed element-wise outside T.Parallel, "
                        "and its layout keeps the replicas of an element in different "
                        "registers: access it in a T.Parallel loop", span)
    return frozenset(int(t) for t in points[:, 0]), int(points[0, 1])


class _Element:
    """One fragment element a statement reads or writes."""

    def __init__(self, ctx, load):
        self.buffer, self.indices, self.span = load.buffer, load.indices, load.span
        self.layout = ctx.layouts.buffer(load.buffer)
        self.values = _constant_indices(ctx, load.indices)
        if self.values is not None:
            _check_indices(self.buffer, self.values, load.span)
            self.threads, self.local = holders(self.layout, self.values, self.buffer,
                                                 load.span)
        else:
            self.threads, self.local = None, None

    def held_by_all(self, ctx) -> bool:
        if self.threads is not None:
            return self.threads >= frozenset(range(ctx.num_threads))
        return self.layout.replicate >= ctx.num_threads and self.layout.is_fully_replicated()

    def key(self) -> tuple:
        return id(self.buffer), tuple(expr_text(i) for i in self.indices)

    def local_index(self, ctx) -> Expr:
        if self.local is not None:
            return const(self.local)
        return ctx.simplify(self.layout.local_of(list(self.indices)))

    def first_holder(self, ctx) -> Expr:
        if self.threads is not None:
            return const(min(self.threads))
        return ctx.simplify(self.layout.thread_of(list(self.indices), 0))

    def holder_condition(self, ctx) -> Expr | None:
        """Whether thread ctx.tx holds this element."""
        if self.threads is not None:
            return threads_condition(ctx.tx, self.threads, ctx.num_threads)
        if self.held_by_all(ctx):
            return None
        table = self.layout.table()
        if np.any(table[..., 1] != table[..., :1, 1]):
            raise TileError(f"fragment {self.buffer.name} is accessed element-wise outside "
                            "T.Parallel, and its layout keeps the replicas of an element in "
                            "different registers: access it in a T.Parallel loop", self.span)
        cond = None
        for r in range(self.layout.replicate):
            part = ctx.tx == ctx.simplify(self.layout.thread_of(list(self.indices), r))
            cond = part if cond is None else logical("or", cond, part)
        return cond


class _Collector(Mutator):
    """Replaces each fragment read that needs a broadcast by a load of its register copy."""

    def __init__(self, ctx, writer: _Element | None, lowering):
        self.ctx, self.writer, self.lowering = ctx, writer, lowering
        self.broadcasts: list = []   # (_Element, register copy)
        self.copies: dict = {}

    def visit_BufferLoad(self, e: BufferLoad):
        e = BufferLoad(e.buffer, tuple(self.visit(i) for i in e.indices), e.span)
        if e.buffer.scope != FRAGMENT:
            return e
        element = _Element(self.ctx, e)
        if self.local_to_writers(element):
            return e
        self.lowering.refuse_warpgroup_fragment(e.buffer, e.span)
        copy = self.copies.get(element.key())
        if copy is None:
            copy = Buffer(f"{e.buffer.name}_elem", (1,), e.buffer.dtype, LOCAL, e.span)
            self.copies[element.key()] = copy
            self.broadcasts.append((element, copy))
        return BufferLoad(copy, (const(0),), e.span)

    def local_to_writers(self, element: _Element) -> bool:
        """Whether every thread that runs the statement holds `element` itself."""
        if element.held_by_all(self.ctx):
            return True
        w = self.writer
        if w is None:
            return False
        if w.threads is not None and element.threads is not None:
            return w.threads <= element.threads
        return element.key() == w.key()


def broadcast_reads(ctx, node, writer: _Element | None = None, lowering=None):
    """(statements that broadcast the fragment elements `node` reads which some thread running
    it does not hold, node reading their register copies instead)."""
    collector = _Collector(ctx, writer, lowering)
    node = collector.visit(node)
    if not collector.broadcasts:
        return [], node
    span = getattr(node, "span", None)
    out, owner_writes, reads = [], [], []
    for n, (element, copy) in enumerate(collector.broadcasts):
        slot = Buffer(f"{element.buffer.name}_bcast", (1,), element.buffer.dtype, SHARED,
                      element.span)
        ctx.private_scratch.add(id(slot))   # bytes of its own: several may be live at once
        out += [Allocate(slot, element.span), Allocate(copy, element.span)]
        value = BufferLoad(ctx.register_array(element.buffer), (element.local_index(ctx),))
        owner_writes.append(IfThenElse(ctx.tx == element.first_holder(ctx),
                                       BufferStore(slot, (const(0),), value, element.span),
                                       None, element.span))
        reads.append(BufferStore(copy, (const(0),), BufferLoad(slot, (const(0),)),
                                 element.span))
    out += owner_writes + [sync_stmt(span)] + reads + \
        [sync_stmt(span)]
    return out, node


def element_writer(ctx, store: BufferStore, lowering) -> _Element | None:
    """The fragment element a scalar store writes (None for other buffers)."""
    if store.buffer.scope != FRAGMENT:
        return None
    lowering.refuse_warpgroup_fragment(store.buffer, store.span)
    return _Element(ctx, BufferLoad(store.buffer, store.indices, store.span))


def guard_for_holders(ctx, writer: _Element, lowered):
    """The lowered store of `writer`'s element, run only by the threads that hold it."""
    cond = writer.holder_condition(ctx)
    return lowered if cond is None else IfThenElse(cond, lowered, None, writer.span)
