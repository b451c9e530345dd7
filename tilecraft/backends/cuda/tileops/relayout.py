"""A T.Parallel loop that reads a fragment laid out for other threads reads it through shared
memory.

A loop's layout follows one of its fragments; another fragment it reads may have been laid out
by a different op, which gave the elements a thread needs to other threads. Attention written
with GemmWarpPolicy.Square on the mma.sync path is the common case: the score tile S is the
accumulator of a gemm whose warps split its columns, while P = exp(S - m), the next gemm's A
operand in registers, needs whole rows in each warp. Each thread then stores the elements of S
it holds into a shared copy of the tile (the first replica of each, row-major), a barrier
publishes them, the loop reads S from there, and a second barrier after the loop frees the
bytes. That costs a round trip through shared memory, so the compiler says where it happens and
which op chose the fragment's layout. A write into an element another thread holds has no such
remedy and stays an error.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ....errors import TileError, warn_at
from ....ir.buffer import SHARED, Buffer
from ....ir.expr import BufferLoad, const, logical
from ....ir.stmt import Allocate, BufferStore, For, IfThenElse, seq
from ....ir.visitor import Mutator
from ....layout.layout import LayoutError, linear_layout
from ....ir.annotations import sync_stmt
from .lowering import coverage_guard


ROWS_ADVICE = ("Where one gemm's accumulator becomes another's A operand in registers, "
               "policy=T.GemmWarpPolicy.FullRow on both gemms keeps each row in one warp.")


def where_chosen(ctx, buffer: Buffer) -> str:
    """`T.gemm at file.py:12`: the op that chose a fragment's layout, for messages."""
    node = getattr(ctx.layouts, "origin", {}).get(id(buffer))
    if node is None:
        return "an earlier op"
    name = "a T.Parallel loop" if isinstance(node, For) else \
        f"T.{getattr(node, 'op_name', type(node).__name__)}"
    span = getattr(node, "span", None)
    return f"{name} at {span.filename.rsplit('/', 1)[-1]}:{span.line}" if span else name


class Relayout:
    """The fragments one T.Parallel loop reads through shared memory."""

    def __init__(self, ctx, loop):
        self.ctx, self.loop = ctx, loop
        self.copies: dict = {}   # id(fragment) -> its shared copy (a 2-d tile, row-major)
        self.stores: list = []

    def read_through_shared(self, buffer: Buffer, span, element, thread: int) -> Buffer:
        """The shared copy of `buffer` (made on first use), whose element `element` thread
        `thread` reads though another thread holds it."""
        copy = self.copies.get(id(buffer))
        if copy is not None:
            return copy
        ctx = self.ctx
        layout = ctx.layouts.buffer(buffer)
        copy = Buffer(f"{buffer.name}_relaid", buffer.shape, buffer.dtype, SHARED, buffer.span)
        ctx.layouts.buffers[id(copy)] = linear_layout(buffer.static_shape())
        flat = ctx.flat(copy)
        ctx.private_scratch.add(id(flat))
        n = layout.locals_per_thread
        k = ctx.fresh("k", n)
        try:
            index = [ctx.simplify(x) for x in layout.logical_of(ctx.tx, k)]
            first = ctx.simplify(layout.rep_of(ctx.tx, k)) if layout.replicate > 1 else None
        except LayoutError:
            raise TileError(
                f"T.Parallel: element {element} of fragment {buffer.name} is read by thread "
                f"{thread}, but the layout {where_chosen(ctx, buffer)} chose for "
                f"{buffer.name} keeps it in another thread, and has no inverse to copy it "
                f"through shared memory with. {ROWS_ADVICE}", span) from None
        # Only the slots that hold an element store it (a small tile's layout may have more).
        cond = coverage_guard(index, layout.shape, ctx)
        if first is not None:
            cond = first == 0 if cond is None else logical("and", cond, first == 0)
        if layout.num_threads < ctx.num_threads:
            inside = ctx.tx < layout.num_threads
            cond = inside if cond is None else logical("and", inside, cond)
        store = BufferStore(flat, (ctx.shared_offset(copy, index),),
                            BufferLoad(ctx.register_array(buffer), (k,)), span)
        body = store if cond is None else IfThenElse(cond, store, None, span)
        self.stores += [Allocate(flat, span), For(k, const(0), const(n), "unroll", body, {},
                                                  span)]
        self.copies[id(buffer)] = copy
        warn_at(span, f"tilecraft: this T.Parallel loop reads fragment {buffer.name} through "
                f"shared memory: the layout {where_chosen(ctx, buffer)} chose for it keeps "
                f"elements the loop needs in other threads. {ROWS_ADVICE}")
        return copy

    def redirect(self, body):
        """body with the reads of the relaid fragments taken from their shared copies."""
        copies = self.copies

        class Redirect(Mutator):
            def visit_BufferLoad(self, e):
                e = dataclasses.replace(e, indices=tuple(self.visit(i) for i in e.indices))
                copy = copies.get(id(e.buffer))
                return e if copy is None else BufferLoad(copy, e.indices, e.span)
        return Redirect().visit(body) if copies else body

    def around(self, lowered):
        """The lowered loop between the stores into the shared copies and the barriers."""
        if not self.copies:
            return lowered
        span = self.loop.span
        return seq(self.stores + [sync_stmt(span), lowered,
                                  sync_stmt(span)], span)


def misowned(active: np.ndarray, owned: np.ndarray):
    """The first (thread, local) slot of the loop that runs an iteration whose element it
    does not hold, or None."""
    bad = active & ~owned
    return tuple(np.argwhere(bad)[0]) if np.any(bad) else None

