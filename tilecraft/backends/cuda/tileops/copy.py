"""T.copy on threads (T.fill and the tile-form atomics, which share its loops: fill_atomic.py).

A copy that touches a fragment runs as an element-wise loop laid out like the fragment, so each
thread moves the registers it holds; between a whole fragment and a global tile of its dtype,
each run of a thread's registers that holds consecutive elements of a row (layout inference
deals runs of up to 16 bytes round robin) moves as one vector access. Other copies (global <-> shared, shared <-> shared) are
split over the threads in 16-byte chunks when both sides allow it: same dtype, rows made of
whole chunks, and a global column start that is a multiple of the chunk (then a chunk is either
wholly inside the tensor or wholly outside, and one predicated vector access does it). The rest
fall back to one element per access, each guarded.
"""
from __future__ import annotations

import numpy as np

from ....arith.bounds import divisor_of
from ....ir.linear import linear_form
from ....errors import TileError
from ....ir import dtypes as dt
from ....ir.buffer import FRAGMENT, GLOBAL, LOCAL, LOCAL_VAR, BufferRegion, is_shared
from ....ir.expr import BufferLoad, Call, Var, address_of, cast, const, logical
from ....ir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, seq
from .... import layout as lay
from .cache_hints import hinted
from .fragment_parts import aligned, locals_of_part, part_coords
from .lowering import ThreadContext, in_bounds_condition, packed_pair
from .parallel import lower_parallel
from ....layout.derive import same_layout, same_threads
from ....ir.annotations import ASYNC_COPY, INSTRUCTION
from ..intrinsics import (CP_ASYNC_CG_16, LD_GLOBAL, LD_GLOBAL_PRED, LD_REGS, LD_SHARED,
                          STMATRIX_X4, ST_GLOBAL, ST_REGS, ST_SHARED)


def _tile_extents(region: BufferRegion) -> list[int]:
    ext = region.static_extents()
    if ext is None:
        raise TileError(f"T.copy: the extents of the {region.buffer.name} tile must be known at "
                        "compile time for the CUDA backend", region.span)
    return [e for e in ext if e != 1] or [1]


def tile_view(layout, extents):
    """A fragment's layout over the tile's extents when they are its shape without the unit
    dims (a (1, 512) fragment moved as a 512-element tile), else the layout itself."""
    shape = tuple(layout.shape)
    if shape != tuple(extents) and tuple(d for d in shape if d != 1) == tuple(extents):
        return layout.reshape(tuple(extents))
    return layout


def region_index(region: BufferRegion, coords) -> tuple:
    """Buffer indices of tile coordinates (one per non-unit extent, in order)."""
    coords = list(coords)
    out = []
    ext = region.static_extents()
    non_unit = [d for d, e in enumerate(ext) if e != 1] or [len(ext) - 1]
    for d, (start, _) in enumerate(region.ranges):
        out.append(start + coords.pop(0) if d in non_unit else start)
    return tuple(out)


def _synthetic_loop(extents, make_body, span):
    """A T.Parallel nest over `extents` whose body make_body(vars) builds."""
    vars_ = [Var(f"i{d}") for d in range(len(extents))]
    body = make_body(vars_)
    for v, e in reversed(list(zip(vars_, extents))):
        body = For(v, const(0), const(e), "parallel", body, {}, span)
    return body


def _lower_with_layout(loop, layout, ctx: ThreadContext):
    ctx.layouts.loops[id(loop)] = layout
    return lower_parallel(loop, ctx)


def lower_copy(op, ctx: ThreadContext):
    src, dst = op.src, op.dst
    extents = _tile_extents(src)
    frag = next((r.buffer for r in (dst, src) if r.buffer.scope == FRAGMENT), None)

    def body(vars_):
        value = cast(BufferLoad(src.buffer, region_index(src, vars_)), dst.buffer.dtype)
        return BufferStore(dst.buffer, region_index(dst, vars_), value, op.span)

    loop = _synthetic_loop(extents, body, op.span)
    if _same_registers(op, ctx):
        return _register_move(op, ctx)
    if src.buffer.scope == FRAGMENT and dst.buffer.scope == FRAGMENT and \
            not same_threads(ctx.layouts.buffer(src.buffer), ctx.layouts.buffer(dst.buffer)):
        return _staged_copy(op, extents, ctx)
    if frag is not None:
        layout = tile_view(ctx.layouts.buffer(frag), extents)
        runs = [(0, layout.locals_per_thread)]
        if tuple(layout.shape) != tuple(extents):
            runs = locals_of_part(op, layout) if frag is src.buffer else None
            if runs is None and frag is src.buffer and dst.buffer.scope != GLOBAL:
                return _part_through_shared(op, ctx)
            if runs is None:
                raise TileError(
                    f"T.copy: this part of fragment {frag.name} is not supported by the CUDA "
                    "backend: a part must be stored from the fragment, start at constant "
                    "indices and be held by every thread in the same registers (as a band of "
                    "whole column blocks of an accumulator is); copy the whole fragment or "
                    "such a band", op.span)
        whole = runs == [(0, layout.locals_per_thread)]
        v = _register_vector_width(op, frag, layout, extents, ctx) if whole else 1
        if v > 2 or (v == 2 and frag is dst.buffer):
            # Elements of the tensor's own dtype: runs of them move as they are, up to 16
            # bytes at a time (a pair would be converted through float32 for nothing).
            return _register_vector_copy(op, frag, layout, v, ctx)
        if frag is src.buffer and _pairs_store_together(op, layout, ctx) and \
                aligned(runs, 2):
            if op.annotations.get(INSTRUCTION) == "stmatrix" and aligned(runs, 8) and \
                    _stmatrix_blocks(op, layout, ctx):
                return seq([_stmatrix_store(op, layout, ctx, run) for run in runs])
            return seq([_paired_store(op, layout, ctx, run) for run in runs])
        if not whole:   # a band of an accumulator into a tile of its own dtype
            v = 2 if aligned(runs, 2) and _pairs_store_together(op, layout, ctx, as_is=True) \
                else 1
            return seq([_paired_store(op, layout, ctx, run, v) for run in runs])
        if v > 1:
            return _register_vector_copy(op, frag, layout, v, ctx)
        return _lower_with_layout(loop, layout, ctx)
    vector = _vector_width(src, dst, extents, ctx)
    if vector > 1:
        return _vector_copy(op, extents, vector, ctx)
    return _lower_with_layout(loop, lay.make_partition(tuple(extents), ctx.num_threads), ctx)


def _same_registers(op, ctx) -> bool:
    """A copy of a whole fragment into another of the same dtype and layout (the register
    versions of schedule/prefetch_fragments): each thread's registers map one to one."""
    src, dst = op.src, op.dst
    if src.buffer.scope != FRAGMENT or dst.buffer.scope != FRAGMENT or \
            not dt.same_storage(src.buffer.dtype, dst.buffer.dtype):
        return False
    return src.covers_whole() and dst.covers_whole() and \
        same_layout(ctx.layouts.buffer(src.buffer), ctx.layouts.buffer(dst.buffer))


def _register_move(op, ctx: ThreadContext):
    """dst's registers = src's: element by element for 32-bit types and wider (a register
    each), else in the widest moves (up to 16 bytes) the count allows: a byte fragment moved
    byte by byte would make nvcc split its words into one register a byte."""
    src = ctx.register_array(op.src.buffer)
    dst = ctx.register_array(op.dst.buffer)
    n, nbytes = src.shape[0], op.src.buffer.dtype.bytes
    v = 16 // nbytes if nbytes < 4 else 1
    while n % v:
        v //= 2
    if v * nbytes < 4 or nbytes >= 4:
        return seq([BufferStore(dst, (const(l),), BufferLoad(src, (const(l),)), op.span)
                    for l in range(n)], op.span)
    q = ctx.fresh("q", n // v)
    bits = v * nbytes * 8
    first = ctx.simplify(q * v)
    move = Call(ST_REGS.format(bits=bits), (address_of(dst, first),
                                            Call(LD_REGS.format(bits=bits),
                                                 (address_of(src, first),), dt.handle)),
                dt.handle)
    return For(q, const(0), const(n // v), "unroll", Evaluate(move, op.span), {}, op.span)


def _register_vector_width(op, frag, layout, extents, ctx) -> int:
    """Elements per access of a copy between a whole fragment and a global or shared tile of
    its dtype: the longest run (up to 16 bytes) of each thread's registers holding consecutive
    elements of a row (layout.vector_runs), when every run starts at a multiple of its length
    in the tensor (rows of whole runs, a column start that is a multiple) or, in shared
    memory, lands on a whole aligned chunk of the buffer's layout; else 1."""
    region = op.dst if frag is op.src.buffer else op.src
    g = region.buffer
    if not (g.scope == GLOBAL or is_shared(g.scope)) or \
            not dt.same_storage(g.dtype, frag.dtype) or \
            frag.dtype.bits < 8 or tuple(layout.shape) != tuple(extents) or \
            layout.thread_offset or layout.num_threads != ctx.num_threads or \
            region.static_extents()[-1] == 1:
        return 1
    v = lay.vector_runs(layout, 128 // frag.dtype.bits)

    def fits(v):
        if not _multiple_of(region.ranges[-1][0], v):
            return False
        if g.scope == GLOBAL:
            return isinstance(g.shape[-1], int) and g.shape[-1] % v == 0
        return _keeps_chunks(ctx.layouts.buffer(g), v)
    while v > 1 and not fits(v):
        v //= 2
    return v


def _register_vector_copy(op, frag, layout, v: int, ctx: ThreadContext):
    """Each thread moves its registers v at a time: run q (registers v q .. v q + v - 1) is
    one vector access of the v consecutive row elements it holds, predicated on the tensor's
    bounds (a run lies wholly inside or outside: _register_vector_width). Consecutive threads
    hold consecutive runs in the layouts inference deals (coalesced). Of a replicated
    fragment every replica loads, and only the first stores."""
    loading = frag is op.dst.buffer
    region = op.src if loading else op.dst
    bits = frag.dtype.bits * v
    n = layout.locals_per_thread // v
    q = ctx.fresh("q", n)
    first = ctx.simplify(q * v)
    coords = [ctx.simplify(x) for x in layout.logical_of(ctx.tx, first)]
    idx = region_index(region, coords)
    regs = address_of(ctx.register_array(frag), first)
    held = lay.slot_elements(layout)[:, ::v] >= 0
    guard = None
    if not held.all():   # slots beyond the tile (a small tile over many threads)
        for c, e in zip(coords, layout.shape):
            cond = c < e
            guard = cond if guard is None else logical("and", guard, cond)
    if loading:
        stmt = Evaluate(Call(ST_REGS.format(bits=bits), (regs, _vector_load(region.buffer, idx,
                                                                        bits, ctx)),
                             dt.handle), op.span)
    else:
        value = Call(LD_REGS.format(bits=bits), (regs,), dt.handle)
        stmt = _vector_store(region.buffer, idx, value, bits, ctx, op.span)
        if layout.replicate > 1:
            rep = ctx.simplify(layout.rep_of(ctx.tx, first))
            guard = rep == 0 if guard is None else logical("and", guard, rep == 0)
    if guard is not None:
        stmt = IfThenElse(guard, stmt, None, op.span)
    return For(q, const(0), const(n), "unroll", stmt, {}, op.span)


def _pairs_store_together(op, layout, ctx, as_is: bool = False) -> bool:
    """A floating-point fragment (an accumulator's epilogue) stored into float16 / bfloat16
    elements whose registers 2m, 2m + 1 hold column neighbours (j, j + 1) with j even, as every
    mma / wgmma accumulator does: each pair leaves as one 32-bit store, not two 16-bit ones.
    as_is: the same for a 32-bit fragment stored into its own dtype (64-bit stores)."""
    dst = op.dst
    # The packing goes through float32 (tc::pack_half2 / pack_bf162), which is exact only for
    # floating-point sources and defined only for these two destinations.
    if as_is:
        stored = dt.same_storage(dst.buffer.dtype, op.src.buffer.dtype) and \
            dst.buffer.dtype.bits == 32
    else:
        stored = dst.buffer.dtype.name in ("float16", "bfloat16") and op.src.buffer.dtype.is_float
    if not stored or getattr(layout, "replicate", 1) != 1 or \
            layout.locals_per_thread % 2 or not _multiple_of(dst.ranges[-1][0], 2):
        return False
    if dst.buffer.scope == GLOBAL:
        width = dst.buffer.shape[-1]
        if not isinstance(width, int) or width % 2:
            return False
    elif not is_shared(dst.buffer.scope) or not _keeps_chunks(ctx.layouts.buffer(dst.buffer), 2):
        return False
    return registers_pair_columns(layout)


def registers_pair_columns(layout) -> bool:
    """Whether every thread's registers 2m, 2m + 1 of the 2-d fragment layout hold column
    neighbours (j, j + 1) of one row, with j even (every mma / wgmma accumulator)."""
    table = layout.table()[..., 0, :]
    if table.shape[-1] != 2 or table.shape[-2] % 2:
        return False
    even, odd = table[..., 0::2, :], table[..., 1::2, :]
    return bool(np.all(even[..., 0] == odd[..., 0]) and np.all(odd[..., 1] == even[..., 1] + 1)
                and np.all(even[..., 1] % 2 == 0))


def _paired_store(op, layout, ctx: ThreadContext, run: tuple, v: int = 2):
    """Registers run[0] .. run[1] - 1 of each thread (a whole fragment, or the part of it a
    copy names), v at a time: pairs packed into float16 / bfloat16 (one 32-bit store), pairs
    of a 32-bit fragment into its own dtype (one 64-bit store), or (v = 1) one by one."""
    src, dst = op.src, op.dst
    first, n = run[0] // v, (run[1] - run[0]) // v
    slot = ctx.fresh("l", n)
    pair = slot + first
    coords = [ctx.simplify(x) for x in part_coords(op, layout.logical_of(ctx.tx, pair * v))]
    idx = region_index(dst, coords)
    reg = ctx.register_array(src.buffer)
    if v == 1:
        store = BufferStore(dst.buffer, idx, cast(BufferLoad(reg, (ctx.simplify(pair),)),
                                                  dst.buffer.dtype), op.span)
        if dst.buffer.scope == GLOBAL:
            store = _where_inside(store, dst.buffer, idx, ctx, op.span)
    elif dt.same_storage(dst.buffer.dtype, src.buffer.dtype) and src.buffer.dtype.bits == 32:
        value = Call(LD_REGS.format(bits=64), (address_of(reg, ctx.simplify(pair * 2)),),
                     dt.handle)
        store = _vector_store(dst.buffer, idx, value, 64, ctx, op.span)
    else:
        halves = [cast(BufferLoad(reg, (ctx.simplify(pair * 2 + k),)), dt.float32)
                  for k in (0, 1)]
        value = packed_pair(dst.buffer.dtype.name, *halves)
        store = _vector_store(dst.buffer, idx, value, 32, ctx, op.span)
    return For(slot, const(0), const(n), "unroll", store, {}, op.span)


def _stmatrix_blocks(op, layout, ctx) -> bool:
    """A 2-d fragment whose register pairs (2p, 2p + 1) are, in each warp, an 8x8 block that
    lane i holds at row i / 4, columns 2 (i % 4) + {0, 1} (the stmatrix fragment), with the
    block's columns one 16-byte chunk of the shared tile: four pairs go out in one stmatrix.x4."""
    n = layout.locals_per_thread
    if len(layout.shape) != 2 or n % 8 or layout.num_threads % 32 or \
            not _multiple_of(op.dst.ranges[-1][0], 8) or \
            not _keeps_chunks(ctx.layouts.buffer(op.dst.buffer), 8):
        return False
    table = layout.table()[..., 0, :].reshape(-1, 2)
    held = np.full((layout.num_threads, n, 2), -1)
    rows, cols = np.divmod(np.arange(table.shape[0]), layout.shape[1])
    held[table[:, 0] - layout.thread_offset, table[:, 1]] = np.stack([rows, cols], -1)
    pairs = held[:, 0::2].reshape(-1, 32, n // 2, 2)          # [warp, lane, pair, (r, c)]
    lane = np.arange(32)[None, :, None]
    first = pairs[:, :1]
    return bool(np.all(pairs[..., 0] == first[..., 0] + lane // 4) and
                np.all(pairs[..., 1] == first[..., 1] + 2 * (lane % 4)) and
                np.all(first[..., 1] % 8 == 0))


def _stmatrix_store(op, layout, ctx: ThreadContext, run: tuple):
    """Registers 8g .. 8g + 7 of each thread (pairs 4g .. 4g + 3, matrices 0..3) in one
    stmatrix.x4, for the groups in run; lane i passes the address of row i % 8 of matrix
    i / 8, the row its lane 4 (i % 8) holds."""
    first, groups = run[0] // 8, (run[1] - run[0]) // 8
    gi = ctx.fresh("g", groups)
    g = gi + first
    tx = ctx.tx
    row_holder = ctx.simplify(tx // 32 * 32 + tx % 8 * 4 + layout.thread_offset)
    pair = ctx.simplify((g * 4 + tx % 32 // 8) * 2)
    coords = [ctx.simplify(x) for x in part_coords(op, layout.logical_of(row_holder, pair))]
    reg = ctx.register_array(op.src.buffer)
    words = [packed_pair(op.dst.buffer.dtype.name, *(
        cast(BufferLoad(reg, (ctx.simplify(g * 8 + 2 * k + h),)), dt.float32) for h in (0, 1)))
             for k in range(4)]
    store = Evaluate(Call(STMATRIX_X4.name, (_address(op.dst.buffer,
                                                         region_index(op.dst, coords), ctx),
                                              *words), dt.handle), op.span)
    return For(gi, const(0), const(groups), "unroll", store, {}, op.span)


def lower_twin_copy(op, ctx: ThreadContext, threads: int, local: int):
    """A copy between a fragment of one warpgroup (laid out over `local` threads, every
    warpgroup holding its own) and its block-wide twin, where each thread holds the same
    elements in both: register moves, dst[l] = src[m(l)] with m the same in every thread.
    (seesaw_warpgroups makes the twins; a pair that is not such is an internal error.)"""
    src_layout = ctx.layouts.buffer(op.src.buffer)
    dst_layout = ctx.layouts.buffer(op.dst.buffer)

    def slots(layout):
        """(thread, local) -> logical index, and logical index -> the threads holding it."""
        held, holders = {}, {}
        table = layout.table()
        for pos in np.ndindex(*table.shape[:-1]):
            t, l = (int(x) for x in table[pos])
            idx = pos[:layout.ndim]
            held[(t, l)] = idx
            holders.setdefault(idx, set()).add(t)
        return held, holders

    dst_held, _ = slots(dst_layout)
    _, src_holders = slots(src_layout)

    def owner(layout, t):
        return t % local if layout.num_threads == local else t

    moves, src_table = {}, src_layout.table()
    for t in range(threads):
        for l in range(dst_layout.locals_per_thread):
            idx = dst_held.get((owner(dst_layout, t), l))
            if idx is None:
                continue
            entry = src_table[idx] if src_layout.replicate == 1 else src_table[idx][0]
            m = int(entry[1])
            if owner(src_layout, t) not in src_holders[idx] or moves.setdefault(l, m) != m:
                raise TileError(f"internal: T.copy {op.src.buffer.name} -> "
                                f"{op.dst.buffer.name}: the twins hold their elements in "
                                "different threads", op.span)
    src_reg, dst_reg = ctx.register_array(op.src.buffer), ctx.register_array(op.dst.buffer)
    return seq([BufferStore(dst_reg, (const(l),), cast(BufferLoad(src_reg, (const(m),)),
                                                         dst_reg.dtype), op.span)
                for l, m in sorted(moves.items())], op.span)


def _part_through_shared(op, ctx: ThreadContext):
    """A part of a fragment its threads do not hold in the same registers (a row picked by a
    loop variable: lse[k, :]): the whole fragment is written to a shared scratch tile, where
    any part of it is an ordinary region, and the part is copied from there."""
    whole = op.src.buffer
    tmp = _scratch(f"{whole.name}_whole", whole.static_shape(), whole.dtype, op.span, ctx)
    return _through_shared(op, whole.region(), tmp, BufferRegion(tmp, op.src.ranges, op.span),
                           ctx)


def _staged_copy(op, extents, ctx: ThreadContext):
    """A copy between fragments laid out differently (an accumulator into a gemm operand of
    another warp split): through a shared scratch tile, with barriers around it."""
    tmp = _scratch(f"{op.dst.buffer.name}_stage", tuple(extents), op.dst.buffer.dtype, op.span,
                   ctx)
    return _through_shared(op, op.src, tmp, tmp.region(), ctx)


def _scratch(name, shape, dtype, span, ctx: ThreadContext):
    from ....ir.buffer import SHARED, Buffer
    tmp = Buffer(name, tuple(shape), dtype, SHARED, span)
    ctx.layouts.buffers[id(tmp)] = lay.linear_layout(tuple(shape))
    return tmp


def _through_shared(op, written, tmp, read, ctx: ThreadContext):
    """op as `written` copied into the shared scratch tile tmp and `read` from it into op's
    destination, with barriers around both."""
    from ....ir.tileop import Copy
    from ....ir.annotations import sync_stmt
    return seq([Allocate(ctx.flat(tmp), op.span), sync_stmt(op.span),
                lower_copy(Copy(written, tmp.region(), {}, op.span), ctx), sync_stmt(op.span),
                lower_copy(Copy(read, op.dst, {}, op.span), ctx), sync_stmt(op.span)])


def _vector_width(src: BufferRegion, dst: BufferRegion, extents, ctx, chunk_bits=128) -> int:
    """Elements per chunk of chunk_bits when both sides move whole chunks, else 1."""
    if not dt.same_storage(src.buffer.dtype, dst.buffer.dtype):
        return 1
    d = src.buffer.dtype
    v = chunk_bits // d.bits if d.bits >= 8 else 1
    if v <= 1 or extents[-1] % v:
        return 1
    for r in (src, dst):
        b = r.buffer
        if b.scope in (LOCAL, LOCAL_VAR):
            return 1
        last_start = r.ranges[-1][0]
        if not _multiple_of(last_start, v):
            return 1
        if b.scope == GLOBAL:
            width = b.shape[-1]
            if not isinstance(width, int) or width % v:
                return 1
            if r.static_extents()[-1] == 1:
                return 1
        elif is_shared(b.scope):
            if not _keeps_chunks(ctx.layouts.buffer(b), v):
                return 1
    return v


def _keeps_chunks(layout, v: int) -> bool:
    """Every run of v elements along the last dim that starts at a multiple of v is stored
    contiguously at an offset that is a multiple of v (so one vector access moves it)."""
    from .lowering import flat_offset_table
    table = flat_offset_table(layout)
    runs = table.reshape(table.shape[:-1] + (table.shape[-1] // v, v)) if \
        table.shape[-1] % v == 0 else None
    if runs is None:
        return False
    first = runs[..., :1]
    return bool(np.all(runs == first + np.arange(v)) and np.all(first % v == 0))


def _multiple_of(e, v: int) -> bool:
    """e is always a multiple of v: by its linear form, or by divisor_of where the form stops
    at a quotient (a tile start `k * block_K // group_size`)."""
    if isinstance(e, int):
        return e % v == 0
    if divisor_of(e) % v == 0:
        return True
    terms, k = linear_form(e)
    return k % v == 0 and all(c % v == 0 for _, c in terms.values())


def _vector_copy(op, extents, v: int, ctx: ThreadContext):
    src, dst = op.src, op.dst
    bits = src.buffer.dtype.bits * v

    def move(s_idx, d_idx):
        if op.annotations.get(ASYNC_COPY) and src.buffer.scope == GLOBAL and \
                is_shared(dst.buffer.scope) and bits == 128:
            # cp.async: the copy lands in shared memory later (a pipelined loop waits for it);
            # a chunk outside the tensor is zero-filled.
            cond = in_bounds_condition(ctx, src.buffer, s_idx)
            name, args = hinted(op, CP_ASYNC_CG_16.name, (
                _address(dst.buffer, d_idx, ctx), _address(src.buffer, s_idx, ctx),
                cond if cond is not None else const(True)))
            return Evaluate(Call(name, args, dt.handle), op.span)
        load = _vector_load(src.buffer, s_idx, bits, ctx)
        return _vector_store(dst.buffer, d_idx, load, bits, ctx, op.span)
    return _in_chunks(src, dst, extents, v, ctx, move, op.span)


def _in_chunks(src, dst, extents, v: int, ctx: ThreadContext, move, span):
    """Chunks of v elements, chunk c = l * threads + tx covering row c // (C / v); move(src
    index, dst index) of a chunk's first element gives the statement that moves it."""
    rows = 1
    for e in extents[:-1]:
        rows *= e
    per_row = extents[-1] // v
    chunks = rows * per_row
    T = ctx.num_threads
    n = -(-chunks // T)
    l = ctx.fresh("l", n)
    c = l * T + ctx.tx
    coords = _unflatten(ctx.simplify(c // per_row), extents[:-1], ctx) + \
        [ctx.simplify((c % per_row) * v)]
    stmt = move(region_index(src, coords), region_index(dst, coords))
    if chunks % T:
        stmt = IfThenElse(ctx.simplify(c) < chunks, stmt, None, span)
    return For(l, const(0), const(n), "unroll", stmt, {}, span)


def _unflatten(flat, extents, ctx) -> list:
    coords = []
    for d in range(len(extents)):
        inner = 1
        for e in extents[d + 1:]:
            inner *= e
        coords.append(ctx.simplify((flat // inner) % extents[d]) if d else
                      ctx.simplify(flat // inner))
    return coords


def _address(buffer, idx, ctx):
    if is_shared(buffer.scope):
        return address_of(ctx.flat(buffer), ctx.shared_offset(buffer, idx))
    return address_of(buffer, *(ctx.simplify(i) for i in idx))


def _vector_load(buffer, idx, bits, ctx):
    addr = _address(buffer, idx, ctx)
    if buffer.scope == GLOBAL:
        cond = in_bounds_condition(ctx, buffer, idx)
        if cond is not None:
            return Call(LD_GLOBAL_PRED.format(bits=bits), (addr, cond), dt.handle)
        return Call(LD_GLOBAL.format(bits=bits), (addr,), dt.handle)
    return Call(LD_SHARED.format(bits=bits), (addr,), dt.handle)


def _vector_store(buffer, idx, value, bits, ctx, span):
    addr = _address(buffer, idx, ctx)
    if buffer.scope == GLOBAL:
        return _where_inside(Evaluate(Call(ST_GLOBAL.format(bits=bits), (addr, value), dt.handle),
                                      span), buffer, idx, ctx, span)
    return Evaluate(Call(ST_SHARED.format(bits=bits), (addr, value), dt.handle), span)


def _where_inside(stmt, buffer, idx, ctx, span):
    """stmt, run only where the chunk at idx lies inside the global tensor `buffer`."""
    cond = in_bounds_condition(ctx, buffer, idx)
    return IfThenElse(cond, stmt, None, span) if cond is not None else stmt
