"""T.cumsum on threads: stage through shared memory, scan its lines, read the result back.

A prefix sum along a dimension of a tile spread over registers has no purely local form, so the
tile is written to a shared scratch tile, its lines are scanned there, and the result is read
back into the destination's layout. Shared sources and destinations are scanned in place of
the scratch. With at least as many lines as threads each thread scans whole lines serially
(lines dealt round-robin). With fewer (the cumulative decay of one chunk is a single line of
64), a serial scan would leave all threads but a few idle through n dependent steps, so each
line gets a group of P lanes of a warp (P a power of two up to 32): each lane scans a segment
of n / P consecutive elements in registers, the lanes' segment totals are scanned across the
group with log2(P) shuffles, and each lane adds the total of the segments before its own.
"""
from __future__ import annotations

from ....errors import TileError
from ....ir.buffer import FRAGMENT, LOCAL, SHARED, Buffer, BufferRegion, is_shared
from ....ir.expr import BufferLoad, Call, const, logical, select
from ....ir.stmt import Allocate, BufferStore, For, IfThenElse, seq
from ....ir.tileop import Copy
from ....ir.annotations import sync_stmt
from .... import layout as lay
from ..intrinsics import SHFL_XOR


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


def _lanes_per_line(lines: int, n: int, threads: int) -> int:
    """P: lanes of a warp scanning one line together (1: a thread scans whole lines)."""
    if threads % 32:
        return 1
    p = 1
    while p < 32 and lines * p * 2 <= threads and p * 2 <= n:
        p *= 2
    return p


def _scan(region: BufferRegion, dim: int, reverse: bool, ctx, span):
    """dim may count from the end (a pipelined tile's versions add a leading index)."""
    shape = list(region.static_extents())
    dim %= len(shape)
    n = shape[dim]
    others = [d for d in range(len(shape)) if d != dim]
    lines = 1
    for d in others:
        lines *= shape[d]
    T = ctx.num_threads
    P = _lanes_per_line(lines, n, T)
    if P > 1:
        return _scan_in_groups(region, dim, reverse, ctx, span, shape, others, lines, P)
    rounds = -(-lines // T)
    r = ctx.fresh("r", rounds)
    line = r * T + ctx.tx
    coords = _line_coords(line, shape, others)
    k = ctx.fresh("k", n)
    pos = (n - 1 - k) if reverse else k
    prev = (n - k) if reverse else (k - 1)
    here = list(coords)
    here[dim] = pos
    before = list(coords)
    before[dim] = prev

    def element(idx):
        return _offset(region, idx, ctx)

    flat = ctx.flat(region.buffer)
    load_here = BufferLoad(flat, (element(here),))
    load_prev = BufferLoad(flat, (element(before),))
    step = IfThenElse(k > 0, BufferStore(flat, (element(here),), load_here + load_prev), None, span)
    body = For(k, const(0), const(n), "serial", step, {}, span)
    if lines % T:
        body = IfThenElse(ctx.simplify(line) < lines, body, None, span)
    return For(r, const(0), const(rounds), "serial", body, {}, span)


def _line_coords(line, shape, others):
    """The coordinates of line number `line` in the dimensions other than the scanned one
    (None in the scanned one)."""
    coords = [None] * len(shape)
    rest = line
    for d in reversed(others):
        coords[d] = rest % shape[d]
        rest = rest // shape[d]
    return coords


def _offset(region, idx, ctx):
    """The shared-memory offset of element idx of the region."""
    full = [s + i for s, i in zip(region.starts, idx)]
    return ctx.shared_offset(region.buffer, [ctx.simplify(x) for x in full])


def _scan_in_groups(region, dim, reverse, ctx, span, shape, others, lines, P):
    """Lines scanned by groups of P lanes (module docstring). Every lane runs the shuffles,
    also those of groups past the last line (with zeros): a shuffle needs its whole warp."""
    n = shape[dim]
    T = ctx.num_threads
    groups = T // P
    seg = -(-n // P)
    acc_t = region.buffer.dtype
    r = ctx.fresh("r", -(-lines // groups))
    lane = ctx.tx % P
    line = ctx.simplify(r * groups + ctx.tx // P)
    coords = _line_coords(line, shape, others)
    flat = ctx.flat(region.buffer)

    def element(e):
        idx = lane * seg + e
        here = list(coords)
        here[dim] = (n - 1 - idx) if reverse else idx
        offset = _offset(region, here, ctx)
        inside = ctx.simplify(idx) < n
        if lines % groups:
            inside = logical("and", ctx.simplify(line) < lines, inside)
        return offset, ctx.simplify(inside)

    run = Buffer("scan_run", (seg,), acc_t, LOCAL)
    # [0]: the scan up to this lane's segment, [1]: the sum of the lane's block, [2]: the
    # other block's sum (shuffled by every lane, before any choice: a shuffle inside a
    # conditional would leave lanes out of it)
    total = Buffer("scan_total", (3,), acc_t, LOCAL)
    zero = const(0, acc_t)
    body = [Allocate(run), Allocate(total)]
    for e in range(seg):
        offset, inside = element(e)
        value = select(inside, BufferLoad(flat, (offset,)), zero)
        if e:
            value = BufferLoad(run, (const(e - 1),)) + value
        body.append(BufferStore(run, (const(e),), value, span))
    mine = BufferLoad(run, (const(seg - 1),))
    body += [BufferStore(total, (const(0),), mine, span),
             BufferStore(total, (const(1),), mine, span)]
    m = 1
    while m < P:
        body.append(BufferStore(total, (const(2),), Call(
            SHFL_XOR.name, (BufferLoad(total, (const(1),)), const(m)), acc_t), span))
        other = BufferLoad(total, (const(2),))
        before = ctx.simplify((lane & m) != 0)   # the other block lies before this lane's
        body += [BufferStore(total, (const(0),), BufferLoad(total, (const(0),)) +
                             select(before, other, zero), span),
                 BufferStore(total, (const(1),), BufferLoad(total, (const(1),)) + other, span)]
        m *= 2
    # the segments before this lane's: the inclusive scan of the totals minus its own
    earlier = BufferLoad(total, (const(0),)) - mine
    for e in range(seg):
        offset, inside = element(e)
        body.append(IfThenElse(inside, BufferStore(
            flat, (offset,), BufferLoad(run, (const(e),)) + earlier, span), None, span))
    return For(r, const(0), const(-(-lines // groups)), "serial", seq(body, span), {}, span)
