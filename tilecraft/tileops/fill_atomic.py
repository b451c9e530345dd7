"""T.fill and tile-form atomics on threads, over copy.py's element loops and chunks.

A fill or an atomic that touches a fragment runs laid out like the fragment; otherwise it is
partitioned over the threads. A tile-form atomic add of 16-bit floats from shared into global
memory goes in pairs on copy.py's chunk rules (one f16x2 / bf16x2 atomic per two elements).
"""
from __future__ import annotations

from .. import layout as lay
from ..ir import dtypes as dt
from ..ir.buffer import FRAGMENT, GLOBAL, BufferRegion, is_shared
from ..ir.expr import BufferLoad, Call, cast, const
from ..ir.stmt import BufferStore, Evaluate
from ..ir.tileop import Atomic
from .copy import (_address, _in_chunks, _lower_with_layout, _synthetic_loop, _tile_extents,
                   _vector_load, _vector_width, _where_inside, region_index)
from .lowering import ThreadContext


def _paired_add(op, s_idx, d_idx, ctx):
    pair = _vector_load(op.value.buffer, s_idx, 32, ctx)
    add = Evaluate(Call("tc::atomic_add_x2", (_address(op.dst.buffer, d_idx, ctx), pair),
                        dt.handle), op.span)
    return _where_inside(add, op.dst.buffer, d_idx, ctx, op.span)


def lower_fill(op, ctx: ThreadContext):
    dst = op.dst
    extents = _tile_extents(dst)
    loop = _synthetic_loop(extents, lambda vars_: BufferStore(
        dst.buffer, region_index(dst, vars_), op.value, op.span), op.span)
    if dst.buffer.scope == FRAGMENT:
        layout = ctx.layouts.buffer(dst.buffer)
        if tuple(layout.shape) == tuple(extents):
            return _lower_with_layout(loop, layout, ctx)
    return _lower_with_layout(loop, lay.make_partition(tuple(extents), ctx.num_threads), ctx)


# 16-bit floats add in pairs: one f16x2 / bf16x2 atomic per two adjacent elements.
PAIRED_ADDS = ("float16", "bfloat16")


def lower_atomic_tile(op, ctx: ThreadContext):
    dst, value = op.dst, op.value
    extents = _tile_extents(value)
    if op.kind == "add" and dst.buffer.scope == GLOBAL and is_shared(value.buffer.scope) and \
            dst.buffer.dtype.name in PAIRED_ADDS and \
            _vector_width(value, dst, extents, ctx, chunk_bits=32) == 2:
        return _in_chunks(value, dst, extents, 2, ctx, lambda s_idx, d_idx: _paired_add(
            op, s_idx, d_idx, ctx), op.span)

    def body(vars_):
        v = BufferLoad(value.buffer, region_index(value, vars_))
        target = BufferRegion(dst.buffer, tuple((i, const(1)) for i in region_index(dst, vars_)))
        return Atomic(op.kind, target, cast(v, dst.buffer.dtype), op.span)

    loop = _synthetic_loop(extents, body, op.span)
    if value.buffer.scope == FRAGMENT:
        return _lower_with_layout(loop, ctx.layouts.buffer(value.buffer), ctx)
    return _lower_with_layout(loop, lay.make_partition(tuple(extents), ctx.num_threads), ctx)

