"""The cost of a free layout choice (infer_layouts' free phase, paper appendix E): what the
layouts a seed gave a group of fragments cost in registers, memory instructions, cache lines,
bytes fetched and reduction steps, or None where a T.Parallel nest would write elements its
threads do not hold or a reduction would leave its result laid out otherwise."""
from __future__ import annotations

import math

import numpy as np

from .. import layout as lay
from ..errors import TileError
from ..ir.buffer import FRAGMENT
from ..ir.expr import Binary, BufferLoad, Call, Cast, Select, Unary, Var
from ..ir.linear import structural_key
from ..ir.stmt import BufferStore, For
from ..ir.tileop import Copy, Reduce
from ..ir.visitor import children, walk
from ..layout.derive import same_layout
from ..layout.layout import evaluate as lay_evaluate
from .parallel_nests import fragments_of, nest_extents, nest_vars

# --- the cost of a free choice --------------------------------------------------------------
# In bytes of a thread's registers: each fragment costs what it keeps per thread; each memory
# instruction, and each 128-byte line a warp instruction touches, a register's worth (4); the
# global bytes a warp's accesses bring, its share of them; a shuffle step of a reduction an
# instruction per register (a step across warps, through shared memory, eight), and a reduction
# that crosses warps its two block barriers besides: every warp of the block waits there for
# the slowest, so loads another warp could have in flight stop being issued (_BARRIER each).
_INSTRUCTION = 4
_WARP_STEP = 8
_BARRIER = 32


def free_cost(inference, component) -> float | None:
    """The cost of the layouts a free choice gave `component` and the ops around it; None
    where some T.Parallel nest would write elements its threads do not hold."""
    m = inference.map
    ids = {id(b) for b in component}
    cost = 0.0
    for b in component:
        layout = m.buffer(b)
        cost += layout.locals_per_thread * b.dtype.bytes
    for op in inference.ops:
        if isinstance(op, Copy):
            frag = next((r for r in (op.src, op.dst) if r.buffer.scope == FRAGMENT), None)
            other = op.dst if frag is op.src else op.src
            if frag is not None and id(frag.buffer) in ids and other.buffer.scope == "global" \
                    and tuple(m.buffer(frag.buffer).shape) == tuple(frag.buffer.static_shape()):
                cost += _copy_cost(m.buffer(frag.buffer), frag.buffer.dtype.bytes,
                                   inference.T)
        elif isinstance(op, Reduce) and id(op.src.buffer) in ids and m.has(op.dst.buffer):
            if not _reduces_into(m.buffer(op.src.buffer), m.buffer(op.dst.buffer), op.dim):
                return None   # the result laid out otherwise than the reduction leaves it
            cost += _reduce_cost(m.buffer(op.src.buffer), m.buffer(op.dst.buffer), op.dim)
        elif isinstance(op, For) and id(op) in m.loops and \
                any(id(b) in ids for b in fragments_of(op)):
            extra = _loop_cost(m, op, inference.T)
            if extra is None:
                return None
            cost += extra
    return cost


def _traffic(rows, cols, nbytes, live) -> tuple:
    """Accesses [thread, instruction] at tile (row key, column) of elements of nbytes: the
    128-byte lines each warp instruction touches, summed and averaged over the warps (what
    the load unit works through), and the distinct 32-byte sectors each warp touches over
    all of them, in bytes per thread (what comes from memory)."""
    warps = -(-rows.shape[0] // 32)
    pad = warps * 32 - rows.shape[0]
    if pad:
        rows, cols, live = (np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)])
                            for a in (rows, cols, live))
    byte = rows * (1 << 30) + cols * nbytes
    lines = np.where(live, byte // 128, -1).reshape(warps, 32, -1)
    sectors = np.where(live, byte // 32, -1).reshape(warps, 32, -1)
    per_instruction, footprint = 0, 0
    for w in range(warps):
        for k in range(lines.shape[2]):
            col = lines[w, :, k]
            per_instruction += len(np.unique(col[col >= 0]))
        every = sectors[w].reshape(-1)
        footprint += len(np.unique(every[every >= 0]))
    return per_instruction / warps, footprint * 32 / (warps * 32)


def _copy_cost(layout, nbytes: int, threads: int) -> float:
    """A global <-> fragment copy: one access per run of registers a vector moves (up to 16
    bytes), the lines they touch and the bytes they bring."""
    v = lay.vector_runs(layout, max(1, 16 // nbytes))
    held = lay.slot_elements(layout)[:, ::v]
    live = held >= 0
    rows, cols = np.divmod(np.where(live, held, 0), layout.shape[-1])
    instructions = int(live.sum(axis=1).max()) if live.size else 0
    lines, footprint = _traffic(rows, cols, nbytes, live)
    return (instructions + lines) * _INSTRUCTION + footprint


def _reduces_into(src, dst, dim: int) -> bool:
    """The reduction of src along dim leaves its result laid out as dst."""
    try:
        derived = lay.reduce_fragment(src, dim)
        if tuple(derived.shape) != tuple(dst.shape):
            derived = derived.reshape(tuple(dst.shape))
    except TileError:
        return False
    return same_layout(derived, dst)


def _reduce_cost(src, dst, dim: int) -> float:
    """Shuffle steps of a reduction: one per output register and thread bit its rows span,
    and the block barriers of a step across warps."""
    table = src.table()[..., 0, 0]
    table = np.moveaxis(table, dim, -1).reshape(-1, table.shape[dim])
    bits = 0
    for row in table:
        bits |= int(np.bitwise_or.reduce(row ^ row[0]))
    lane = bin(bits & 31).count("1")
    warp = bin(bits >> 5).count("1")
    barriers = 2 * _BARRIER if warp else 0
    return (dst.locals_per_thread * (lane + _WARP_STEP * warp) + barriers) * _INSTRUCTION


def _loop_cost(m, loop, threads: int) -> float | None:
    """A T.Parallel nest under its layout: the sectors of its global accesses (one element per
    access), and a penalty for fragment elements it reads from other threads (a round trip
    through shared memory); None if it would write elements other threads hold."""
    layout = m.loop(loop)
    loop_vars, extents = nest_vars(loop), nest_extents(loop)
    held = lay.slot_elements(layout)
    live = held >= 0
    idx = np.unravel_index(np.where(live, held, 0), extents)
    env = {id(v): i for v, i in zip(loop_vars, idx)}
    cost = 0.0
    seen = set()
    for n in walk(loop):
        if not isinstance(n, (BufferLoad, BufferStore)):
            continue
        key = (id(n.buffer), structural_key(tuple(n.indices)))
        if key in seen:
            continue
        seen.add(key)
        values = _index_values(n.indices, env, live.shape)
        if values is None:
            continue
        if n.buffer.scope == "global":
            lead = np.zeros(live.shape, np.int64)
            for x in values[:-1]:
                lead = lead * 4099 + x
            # One access per element, where the same address repeats in a thread only once
            # (the loads are the same expression after unrolling).
            key = np.where(live, lead * (1 << 20) + values[-1], -1)
            distinct = max(len(np.unique(r[r >= 0])) for r in key)
            _, footprint = _traffic(lead, values[-1], n.buffer.dtype.bytes, live)
            cost += distinct * _INSTRUCTION + footprint
        elif n.buffer.scope == FRAGMENT and m.has(n.buffer):
            frag = m.buffer(n.buffer)
            shape = frag.shape
            if len(values) != len(shape) or any(
                    ((x < 0) | (x >= e))[live].any() for x, e in zip(values, shape)):
                continue
            flat = np.ravel_multi_index(tuple(np.where(live, x, 0) for x in values), shape)
            owners = frag.table()[..., 0].reshape(math.prod(shape), -1)
            runner = np.arange(layout.num_threads)[:, None] + layout.thread_offset
            mine = (owners[flat] == runner[..., None]).any(axis=-1) | ~live
            if not mine.all():
                if isinstance(n, BufferStore):
                    return None
                cost += n.buffer.dtype.bytes * 8 * int((~mine).sum(axis=1).max())
    # The nest's arithmetic, done by its busiest thread: equal for every layout that deals the
    # iterations out evenly, larger for one that leaves threads idle (its runs longer than
    # the tile has threads for) or repeats iterations in several threads.
    return cost + int(live.sum(axis=1).max()) * _arithmetic(loop) * _INSTRUCTION


def _arithmetic(loop) -> int:
    """Operations an iteration of the nest computes: the nodes of its stored values (their
    indices excepted), at least one."""
    def ops(e) -> int:
        if isinstance(e, BufferLoad):
            return 0
        own = isinstance(e, (Binary, Unary, Select, Cast, Call))
        return own + sum(ops(c) for c in children(e))
    return max(1, sum(ops(store.value) for store in walk(loop) if isinstance(store, BufferStore)))


def _index_values(indices, env, shape):
    """Index expressions evaluated at every (thread, register) of a loop layout, the loop
    variables bound (env: id(var) -> values) and every other variable taken as 0; None for
    indices loaded from memory or called."""
    bindings = {}
    for i in indices:
        for x in walk(i):
            if isinstance(x, (BufferLoad, Call)):
                return None
            if isinstance(x, Var):
                bindings[x] = env.get(id(x), np.int64(0))
    try:
        return [np.broadcast_to(x, shape).astype(np.int64)
                for x in lay_evaluate(list(indices), bindings, shape)]
    except Exception:
        return None
