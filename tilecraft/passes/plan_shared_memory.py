"""plan_shared_memory: place a kernel's shared tiles in one dynamic arena, reusing memory.

Runs on tile-level IR with layouts inferred (a tile's footprint is its layout's, padding
included). Each tile is live from its first to its last use in program order; a use inside a
loop keeps it live for the whole loop, since the next iteration comes back to it, unless each
iteration starts by overwriting the whole tile. Tiles whose live ranges do not meet may share
bytes (the paper's MLA kernel writes its output tile where the query tile was), except in a
kernel specialized by hand, whose warpgroups' regions run at once. Placement is
first fit in order of first use, at the alignment each layout needs (a 128-byte swizzle repeats
every 1024 bytes, the bulk-copy engine wants tiles there), and at least 128 bytes for a tile TMA
copies in or out. insert_barriers, which runs next, treats tiles that share bytes as one
resource, so the reuse is separated from the last reads of the previous tenant by a barrier.
"""
from __future__ import annotations

import dataclasses

from ..errors import TileError
from ..ir.buffer import is_shared
from ..ir.stmt import Allocate, For, IfThenElse, Kernel, SeqStmt, stmts_of
from ..ir.tileop import Copy, TileOp
from ..ir.visitor import map_kernels
from ..ir.annotations import (INSTRUCTION, LAYOUTS, MANUAL_WARPGROUPS, SMEM_BYTES,
                              SMEM_OFFSETS, TMA_BARRIER)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class _Liveness:
    """[first, last] statement positions of each shared buffer of one kernel."""

    def __init__(self):
        self.position = 0
        self.ranges: dict = {}
        self.buffers: dict = {}

    def touch(self, buffers, lo, hi):
        for b in buffers:
            self.buffers[id(b)] = b
            first, last = self.ranges.get(id(b), (lo, hi))
            self.ranges[id(b)] = (min(first, lo), max(last, hi))

    def visit(self, s):
        from .insert_barriers import shared_buffers_of
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.visit(x)
        elif isinstance(s, For) and s.kind != "parallel":
            start = self.position
            inner = _Liveness()
            inner.position = start
            inner.visit(s.body)
            end = inner.position
            self.position = end + 1
            fresh = _rewritten_each_iteration(s.body)
            for key, b in inner.buffers.items():
                if key in fresh:
                    self.touch([b], *inner.ranges[key])
                else:
                    self.touch([b], start, end)
        elif isinstance(s, IfThenElse) and not isinstance(s, TileOp):
            self.touch(shared_buffers_of(s.cond), self.position, self.position)
            self.position += 1
            self.visit(s.then_body)
            if s.else_body is not None:
                self.visit(s.else_body)
        elif isinstance(s, Allocate):
            pass
        else:
            self.touch(shared_buffers_of(s), self.position, self.position)
            self.position += 1


def _rewritten_each_iteration(body) -> set:
    """ids of the shared tiles a loop body overwrites whole (a copy into the entire tile, not
    under a condition) before anything else in the body touches them: no value of theirs
    crosses the back edge, so they are live only from that copy on (a persistent kernel's
    query tile, reloaded per tile, can share bytes with its output tile)."""
    from .insert_barriers import shared_buffers_of
    fresh, seen = set(), set()
    for s in stmts_of(body):
        if isinstance(s, Copy) and is_shared(s.dst.buffer.scope) and \
                id(s.dst.buffer) not in seen and s.src.buffer is not s.dst.buffer and \
                s.dst.buffer.static_shape() is not None and \
                s.dst.static_extents() == s.dst.buffer.static_shape():
            fresh.add(id(s.dst.buffer))
        seen.update(id(b) for b in shared_buffers_of(s))
    return fresh


def footprint(b, layouts=None) -> int:
    """Bytes of shared tile b: its layout's (padding included) when layouts has one, else its
    shape's."""
    layout = layouts.buffers.get(id(b)) if layouts is not None else None
    count = 1
    if layout is not None:
        for d in layout.output_shape:
            count *= d
    else:
        for d in b.shape:
            count *= d
    return count * b.dtype.bytes


def _plan_kernel(k: Kernel, limit, offsets: dict, rules, reuse: bool = True) -> int:
    layouts = k.attrs.get(LAYOUTS)
    live = _Liveness()
    live.visit(k.body)
    allocated = [n.buffer for n in _allocations(k.body) if is_shared(n.buffer.scope)]
    # Warpgroups of a kernel specialized by hand run their regions at once, in an order only
    # the program's mbarriers know; program order says nothing of when a tile is free, and a
    # barrier separating two tenants would stop warpgroups that wait for each other.
    if not reuse or k.attrs.get(MANUAL_WARPGROUPS):
        # every tile live throughout: none shares bytes with another
        for b in allocated:
            live.touch([b], 0, live.position)
    # An mbarrier's bytes may serve something else only after mbarrier.inval (PTX), which
    # nothing issues: the 64-bit shared words mbarriers live in (and any uint64 shared tile
    # with them) stay theirs for the whole kernel (in a cluster they also take arrivals from
    # the peer block's consumers after this block's loop has ended).
    for b in allocated:
        if b.dtype.name == "uint64":
            live.touch([b], 0, live.position)
    placed = []  # (start, end, first, last)
    top = 0
    bulk = _bulk_copied(k.body)
    for b in sorted(allocated, key=lambda b: live.ranges.get(id(b), (0, 0))[0]):
        first, last = live.ranges.get(id(b), (0, 0))
        size = footprint(b, layouts)
        layout = layouts.buffers.get(id(b)) if layouts is not None else None
        align = max(rules.bulk_copy_align if id(b) in bulk else 16,
                    getattr(layout, "alignment", 16))
        start = 0
        while True:  # first fit among the tiles live at the same time
            clash = [e for s, e, f, l in placed
                     if not (l < first or f > last) and start < e and start + size > s]
            if not clash:
                break
            start = _align(max(clash), align)
        placed.append((start, start + size, first, last))
        offsets[id(b)] = (start, size)
        top = max(top, start + size)
    if limit is not None and top > limit:
        raise TileError(f"kernel needs {top} bytes of shared memory; the target allows {limit} "
                        "per block (use smaller tiles or fewer stages)", k.span)
    return top


def arena_bytes(k: Kernel, rules) -> int:
    """The bytes kernel k's tiles take in the arena as planned from their shapes and live
    ranges, before layouts exist (no swizzle padding or alignment): what a pass that adds a
    tile checks against the limit before committing to it."""
    return _plan_kernel(k, None, {}, rules)


def _bulk_copied(body) -> set:
    """ids of the shared tiles TMA reads or writes (warp_specialize's loads, infer_instructions'
    stores and adds): the bulk-copy engine addresses shared memory at 128-byte boundaries."""
    from ..ir.visitor import walk
    out = set()
    for n in walk(body):
        notes = getattr(n, "annotations", None) or {}
        if isinstance(n, TileOp) and (notes.get(TMA_BARRIER) is not None or
                                      notes.get(INSTRUCTION) == "tma"):
            for region in (getattr(n, "dst", None), getattr(n, "src", None),
                           getattr(n, "value", None)):
                if region is not None and is_shared(region.buffer.scope):
                    out.add(id(region.buffer))
    return out


def _allocations(body):
    from ..ir.visitor import walk
    return [n for n in walk(body) if isinstance(n, Allocate)]


def plan_shared_memory(func, rules, limit: int | None = None, reuse: bool = True):
    """func with attrs["smem_offsets"] {id(buffer): (byte offset, bytes)} for every tile-level
    shared buffer and each kernel's attrs["smem_bytes"]. `rules` are the backend's instruction
    facts (passes/instruction_rules.py); `limit` the bytes one block may use; reuse=False
    (tl.disable_shared_memory_reuse) gives every tile bytes of its own."""
    offsets: dict = {}
    planned = map_kernels(func, lambda k: dataclasses.replace(
        k, attrs={**k.attrs, SMEM_BYTES: _plan_kernel(k, limit, offsets, rules, reuse)}))
    return dataclasses.replace(planned, attrs={**func.attrs, SMEM_OFFSETS: offsets})
