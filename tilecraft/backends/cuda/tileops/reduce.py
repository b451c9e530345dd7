"""T.reduce_*: per-thread folding, butterfly shuffles inside a warp, shared memory across warps.

Everything about where data lives is found by enumerating the source fragment's layout at
compile time: which of a thread's registers fold into each output register, and which threads
share an output element. Threads sharing an element must differ in a fixed set of thread-index
bits (true of every layout tilecraft builds); lane bits are combined with shfl_xor, warp bits
through a shared workspace (one slot per thread and output register, then a barrier).
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from ....ir import dtypes as dt
from ....ir.buffer import FRAGMENT, SHARED, Buffer
from ....ir.expr import BufferLoad, Call, Var, binary, call, cast, const
from ....ir.stmt import Allocate, BufferStore, IfThenElse, seq
from .lowering import evaluate_table
from ....ir.annotations import sync_stmt
from ..intrinsics import SHFL_XOR

_INIT = {"sum": 0.0, "abssum": 0.0, "max": -np.inf, "absmax": -np.inf, "min": np.inf}
_COMBINE = {"sum": "+", "abssum": "+", "max": "max", "absmax": "max", "min": "min"}


def _combine(kind, a, b):
    op = _COMBINE[kind]
    return binary(op, a, b) if op != "+" else a + b


def _tree(kind, terms, d):
    """The fold of terms as a balanced tree: a dependency chain of log2(n) operations instead of
    n, which is what bounds a thread's reduction latency."""
    if not terms:
        return _init(kind, d)
    while len(terms) > 1:
        paired = [_combine(kind, terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        terms = paired + ([terms[-1]] if len(terms) % 2 else [])
    return terms[0]


def _init(kind, d):
    v = _INIT[kind]
    if d.is_float:
        return const(v, d)
    if v == 0:
        return const(0, d)
    return const(dt.min_value(d) if v < 0 else dt.max_value(d), d)


def _compact(t, masks):
    """t with the bits in masks (single-bit masks) removed, higher bits moved down."""
    for m in sorted(masks, reverse=True):
        b = m.bit_length() - 1
        t = (t & (m - 1)) | ((t >> (b + 1)) << b)
    return t


def _output_coords(src_layout, dst_layout, dim: int, threads: int) -> list:
    """For each thread and source register (arrays [threads, registers]), the coordinates
    of the output element its value is reduced into."""
    n = src_layout.locals_per_thread
    t, l = Var("t"), Var("l")
    env = {id(t): np.arange(threads)[:, None], id(l): np.arange(n)[None, :]}
    logical = [np.broadcast_to(evaluate_table(x, env), (threads, n))
               for x in src_layout.logical_of(t, l)[:src_layout.ndim]]
    kept = [x for d, x in enumerate(logical) if d != dim]
    if len(kept) < dst_layout.ndim:  # the output keeps the reduced dim (of extent 1)
        kept.insert(dim, np.zeros_like(logical[dim]))
    return kept


def reduce_plan(src_layout, dst_layout, dim: int, threads: int):
    """(folds, lane_masks, warp_masks): folds[dl] lists the source registers each thread folds
    into output register dl; masks are the thread-index bits that share an output element."""
    n = src_layout.locals_per_thread
    kept = _output_coords(src_layout, dst_layout, dim, threads)
    kvars = [Var(f"k{d}") for d in range(len(kept))]
    kenv = {id(v): arr for v, arr in zip(kvars, kept)}
    dst_local = np.broadcast_to(evaluate_table(dst_layout.local_of(kvars), kenv), (threads, n))
    folds = [[] for _ in range(dst_layout.locals_per_thread)]
    for sl in range(n):
        column = dst_local[:src_layout.num_threads, sl]
        if not np.all(column == column[0]):
            raise TileError("internal: a reduction's register mapping differs between threads")
        folds[int(column[0])].append(sl)
    # Threads holding different parts of an output element's slice (first replicas only:
    # replicas hold the same partial sums and must not be added twice) differ in the bits of
    # (t ^ t0); every replica then runs the same butterfly with its own partners.
    table = src_layout.table()[..., 0, 0]  # thread of replica 0, per element
    table = np.moveaxis(table, dim, -1).reshape(-1, table.shape[dim])
    groups = [{int(x) for x in row} for row in table]
    bits = 0
    for members in groups:
        first = min(members)
        for m in members:
            bits |= m ^ first
    masks = [1 << b for b in range(threads.bit_length()) if bits >> b & 1]
    for members in groups:
        if len(members) != 1 << len(masks):
            raise TileError("internal: a reduction's threads do not form a butterfly group")
    return folds, [m for m in masks if m < 32], [m for m in masks if m >= 32]


def _held_where_computed(src_layout, dst_layout, dim: int, threads: int) -> bool:
    """Whether each thread that computes an output element of the reduction holds that element
    in dst's layout: a dst whose layout an earlier use fixed (a reduction along another
    dimension) may keep it in other threads."""
    n = src_layout.locals_per_thread
    kept = _output_coords(src_layout, dst_layout, dim, threads)
    table = dst_layout.table()
    owners = table[..., 0].reshape(tuple(dst_layout.shape) + (-1,))
    inside = np.ones((threads, n), bool)
    for k, e in zip(kept, dst_layout.shape):
        inside &= (k >= 0) & (k < e)
    idx = tuple(np.where(inside, k, 0) for k in kept)
    # a layout over fewer threads than the block's repeats over the others
    mine = np.arange(threads) % dst_layout.num_threads
    held = (owners[idx] == mine[:, None, None]).any(-1)
    return bool(np.all((held | ~inside)[:src_layout.num_threads]))


def lower_reduce(op, ctx):
    src, dst = op.src.buffer, op.dst.buffer
    if src.scope != FRAGMENT or dst.scope != FRAGMENT:
        # stage_tile_operands moved every region of static extents into registers
        which = src.name if src.scope != FRAGMENT else dst.name
        raise TileError(f"T.reduce_{op.kind}: the region of {which} has extents known only at "
                        "run time, and the CUDA backend reduces it through a fragment of its "
                        "shape; reduce a region of constant extents (mask the rest)", op.span)
    s_layout, d_layout = ctx.layouts.buffer(src), ctx.layouts.buffer(dst)
    if not _held_where_computed(s_layout, d_layout, op.dim, ctx.num_threads):
        raise TileError(
            f"T.reduce_{op.kind}: fragment {dst.name} keeps its elements in other threads than "
            f"the ones that reduce {src.name} along dim {op.dim} into them (its layout was "
            "fixed by another use first, such as a reduction along another dimension); reduce "
            "into a fragment of its own", op.span)
    folds, lane_masks, warp_masks = reduce_plan(s_layout, d_layout, op.dim, ctx.num_threads)
    if lane_masks and ctx.num_threads % 32:
        # The shuffles name all 32 lanes of a warp; a warp that is only partly there leaves
        # them undefined on the GPU.
        raise TileError(f"T.reduce_{op.kind} of {src.name} combines the threads of a warp with "
                        f"shuffles, which need whole warps, but the block has {ctx.num_threads} "
                        "threads: use a multiple of 32", op.span)
    acc_t = dst.dtype
    s_reg, d_reg = ctx.register_array(src), ctx.register_array(dst)
    nd = len(folds)
    acc = Buffer(f"{dst.name}_red", (nd,), acc_t, "local")
    out = [Allocate(acc)]
    for dl, regs in enumerate(folds):
        terms = []
        for sl in regs:
            x = BufferLoad(s_reg, (const(sl),))
            if x.dtype is not acc_t:
                x = cast(x, acc_t)
            if op.kind in ("abssum", "absmax"):
                x = call("abs", [x])
            terms.append(x)
        out.append(BufferStore(acc, (const(dl),), _tree(op.kind, terms, acc_t), op.span))
    for mask in lane_masks:
        for dl in range(nd):
            mine = BufferLoad(acc, (const(dl),))
            other = Call(SHFL_XOR.name, (mine, const(mask)), acc_t)
            out.append(BufferStore(acc, (const(dl),), _combine(op.kind, mine, other), op.span))
    if warp_masks:
        # After the shuffles every lane of a lane group holds the same partial, so one slot per
        # group and output register suffices: the slot index is the thread index with the
        # shuffled lane bits removed, and only the group's first lane writes it. The barrier
        # after the reads keeps the next user of the scratch (or the next loop iteration)
        # from overwriting slots still being read; where insert_barriers found that another
        # barrier always comes first, the reduction keeps slots of its own instead.
        slots = ctx.num_threads >> len(lane_masks)
        ws = Buffer(f"{dst.name}_ws", (slots * nd,), acc_t, SHARED)
        if not op.trailing_barrier:
            ctx.private_scratch.add(id(ws))
        out.append(Allocate(ws))
        lane_bits = sum(lane_masks)
        writes = [BufferStore(ws, (_compact(ctx.tx, lane_masks) * nd + dl,),
                              BufferLoad(acc, (const(dl),))) for dl in range(nd)]
        out.append(IfThenElse((ctx.tx & lane_bits) == 0, seq(writes), None, op.span)
                   if lane_bits else seq(writes))
        out.append(sync_stmt(op.span))
        for dl in range(nd):
            value = BufferLoad(acc, (const(dl),))
            for c in range(1, 1 << len(warp_masks)):
                partner = 0
                for b, m in enumerate(warp_masks):
                    if c >> b & 1:
                        partner |= m
                slot = _compact(ctx.tx ^ partner, lane_masks) * nd + dl
                value = _combine(op.kind, value, BufferLoad(ws, (slot,)))
            out.append(BufferStore(acc, (const(dl),), value, op.span))
        if op.trailing_barrier:
            out.append(sync_stmt(op.span))
    for dl in range(nd):
        value = BufferLoad(acc, (const(dl),))
        if not op.clear:
            value = _combine(op.kind, BufferLoad(d_reg, (const(dl),)), value)
        out.append(BufferStore(d_reg, (const(dl),), value, op.span))
    return seq(out)
