"""widen_tma_rows: a shared tile whose rows are narrower than 16 bytes is loaded by TMA in rows of
16 bytes (sm_90a).

TMA moves boxes whose innermost dimension is a multiple of 16 bytes, so a pipelined loop that
copies a tile with rows of 4 or 8 bytes (the per-group scales of a W4A16 GEMM at block_K = 128:
four float16 scales a row) cannot be fed by TMA, and the whole loop loses warp specialization
for that one small tile. Such a tile is given rows of 16 bytes instead (its allocation widened,
and its copy reads the 16-byte-aligned rows of the tensor that hold the old ones: a box
starts on a 16-byte boundary of the tensor's rows (the GPU stops a load that does not with an
illegal-instruction error), so the old tile's columns start at a shift of (start % width) in
the wide one, and every access to the tile moves by that shift. The other columns are its
neighbours' (or past the tensor's edge, which TMA fills with zeros), loaded and never read. The
tile then costs 16 / width times its bytes in shared memory, which for such narrow tiles is
little.

A copy qualifies when it is a T.copy from a global tensor into a whole two-dimensional shared
tile inside a T.Pipelined loop of two stages or more, the tile's row is 2, 4 or 8 bytes, its
copies start at multiples of its width (so that it lies whole in one aligned row of 16
bytes), it is written by nothing else and used only in the loop (the shift is a function of
the loop's counter), and the widened copy is one TMA can do (tileops/tma.py: the
tensor's rows a multiple of 16 bytes apart, and so on). Not with tl.disable_tma_lower or
tl.disable_warp_specialized, where no TMA load would use it.
"""
from __future__ import annotations

import dataclasses

from ....ir.buffer import GLOBAL, Buffer, BufferRegion, is_shared
from ....ir.expr import BufferLoad, const
from ....arith.bounds import simplify
from ....ir.linear import linear_form
from ....ir.stmt import Allocate, BufferStore, For
from ....ir.tileop import Copy, TileOp
from ....ir.visitor import Mutator, map_kernels, named_outside, walk
from ....ir.annotations import NUM_STAGES
from ....pass_config import PassConfigKey
from ....target import arch_of
from ..tileops.tma import tma_plan

TMA_ROW_BYTES = 16


def _writers(body, tile: Buffer) -> int:
    """How many statements write tile."""
    count = 0
    for n in walk(body):
        if isinstance(n, BufferStore) and n.buffer is tile:
            count += 1
        elif isinstance(n, TileOp) and any(b is tile for b in n.writes()):
            count += 1
    return count


def _multiple_of(e, n: int) -> bool:
    """Whether integer expression e is a multiple of n whatever its variables are."""
    terms, constant = linear_form(e)
    return constant % n == 0 and all(coeff % n == 0 for _, coeff in terms.values())


@dataclasses.dataclass
class _Widening:
    copy: Copy        # the copy into the widened tile
    tile: Buffer      # the widened tile
    shift: object     # the column of the widened tile where the old tile's column 0 is


def _widened(copy: Copy, loop: For, body) -> _Widening | None:
    """How the copy reads rows of 16 bytes into a widened tile, or None."""
    src, dst = copy.src, copy.dst
    tile = dst.buffer
    shape = tile.static_shape()
    if src.buffer.scope != GLOBAL or not is_shared(tile.scope) or shape is None or \
            len(shape) != 2 or not dst.covers_whole() or tile.dtype is not src.buffer.dtype:
        return None
    row = shape[-1] * tile.dtype.bytes
    if row >= TMA_ROW_BYTES or TMA_ROW_BYTES % row or _writers(body, tile) != 1:
        return None
    # Every use in the loop, where the shift (a function of its counter) is defined.
    if named_outside(body, tile, loop.body):
        return None
    cols = TMA_ROW_BYTES // tile.dtype.bytes
    start = simplify(src.ranges[-1][0])    # (k * 128) // 32 is k * 4
    # A box starts on a 16-byte boundary of the tensor's rows (the GPU refuses others): the
    # widened row is the aligned one that holds the old, which lies whole inside it when the
    # old rows start at multiples of their width.
    if not _multiple_of(start, shape[-1]):
        return None
    shift = simplify(start % cols)
    wide = Buffer(tile.name, (shape[0], cols), tile.dtype, tile.scope, tile.span)
    widened = dataclasses.replace(
        copy, src=BufferRegion(src.buffer, src.ranges[:-1] + ((start - shift, const(cols)),),
                               src.span),
        dst=BufferRegion(wide, ((const(0), const(shape[0])), (const(0), const(cols))),
                         dst.span))
    return _Widening(widened, wide, shift) if tma_plan(widened) is not None else None


class _Widen(Mutator):
    """Swaps each widened tile in, its column indices moved by the shift."""

    def __init__(self, found: dict):
        self.copies = {id(c): w.copy for c, w in found.values()}
        self.tiles = {id(c.dst.buffer): w for c, w in found.values()}

    def visit_Copy(self, c: Copy):
        found = self.copies.get(id(c))
        return found if found is not None else self.generic_visit(c)

    def visit_Allocate(self, a: Allocate):
        w = self.tiles.get(id(a.buffer))
        return a if w is None else Allocate(w.tile, a.span)

    def visit_BufferLoad(self, e: BufferLoad):
        indices = tuple(self.visit(i) for i in e.indices)
        w = self.tiles.get(id(e.buffer))
        if w is None:
            return dataclasses.replace(e, indices=indices)
        return dataclasses.replace(e, buffer=w.tile,
                                   indices=indices[:-1] + (indices[-1] + w.shift,))

    def visit_BufferRegion(self, r: BufferRegion):
        ranges = tuple((self.visit(a), self.visit(b)) for a, b in r.ranges)
        w = self.tiles.get(id(r.buffer))
        if w is None:
            return dataclasses.replace(r, ranges=ranges)
        (start, extent) = ranges[-1]
        return dataclasses.replace(r, buffer=w.tile,
                                   ranges=ranges[:-1] + ((start + w.shift, extent),))


def _kernel(k):
    copies = {}
    for loop in walk(k.body):
        if isinstance(loop, For) and loop.kind == "pipelined" and \
                loop.annotations.get(NUM_STAGES, 0) >= 2:
            for c in walk(loop.body):
                if isinstance(c, Copy) and id(c) not in copies:
                    wide = _widened(c, loop, k.body)
                    if wide is not None:
                        copies[id(c)] = (c, wide)
    if not copies:
        return k
    return dataclasses.replace(k, body=_Widen(copies).visit(k.body))


def widen_tma_rows(func, target=None, configs: dict | None = None):
    configs = configs or {}
    if arch_of(target) != "sm_90a" or configs.get(PassConfigKey.TL_DISABLE_WARP_SPECIALIZED) or \
            configs.get(PassConfigKey.TL_DISABLE_TMA_LOWER):
        return func
    return map_kernels(func, _kernel)
