"""T.copy and T.fill with a T.alloc_local / T.alloc_var side, run by every thread in full.

A local buffer is one copy per thread, so filling it or copying into it is each thread's own
work: every thread runs the whole element loop (unrolled) on its copy, as TileLang does. A copy
out of a local into shared or global memory runs so too where its values or its place differ
between threads (ir/thread_varying.py); one of a block-uniform local keeps the lowering of
copy.py, shared out over the threads. Accesses are rewritten like any scalar statement's
(shared offsets, bounds guards on global memory): see lower_tile_ops._KernelLowering.
"""
from __future__ import annotations

from ....ir.buffer import BufferRegion
from ....ir.expr import BufferLoad, Var, cast, const
from ....ir.stmt import BufferStore, For
from ....ir.tileop import Fill
from .copy import _tile_extents, region_index


def per_thread_loops(op):
    """The op as one thread's loop nest over the tile (tile-level statements)."""
    dst: BufferRegion = op.dst
    extents = _tile_extents(op.dst if isinstance(op, Fill) else op.src)
    coords = [Var(f"e{d}") for d in range(len(extents))]
    if isinstance(op, Fill):
        value = cast(op.value, dst.buffer.dtype)
    else:
        value = cast(BufferLoad(op.src.buffer, region_index(op.src, coords), op.span),
                     dst.buffer.dtype)
    body = BufferStore(dst.buffer, region_index(dst, coords), value, op.span)
    for v, n in reversed(list(zip(coords, extents))):
        body = For(v, const(0), const(n), "unroll", body, {}, op.span)
    return body
