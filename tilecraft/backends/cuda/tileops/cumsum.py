"""T.cumsum on threads: stage through shared memory, one thread scans each line.

A prefix sum along a dimension of a tile spread over registers has no purely local form, so the
tile is written to a shared scratch tile, each thread scans whole lines of it serially (lines
are dealt round-robin), and the result is read back into the destination's layout. Shared
sources and destinations are scanned in place of the scratch. Tiles here are small (the
lengths of a chunk), so the serial scan costs little next to the gemms around it.
"""
from __future__ import annotations

from ....errors import TileError
from ....ir.buffer import FRAGMENT, SHARED, Buffer, BufferRegion, is_shared
from ....ir.expr import BufferLoad, const
from ....ir.stmt import Allocate, BufferStore, For, IfThenElse, seq
from ....ir.tileop import Copy
from ....ir.annotations import sync_stmt
from .... import layout as lay


def lower_cumsum(op, ctx):
    from .copy import lower_copy
    src, dst = op.src, op.dst
    shape = src.static_extents()
    if shape is None or dst.static_extents() is None:
        raise TileError("T.cumsum: tile extents must be known at compile time for the CUDA "
                        "backend", op.span)
    for r in (src, dst):
        if not (r.buffer.scope == FRAGMENT or is_shared(r.buffer.scope)):
            raise TileError(f"T.cumsum: {r.buffer.name} must be a shared or fragment tile on the "
                            "CUDA backend", op.span)
    acc_t = dst.buffer.dtype
    out = []
    if is_shared(dst.buffer.scope):
        scratch = dst
        if src.buffer is not dst.buffer:
            out += [lower_copy(Copy(src, dst, {}, op.span), ctx), sync_stmt(op.span)]
    else:
        tmp = Buffer(f"{dst.buffer.name}_scan", tuple(shape), acc_t, SHARED, op.span)
        ctx.layouts.buffers[id(tmp)] = lay.linear_layout(tuple(shape))
        out.append(Allocate(ctx.flat(tmp), op.span))
        scratch = tmp.region()
        out += [lower_copy(Copy(src, scratch, {}, op.span), ctx), sync_stmt(op.span)]
    out.append(_scan(scratch, op.dim, op.reverse, ctx, op.span))
    out.append(sync_stmt(op.span))
    if scratch.buffer is not dst.buffer:
        out.append(lower_copy(Copy(scratch, dst, {}, op.span), ctx))
        out.append(sync_stmt(op.span))
    return seq(out)


def _scan(region: BufferRegion, dim: int, reverse: bool, ctx, span):
    shape = list(region.static_extents())
    n = shape[dim]
    others = [d for d in range(len(shape)) if d != dim]
    lines = 1
    for d in others:
        lines *= shape[d]
    T = ctx.num_threads
    rounds = -(-lines // T)
    r = ctx.fresh("r", rounds)
    line = r * T + ctx.tx
    coords = [None] * len(shape)
    rest = line
    for d in reversed(others):
        coords[d] = rest % shape[d]
        rest = rest // shape[d]
    k = ctx.fresh("k", n)
    pos = (n - 1 - k) if reverse else k
    prev = (n - k) if reverse else (k - 1)
    here = list(coords)
    here[dim] = pos
    before = list(coords)
    before[dim] = prev

    def element(idx):
        full = [s + i for s, i in zip(region.starts, idx)]
        return ctx.shared_offset(region.buffer, [ctx.simplify(x) for x in full])

    flat = ctx.flat(region.buffer)
    load_here = BufferLoad(flat, (element(here),))
    load_prev = BufferLoad(flat, (element(before),))
    step = IfThenElse(k > 0, BufferStore(flat, (element(here),), load_here + load_prev), None, span)
    body = For(k, const(0), const(n), "serial", step, {}, span)
    if lines % T:
        body = IfThenElse(ctx.simplify(line) < lines, body, None, span)
    return For(r, const(0), const(rounds), "serial", body, {}, span)

