"""T.fill and tile-form atomics on threads, over copy.py's element loops and chunks.

A fill or an atomic that touches a fragment runs laid out like the fragment; otherwise it is
partitioned over the threads. A tile-form atomic add of 16-bit floats from shared into global
memory goes in pairs on copy.py's chunk rules (one f16x2 / bf16x2 atomic per two elements), and
one of a float32 accumulator (whose registers hold column pairs) into a float32 tensor goes a
register pair at a time (tc::atomic_add_v2: one red.global.add.v2.f32 on sm_90, two atomics
before): the split-K GEMM's and attention backward's dQ adds, which are bound by the L2's
atomic rate, make half as many requests.
"""
from __future__ import annotations

from .... import layout as lay
from ....ir import dtypes as dt
from ....ir.buffer import FRAGMENT, GLOBAL, BufferRegion, is_shared
from ....ir.expr import BufferLoad, Call, cast, const
from ....ir.stmt import BufferStore, Evaluate, For
from ....ir.tileop import Atomic
from .copy import (_address, _in_chunks, _lower_with_layout, _multiple_of, _synthetic_loop,
                   _tile_extents, _vector_load, _vector_width, _where_inside,
                   registers_pair_columns, region_index, tile_view)
from .lowering import ThreadContext
from ..intrinsics import ATOMIC_ADD_V2, ATOMIC_ADD_X2


def _paired_add(op, s_idx, d_idx, ctx):
    pair = _vector_load(op.value.buffer, s_idx, 32, ctx)
    add = Evaluate(Call(ATOMIC_ADD_X2.name, (_address(op.dst.buffer, d_idx, ctx), pair),
                        dt.handle), op.span)
    return _where_inside(add, op.dst.buffer, d_idx, ctx, op.span)


def _adds_register_pairs(op, extents, ctx) -> bool:
    """A whole float32 fragment added into a float32 tensor whose rows hold whole pairs (an
    even width and an even first column), the fragment's registers holding column pairs."""
    dst, value = op.dst, op.value
    if op.kind != "add" or dst.buffer.scope != GLOBAL or value.buffer.scope != FRAGMENT or \
            dst.buffer.dtype.name != "float32" or value.buffer.dtype.name != "float32":
        return False
    layout = ctx.layouts.buffer(value.buffer)
    width = dst.buffer.shape[-1]
    return tuple(layout.shape) == tuple(extents) and len(extents) == 2 and \
        getattr(layout, "replicate", 1) == 1 and isinstance(width, int) and width % 2 == 0 \
        and _multiple_of(dst.ranges[-1][0], 2) and registers_pair_columns(layout)


def _register_pair_adds(op, ctx: ThreadContext):
    """tc::atomic_add_v2 of each thread's register pairs (2m, 2m + 1) at their columns."""
    layout = ctx.layouts.buffer(op.value.buffer)
    n = layout.locals_per_thread // 2
    pair = ctx.fresh("l", n)
    coords = [ctx.simplify(c) for c in layout.logical_of(ctx.tx, pair * 2)]
    idx = region_index(op.dst, coords)
    reg = ctx.register_array(op.value.buffer)
    halves = [BufferLoad(reg, (ctx.simplify(pair * 2 + k),)) for k in (0, 1)]
    add = Evaluate(Call(ATOMIC_ADD_V2.name, (_address(op.dst.buffer, idx, ctx), *halves),
                        dt.handle), op.span)
    return For(pair, const(0), const(n), "unroll",
               _where_inside(add, op.dst.buffer, idx, ctx, op.span), {}, op.span)


def lower_fill(op, ctx: ThreadContext):
    dst = op.dst
    extents = _tile_extents(dst)
    loop = _synthetic_loop(extents, lambda vars_: BufferStore(
        dst.buffer, region_index(dst, vars_), op.value, op.span), op.span)
    if dst.buffer.scope == FRAGMENT:
        layout = tile_view(ctx.layouts.buffer(dst.buffer), extents)
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
    if _adds_register_pairs(op, extents, ctx):
        return _register_pair_adds(op, ctx)

    def body(vars_):
        v = BufferLoad(value.buffer, region_index(value, vars_))
        target = BufferRegion(dst.buffer, tuple((i, const(1)) for i in region_index(dst, vars_)))
        return Atomic(op.kind, target, cast(v, dst.buffer.dtype), op.span)

    loop = _synthetic_loop(extents, body, op.span)
    if value.buffer.scope == FRAGMENT:
        return _lower_with_layout(loop, ctx.layouts.buffer(value.buffer), ctx)
    return _lower_with_layout(loop, lay.make_partition(tuple(extents), ctx.num_threads), ctx)

