"""T.copy between global and shared memory as TMA bulk tensor copies (sm_90).

Loads (global -> shared) and stores (shared -> global) follow the same rules. A copy
qualifies when its global tensor has a static, contiguous shape whose row strides are
multiples of 16 bytes (TMA's rule), the copied box is the whole destination tile (rows x cols,
a one-dimensional tile being one row, the tile's columns along the tensor's last dimension,
every other dimension of the box one element except at most one of `rows`), and each box
dimension fits TMA's 256-element limit.
The tile's shared layout (layout.swizzle) then decides the boxes: a tile stored with a W-byte
XOR swizzle is W-byte column slabs, `rows` tall, one after another, and each slab is exactly
one TMA box of W bytes x rows with the swizzle mode of the same name; a tile with no swizzle
mode is stored row-major and loaded as one box with no swizzle. The tensor map (one per tensor,
box and swizzle) becomes a __grid_constant__ kernel parameter that the launcher encodes from
the tensor at each call; TMA zero-fills what a load reads outside the tensor and drops what a
store writes there, so ragged edges need no code. Every load completes on the mbarrier the
copy names, counted in bytes (the whole box, filled elements included).

A store is issued by one thread once the tile is written and published (a barrier, and
fence.proxy.async in every writing thread, since TMA reads shared memory through the async
proxy: finalize_barriers puts both there), and committed as one bulk group. Before the bytes
may be written again the issuing thread must wait until the group has read them
(cp.async.bulk.wait_group.read): finalize_barriers has it wait in front of every barrier and
before the kernel ends, and any later write of the tile is behind a barrier (insert_barriers).
T.copy(..., disable_tma=True) keeps a copy off TMA in either direction.

T.atomic_add(global_region, shared_tile, use_tma=True) runs as a store that adds
(cp.reduce.async.bulk.tensor ... .add, tc::tma_store_add_Nd): the same boxes, tensor map and
bulk groups as a TMA store, so everything said of stores holds for it; each element's
read-modify-write in global memory is atomic, and TMA drops what falls outside the tensor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ....ir.linear import constant_value
from ....ir import dtypes as dt
from ....ir.buffer import GLOBAL, Buffer, is_shared
from ....ir.expr import Call, Var, address_of, const
from ....ir.stmt import IfThenElse, call_stmt, seq
from ....layout.swizzle import atom_row_bytes, swizzle_mode_for
from .cache_hints import hinted
from ....ir.annotations import INSTRUCTION, TILE_RANK, TMA_BARRIER, TMA_MULTICAST
from ..intrinsics import (CLUSTER_CTARANK, TMA_LOAD, TMA_LOAD_MULTICAST, TMA_STORE, TMA_STORE_ADD,
                          TMA_STORE_COMMIT)

MAX_BOX = 256
MAX_RANK = 5
TMA_SMEM_ALIGN = 128   # bytes: the shared-memory address of every bulk tensor copy


@dataclass(eq=False, repr=False)
class TensorMapVar(Var):
    """A kernel parameter holding the TMA tensor map of `buffer` with box `box` (outermost
    dimension first) and swizzle `swizzle` ("none", "32B", "64B", "128B"); with `im2col`
    (the bounding box's lower and upper corner, the traversal stride), a map in im2col mode
    over an NHWC image whose box is (pixels, channels) (tileops/tma_im2col.py)."""
    buffer: Buffer | None = None
    box: tuple = ()
    swizzle: str = "none"
    im2col: tuple | None = None
    span: object = field(default=None, compare=False)


@dataclass
class TmaPlan:
    rank: int
    box: tuple          # outermost first
    swizzle: str
    slab: int           # tile columns per box
    slabs: int
    bytes: int          # bytes one copy brings (all boxes)
    tile_rank: int = 2  # 1 for a one-dimensional tile (one row), else 2 (its rows x cols)


def _static(values) -> list | None:
    out = [constant_value(v) if not isinstance(v, int) else v for v in values]
    return None if any(v is None for v in out) else out


def tma_plan(copy) -> TmaPlan | None:
    """How a global -> shared copy runs as TMA loads, or a shared -> global copy as TMA
    stores; None when it cannot."""
    if copy.annotations.get("disable_tma"):
        return None
    src, dst = copy.src, copy.dst
    if is_shared(src.buffer.scope) and dst.buffer.scope == GLOBAL:
        src, dst = dst, src     # the global region and the shared tile, as for a load
    elif src.buffer.scope != GLOBAL or not is_shared(dst.buffer.scope):
        return None
    if not dt.same_storage(src.buffer.dtype, dst.buffer.dtype) or src.buffer.dtype.bits < 8:
        return None
    shape = _static(src.buffer.shape)
    extents = _static_extents(src)
    tile = dst.buffer.static_shape()
    if shape is None or extents is None or not 2 <= len(shape) <= MAX_RANK:
        return None
    if max(shape) > 2**31 - 1:   # a box's coordinates are signed 32-bit
        return None
    # A ring's versions of a tile add a leading dimension (warp_specialize notes the rank the
    # tile had); a one-dimensional tile [n] is one row of n.
    rank = min(2, copy.annotations.get(TILE_RANK, len(tile)))
    rows, cols = (tile[-2], tile[-1]) if rank == 2 else (1, tile[-1])
    dst_ext = _static_extents(dst)
    if dst_ext is None or [e for e in dst_ext if e != 1] != [e for e in (rows, cols) if e != 1]:
        return None
    if any(constant_value(s) != 0 for s in dst.starts[-rank:]):
        return None
    esize = src.buffer.dtype.bits // 8
    if extents[-1] != cols or any(math.prod(shape[d + 1:]) * esize % 16
                                  for d in range(len(shape) - 1)):
        return None
    outer = [d for d, e in enumerate(extents[:-1]) if e != 1]
    if (rows == 1 and outer) or (rows > 1 and (len(outer) != 1 or extents[outer[0]] != rows)):
        return None
    slabs = column_slabs(rows, cols, src.buffer.dtype.bits, rank == 2)
    if slabs is None:
        return None
    slab, swizzle = slabs
    box = [1] * len(shape)
    box[-1] = slab
    if outer:
        box[outer[0]] = rows
    if max(box) > MAX_BOX:
        return None
    return TmaPlan(len(shape), tuple(box), swizzle, slab, cols // slab, rows * cols * esize,
                   rank)


def column_slabs(rows: int, cols: int, bits: int, swizzled: bool = True) -> tuple | None:
    """(columns a box loads, swizzle mode) of a rows x cols shared tile filled by TMA boxes,
    or None: a tile stored with a W-byte swizzle is W-byte column slabs, each one box; an
    unswizzled one (or a one-row tile, `swizzled` False) is one box, whose shared address must
    be 128-byte aligned (plan_shared_memory aligns the tile), and so must every version of it
    in a ring."""
    esize = bits // 8
    mode = swizzle_mode_for(rows, cols, bits) if swizzled else None
    if mode is not None:
        return atom_row_bytes(mode) // esize, mode
    if cols * esize % 16 or rows * cols * esize % TMA_SMEM_ALIGN:
        return None
    return cols, "none"


def _static_extents(region):
    extents = region.static_extents()
    return None if extents is None else list(extents)


def tensor_map(ctx, buffer: Buffer, plan, im2col: tuple | None = None) -> TensorMapVar:
    """The kernel's tensor map of `buffer` for a TmaPlan's boxes, or with `im2col` for an
    Im2colPlan's loads (box: pixels x channels)."""
    box = plan.box if im2col is None else (plan.rows, plan.slab)
    key = (id(buffer), box, plan.swizzle, im2col)
    found = ctx.tensor_maps.get(key)
    if found is None:
        found = TensorMapVar(f"{buffer.name}_tma", dt.handle, buffer=buffer, box=box,
                             swizzle=plan.swizzle, im2col=im2col)
        ctx.tensor_maps[key] = found
    return found


def _box(ctx, tile, tensor, plan: TmaPlan, j: int):
    """(shared address, tensor coordinates outermost first) of box j of a copy between the
    shared region `tile` and the global region `tensor`: the j-th column slab of the tile."""
    starts = list(tile.starts)
    lead = starts[:len(starts) - plan.tile_rank] + [const(0)] * (plan.tile_rank - 1)
    offset = ctx.shared_offset(tile.buffer, lead + [const(j * plan.slab)])  # from row 0
    coords = [ctx.simplify(s) for s in tensor.starts]
    coords[-1] = ctx.simplify(coords[-1] + j * plan.slab)
    return address_of(ctx.flat(tile.buffer), offset), coords


def lower_tma_copy(op, ctx):
    """The TMA loads of one copy (issued by the one thread that runs it)."""
    plan = tma_plan(op)
    barrier = op.annotations[TMA_BARRIER]
    mbar = address_of(ctx.flat(barrier.buffer),
                      ctx.shared_offset(barrier.buffer, list(barrier.indices)))
    the_map = Call("address_of", (tensor_map(ctx, op.src.buffer, plan),), dt.handle)
    # A tile the blocks of a cluster share (tileops/cluster.py): box j is loaded by the block
    # of rank j % size and written into every block of the cluster.
    cluster = op.annotations.get(TMA_MULTICAST, 0)
    loads = []
    for j in range(plan.slabs):
        smem, coords = _box(ctx, op.dst, op.src, plan, j)
        if not cluster:
            name, args = hinted(op, TMA_LOAD.format(rank=plan.rank),
                                (smem, the_map, mbar, *reversed(coords)))
            loads.append(call_stmt(name, *args, span=op.span))
            continue
        load = call_stmt(TMA_LOAD_MULTICAST.format(rank=plan.rank), smem, the_map, mbar,
                         const((1 << cluster) - 1), *reversed(coords), span=op.span)
        mine = Call(CLUSTER_CTARANK.name, (), dt.dtype("uint32")) == const(j % cluster)
        loads.append(IfThenElse(mine, load, None, op.span))
    return seq(loads)


# Element types cp.reduce.async.bulk.tensor adds (the tensor map's type is the operand type).
ADDABLE = ("float16", "bfloat16", "float32", "int32", "uint32", "int64", "uint64")


def tma_add_unfit_reason(op, allowed: bool) -> str | None:
    """Why the tile-form T.atomic_add(..., use_tma=True) `op` cannot run as TMA stores that add
    (None when it can); `allowed` is whether the target and pass configs allow TMA stores."""
    if not allowed:
        return "TMA stores need sm_90a and are turned off otherwise (tl.disable_tma_lower / " \
               "tl.disable_tma_store)"
    if op.dst.buffer.dtype.name not in ADDABLE:   # (only T.atomic_add takes use_tma)
        return f"TMA adds {', '.join(ADDABLE)} elements, not {op.dst.buffer.dtype.name}"
    if not dt.same_storage(op.value.buffer.dtype, op.dst.buffer.dtype):
        return f"the tile {op.value.buffer.name} is {op.value.buffer.dtype.name} and " \
               f"{op.dst.buffer.name} is {op.dst.buffer.dtype.name}: TMA adds like to like"
    if tma_plan(as_copy(op)) is None:
        return f"the region of {op.dst.buffer.name} is not one TMA can address (static " \
               "contiguous shape, 16-byte row strides, the tile's rows x columns)"
    return None


def as_copy(op):
    """A tile-form atomic seen as the shared -> global copy whose boxes it moves."""
    from ....ir.tileop import Copy
    return Copy(op.value, op.dst, {}, op.span)


def is_tma_store(op) -> bool:
    """A shared -> global copy infer_instructions gave to TMA."""
    return op.annotations.get(INSTRUCTION) == "tma" and op.dst.buffer.scope == GLOBAL


def lower_tma_store(op, ctx, adds: bool = False):
    """The TMA stores of one copy, issued and committed by thread 0 (the tile was published
    to the async proxy by the barrier in front of the copy); adds: stores that add (a
    tile-form atomic add seen as a copy)."""
    plan = tma_plan(op)
    the_map = Call("address_of", (tensor_map(ctx, op.dst.buffer, plan),), dt.handle)
    stores = []
    for j in range(plan.slabs):
        smem, coords = _box(ctx, op.src, op.dst, plan, j)
        name, args = hinted(op, (TMA_STORE_ADD if adds else TMA_STORE).format(rank=plan.rank),
                            (the_map, smem, *reversed(coords)))
        stores.append(call_stmt(name, *args, span=op.span))
    stores.append(call_stmt(TMA_STORE_COMMIT.name, span=op.span))
    return IfThenElse(ctx.tx == const(0), seq(stores), None, op.span)
