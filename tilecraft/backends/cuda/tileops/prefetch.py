"""L2 prefetch of the tile a warp-specialized producer loads next, for tiles read from DRAM.

A global tile that at most STREAM_READERS blocks of the grid read (MLA decode's KV blocks: the
two head groups of one sequence read each) is in no block's path through L2 before its own
load: every load of it waits for DRAM. With a ring of D stages the producer issues the load of
iteration k + 1 only once the consumers release that stage, and the consumers then wait a whole
DRAM round trip for it. So, right after issuing iteration k's copies, the producer asks L2 for
iteration k + 1's tile (cp.async.bulk.prefetch.L2, one instruction for the tile's contiguous
bytes, no shared memory and no barrier): it is on its way while the stage is still being read.

On the H100 it made MLA decode (2 stages, one wave) faster, most at the shortest KV
(bench/mla_decode.md); skinny GEMMs whose A tiles one or two blocks read (8192 x 256 and
8192 x 512, K 8192) measured level (bench/gemm.md). Probes of the same kernel: two iterations
ahead ran slower than none, and TMA tensor prefetches (one per box) gained less than the one
bulk prefetch per tile. Tiles that more blocks read (attention's
K and V, a GEMM's operands) mostly come from L2 already and are left alone, as are tiles that are
not one contiguous byte range of their tensor or that do not lie wholly inside it at k + 1 (the
ragged last block: the prefetch would read past the tensor). Turned off with
tl.disable_l2_prefetch.
"""
from __future__ import annotations

import math

from ....ir.linear import constant_value
from ....analysis.counts import block_env
from ....analysis.l2model import distinct_groups
from ....errors import TileError
from ....ir.expr import address_of, const, logical
from ....ir.stmt import IfThenElse, call_stmt
from ....ir.visitor import substitute
from .lowering import uses_var
from ..intrinsics import PREFETCH_L2

STREAM_READERS = 2


def readers_per_tile(kernel, loop, copy) -> float | None:
    """How many blocks of the grid read each tile `copy` loads at the loop's first iteration
    (blocks over distinct tile origins), or None when the grid or the origins are not static."""
    start = constant_value(loop.start)
    if start is None:
        return None
    try:
        env, _ = block_env(kernel)
        env.env[id(loop.var)] = start
        starts = [env.eval(s) for s in copy.src.starts]
    except TileError:
        return None
    if not starts:
        return float(env.n)
    _, groups = distinct_groups(starts)
    return env.n / len(groups)


def contiguous_bytes(region) -> int | None:
    """The bytes of `region` when they are one contiguous range of its (row-major) tensor: all
    of every dimension inside the innermost one copied partly, one element of every dimension
    outside it; None otherwise. The range starts on 16 bytes, as the bulk prefetch
    needs, when each step of the partly copied dimension is a multiple of 16 bytes."""
    shape = region.buffer.static_shape()
    extents = region.static_extents()
    if shape is None or extents is None:
        return None
    extents = [int(e) for e in extents]
    partial = [d for d, (e, n) in enumerate(zip(extents, shape)) if e != n]
    outer = partial[-1] if partial else 0
    if any(e != n for e, n in zip(extents[outer + 1:], shape[outer + 1:])) or \
            any(e != 1 for e in extents[:outer]):
        return None
    es = region.buffer.dtype.bytes
    step = math.prod(shape[outer + 1:]) * es
    total = math.prod(extents) * es
    return total if step % 16 == 0 and total % 16 == 0 else None


def next_tile_prefetch(kernel, loop, copy):
    """`if (k + 1 < end && the tile at k + 1 is inside its tensor) tc::prefetch_l2(...)` for a
    TMA copy of the producer's loop that streams from DRAM, else None."""
    nbytes = contiguous_bytes(copy.src)
    if nbytes is None or not any(uses_var(s, loop.var) for s in copy.src.starts):
        return None
    readers = readers_per_tile(kernel, loop, copy)
    if readers is None or readers > STREAM_READERS:
        return None
    k_next = loop.var + 1
    starts = [substitute(s, {id(loop.var): k_next}) for s in copy.src.starts]
    cond = k_next < loop.start + loop.extent
    # Every dimension, not only those k moves: the ragged last block of the grid (N = 70 in
    # blocks of 64 rows) has rows past the tensor at every k.
    for s, e, n in zip(starts, copy.src.extents, copy.src.buffer.shape):
        cond = logical("and", cond, s + e <= n)
    fetch = call_stmt(PREFETCH_L2.name, address_of(copy.src.buffer, *starts), const(nbytes),
                      span=copy.span)
    return IfThenElse(cond, fetch, None, copy.span)
