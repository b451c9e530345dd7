"""split_loop_tiles: a shared tile that several T.Pipelined loops fill gets a tile per loop.

A kernel may run two pipelined loops one after the other over the same staging tiles (sparse
attention: the key tiles a slash crosses, then the gathered vertical columns, both through
K_shared and V_shared). Software pipelining gives a tile one version per stage, indexed by its
own loop's counter, and the versions of one loop mean nothing to the other; so each loop must
stage through a tile of its own. Where a tile is used only inside pipelined loops and every
loop after the first starts each iteration by overwriting all of it (nothing a loop reads comes
from before it), the loops after the first are given fresh tiles of the same shape and dtype.
plan_shared_memory then lets the tiles share bytes, since their live ranges do not meet; the
layouts T.annotate_layout pins for the tile are pinned for its copies too.

Anything else (a tile read after its loop, or a loop that reads what the previous one left)
is left as written, and pipeline_loops says which use cannot be versioned.
"""
from __future__ import annotations

import dataclasses

from ..ir.buffer import Buffer, BufferRegion, is_shared
from ..ir.expr import BufferLoad
from ..ir.linear import constant_value, equal
from ..ir.stmt import Allocate, BufferStore, For, flat_stmts, seq, stmts_of
from ..ir.tileop import AnnotateLayout, Copy
from ..ir.visitor import Mutator, RenameBuffers, buffers_used, map_kernels, walk


def _buffers_of(node) -> set:
    return {id(b) for b in buffers_used(node)}


def _pipelined_loops(body) -> list:
    return [n for n in walk(body) if isinstance(n, For) and n.kind == "pipelined"]


def _nest(s) -> tuple[list, object]:
    """The loops of a T.Parallel nest, outermost first, and its innermost body."""
    loops = []
    while isinstance(s, For) and s.kind == "parallel":
        loops.append(s)
        s = s.body
    return loops, s


def _overwrites(s, buffer: Buffer) -> bool:
    """Whether statement s writes every element of buffer and reads none of it."""
    if isinstance(s, Copy):
        return s.dst.buffer is buffer and s.dst.covers_whole() and \
            id(buffer) not in _buffers_of(s.src)
    loops, inner = _nest(s)
    if not loops or len(loops) != len(buffer.shape):
        return False
    if not all(constant_value(f.start) == 0 and equal(f.extent, size)
               for f, size in zip(loops, buffer.shape)):
        return False
    stores = [n for n in walk(inner) if isinstance(n, BufferStore) and n.buffer is buffer]
    reads = [n for n in walk(s) if isinstance(n, (BufferLoad, BufferRegion)) and
             n.buffer is buffer]
    # Every store of an element at the nest's own coordinates, once per iteration point:
    # stores under a condition would leave elements unwritten.
    direct = {id(n) for n in flat_stmts(inner)}
    return bool(stores) and not reads and all(
        id(st) in direct and len(st.indices) == len(loops) and
        all(i is f.var for i, f in zip(st.indices, loops)) for st in stores)


def _starts_by_overwriting(loop: For, buffer: Buffer) -> bool:
    """The loop body's first statement that touches buffer overwrites all of it."""
    for s in stmts_of(loop.body):
        if id(buffer) in _buffers_of(s):
            return _overwrites(s, buffer)
    return False


class _Split(Mutator):
    def __init__(self, plans: dict):
        self.plans = plans  # id(loop) -> {id(tile): its copy for that loop}

    def visit_For(self, f: For):
        new = self.plans.get(id(f))
        if new is not None:
            return RenameBuffers(new).visit(f)
        return self.generic_visit(f)


def _copies(kernel) -> tuple[dict, list]:
    """{id(loop): {id(tile): copy}} for the loops that get tiles of their own, and the copies
    with the tiles they copy."""
    body = kernel.body
    loops = _pipelined_loops(body)
    if len(loops) < 2:
        return {}, []
    inside = set()
    for loop in loops:
        inside |= {id(n) for n in walk(loop)}
    outside_uses = {id(n.buffer) for n in walk(body) if id(n) not in inside and
                    isinstance(n, (BufferLoad, BufferStore, BufferRegion))}
    plans, made = {}, []
    for a in (n for n in walk(body) if isinstance(n, Allocate) and is_shared(n.buffer.scope)):
        tile = a.buffer
        fillers = [loop for loop in loops if id(tile) in _buffers_of(loop)]
        if len(fillers) < 2 or id(tile) in outside_uses or \
                not all(_starts_by_overwriting(loop, tile) for loop in fillers[1:]):
            continue
        for n, loop in enumerate(fillers[1:], start=2):
            copy = dataclasses.replace(tile, name=f"{tile.name}_{n}")
            plans.setdefault(id(loop), {})[id(tile)] = copy
            made.append((tile, copy))
    return plans, made


def _with_allocations(body, made: list):
    """Each copy allocated beside its tile; annotated layouts extended to the copies."""
    class Allocations(Mutator):
        def visit_SeqStmt(self, s):
            return seq([self.visit(x) for x in s.stmts], s.span)

        def visit_Allocate(self, a: Allocate):
            extra = [Allocate(c, a.span) for t, c in made if t is a.buffer]
            return seq([a] + extra, a.span) if extra else a

        def visit_AnnotateLayout(self, op: AnnotateLayout):
            layouts = dict(op.layouts)
            for t, c in made:
                if t in layouts:
                    layouts[c] = layouts[t]
            return dataclasses.replace(op, layouts=layouts)
    return Allocations().visit(body)


def split_loop_tiles(func):
    def split(kernel):
        plans, made = _copies(kernel)
        if not plans:
            return kernel
        body = _with_allocations(_Split(plans).visit(kernel.body), made)
        return dataclasses.replace(kernel, body=body)
    return map_kernels(func, split)
