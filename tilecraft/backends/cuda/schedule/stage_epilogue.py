"""stage_epilogue: a gemm accumulator written to global memory goes through shared memory.

`T.copy(C_local, C[by * block_M, bx * block_N])` straight from the accumulator fragment makes
each thread store the two neighbouring elements the MMA layout gave it: a warp's 4-byte stores
land in 8 rows, 16 bytes per row, so every store instruction touches eight half-used sectors
and the store queue throttles the epilogue. Written instead as

    T.copy(C_local, C_staged)                       # registers -> shared (swizzled tile)
    T.copy(C_staged, C[by * block_M, bx * block_N]) # shared -> global, 16 bytes per thread,
                                                    # a warp covering whole rows

the global stores are full, coalesced lines. The staging tile is only added where it costs no
shared memory: after the kernel's last T.Pipelined loop, in place of the loop's tiles, which
are dead by then (plan_shared_memory gives it their bytes; insert_barriers separates it from
their last reads). In a persistent kernel (tl.enable_persistent_tiles) the ring is live
across tiles, so the staging tile needs room of its own beside the ring; where the whole tile
does not fit (a 4-stage 128x256x64 GEMM: 192 KB of ring, 64 KB of tile) it is staged in 2 or
4 column bands through one band-sized tile, each band's store reading it before the next band
is written. Measured on an H100 it lifted the wgmma GEMM; on the mma.sync path it was mixed
(bench/gemm.md), so it runs on sm_90a only. Turned off with the pass config
tl.disable_epilogue_staging.
"""
from __future__ import annotations

import dataclasses
import math

from ....ir.linear import simplify
from ....ir.buffer import FRAGMENT, GLOBAL, Buffer, BufferRegion, is_shared
from ....ir.expr import const
from ....ir.stmt import Allocate, For, Kernel, seq, stmts_of
from ....ir.tileop import Copy, Gemm
from ....ir.visitor import map_kernels, walk
from ....pass_config import PassConfigKey
from ....target import arch_of
from .persistence import persistent_for, ring_tiles
from ....ir.annotations import EPILOGUE_STAGING, NUM_STAGES


def _tile_bytes(buffer: Buffer) -> int:
    return math.prod(buffer.static_shape()) * buffer.dtype.bytes


def _ring_bytes(loop: For) -> int:
    """Shared memory of the tiles the pipelined loop copies into, all their versions."""
    stages = max(1, int(loop.annotations.get(NUM_STAGES, 1) or 1))
    return sum(_tile_bytes(b) for b in ring_tiles(loop).values()) * stages


def _spare_bytes(k: Kernel, loop: For, limit: int | None) -> int:
    """Shared memory left beside every tile of the kernel (the loop's ring at its depth), less
    room for the mbarriers and alignment."""
    if limit is None:
        return 1 << 30
    ring = ring_tiles(loop)
    rest = sum(_tile_bytes(n.buffer) for n in walk(k.body)
               if isinstance(n, Allocate) and is_shared(n.buffer.scope) and
               id(n.buffer) not in ring)
    return limit - _ring_bytes(loop) - rest - 2048


def _parts_that_fit(shape, elem_bytes: int, budget: int, persistent: bool) -> int | None:
    """Into how many column bands the staging goes: 1 where the whole tile fits the budget;
    in a persistent kernel, else the fewest bands (2 or 4, each a multiple of 16 columns: the
    accumulator registers one stmatrix stores) that fit; None where nothing fits."""
    whole = math.prod(shape) * elem_bytes
    if whole <= budget:
        return 1
    if not persistent or len(shape) != 2:
        return None
    return next((parts for parts in (2, 4) if shape[-1] % (16 * parts) == 0 and
                 whole // parts <= budget), None)


def _column_band(region: BufferRegion, first: int, width: int) -> BufferRegion:
    """The columns first .. first + width - 1 of a 2-d region."""
    (rows, (start, _)) = region.ranges[:-1], region.ranges[-1]
    return dataclasses.replace(region, ranges=(*rows, (simplify(start + first), const(width))))


def _stage_kernel(k: Kernel, persistent: bool, limit: int | None) -> Kernel:
    stmts = list(stmts_of(k.body))
    loops = [i for i, s in enumerate(stmts) if isinstance(s, For) and s.kind == "pipelined"]
    if not loops:
        return k
    last = loops[-1]
    # In a persistent kernel the producer refills the ring for the next tile during this
    # one's epilogue, so the staging tile needs bytes of its own.
    budget = _spare_bytes(k, stmts[last], limit) if persistent else _ring_bytes(stmts[last])
    accumulators = {id(n.C.buffer) for n in walk(k.body) if isinstance(n, Gemm)}
    allocs, out = [], []
    for i, s in enumerate(stmts):
        if i <= last or not (isinstance(s, Copy) and s.src.buffer.scope == FRAGMENT and
                             s.dst.buffer.scope == GLOBAL and id(s.src.buffer) in accumulators):
            out.append(s)
            continue
        shape = s.src.static_extents()
        if shape is None:
            out.append(s)
            continue
        parts = _parts_that_fit(shape, s.dst.buffer.dtype.bytes, budget, persistent)
        if parts is None:
            out.append(s)
            continue
        band = shape[-1] // parts
        staged = Buffer(f"{s.src.buffer.name}_staged", (*shape[:-1], band),
                        s.dst.buffer.dtype, "shared.dyn", s.span)
        budget -= _tile_bytes(staged)
        whole = staged.region()
        allocs.append(Allocate(staged, s.span))
        for part in range(parts):
            src, dst = (_column_band(r, part * band, band) if parts > 1 else r
                        for r in (s.src, s.dst))
            out += [dataclasses.replace(s, src=src, dst=whole),
                    dataclasses.replace(s, src=whole, dst=dst)]
    if not allocs:
        return k
    # Allocations stay in front of the loop, where warp_specialize and the planner look.
    at = max((i for i, s in enumerate(out[:last + 1]) if isinstance(s, Allocate)), default=-1)
    out = out[:at + 1] + allocs + out[at + 1:]
    names = (*k.attrs.get(EPILOGUE_STAGING, ()), *(a.buffer.name for a in allocs))
    return dataclasses.replace(k, body=seq(out), attrs={**k.attrs, EPILOGUE_STAGING: names})


def stage_epilogue(func, target=None, configs: dict | None = None,
                   smem_limit: int | None = None):
    if arch_of(target) != "sm_90a" or (configs or {}).get(PassConfigKey.TL_DISABLE_EPILOGUE_STAGING):
        return func
    return map_kernels(func, lambda k: _stage_kernel(
        k, persistent_for(k, configs, target) is not None, smem_limit))
