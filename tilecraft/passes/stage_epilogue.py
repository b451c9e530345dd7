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
across tiles, so the staging tile is added only where shared memory has room for it beside
the ring. Measured on an H100 it lifted the wgmma GEMM by 2-8% of cuBLAS's speed
(bench/results/2026-11-24_gemm_hopper_staged_epilogue.md). On the mma.sync path it was mixed
(-8% to +4%, 2026-11-24_gemm_sm80_path_staged_epilogue.md), so it runs on sm_90a only. Turned
off with the pass config tl.disable_epilogue_staging.
"""
from __future__ import annotations

import dataclasses
import math

from ..ir.buffer import FRAGMENT, GLOBAL, Buffer, is_shared
from ..ir.stmt import Allocate, For, Kernel, SeqStmt, seq, stmts_of
from ..ir.tileop import Copy, Gemm
from ..ir.visitor import walk
from ..pass_config import PassConfigKey
from .warp_specialize import persistent_for


def _tile_bytes(buffer: Buffer) -> int:
    return math.prod(buffer.static_shape()) * buffer.dtype.bytes


def _ring_tiles(loop: For) -> dict:
    """{id: tile} of the shared tiles the pipelined loop copies into."""
    return {id(n.dst.buffer): n.dst.buffer for n in walk(loop.body)
            if isinstance(n, Copy) and is_shared(n.dst.buffer.scope)}


def _ring_bytes(loop: For) -> int:
    """Shared memory of the tiles the pipelined loop copies into, all their versions."""
    stages = max(1, int(loop.annotations.get("num_stages", 1) or 1))
    return sum(_tile_bytes(b) for b in _ring_tiles(loop).values()) * stages


def _spare_bytes(k: Kernel, loop: For, limit: int | None) -> int:
    """Shared memory left beside every tile of the kernel (the loop's ring at its depth), less
    room for the mbarriers and alignment."""
    if limit is None:
        return 1 << 30
    ring = _ring_tiles(loop)
    rest = sum(_tile_bytes(n.buffer) for n in walk(k.body)
               if isinstance(n, Allocate) and is_shared(n.buffer.scope) and
               id(n.buffer) not in ring)
    return limit - _ring_bytes(loop) - rest - 2048


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
        staged = Buffer(f"{s.src.buffer.name}_staged", shape, s.dst.buffer.dtype,
                        "shared.dyn", s.span)
        if _tile_bytes(staged) > budget:
            out.append(s)
            continue
        budget -= _tile_bytes(staged)
        whole = staged.region()
        allocs.append(Allocate(staged, s.span))
        out += [dataclasses.replace(s, dst=whole), dataclasses.replace(s, src=whole)]
    if not allocs:
        return k
    # Allocations stay in front of the loop, where warp_specialize and the planner look.
    at = max((i for i, s in enumerate(out[:last + 1]) if isinstance(s, Allocate)), default=-1)
    out = out[:at + 1] + allocs + out[at + 1:]
    return dataclasses.replace(k, body=seq(out))


def stage_epilogue(func, arch: str | None = None, configs: dict | None = None,
                   smem_limit: int | None = None):
    if arch != "sm_90a" or (configs or {}).get(PassConfigKey.TL_DISABLE_EPILOGUE_STAGING):
        return func
    def rebuild(s):
        if isinstance(s, Kernel):
            return _stage_kernel(s, persistent_for(s, configs, arch) is not None, smem_limit)
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s
    return dataclasses.replace(func, body=rebuild(func.body))
