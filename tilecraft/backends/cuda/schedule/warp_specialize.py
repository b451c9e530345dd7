"""warp_specialize: a T.Pipelined loop fed by TMA, with a producer warpgroup (sm_90a).

infer_pipeline has split the loop's body into statements run ahead (stage < last: the copies
from global into shared memory) and the rest. When every statement ahead is a copy TMA can do
(tileops/tma.py), the kernel is rewritten for T consumer threads plus one producer warpgroup
of 128 threads appended after them (thread indices T .. T + 127, so every layout inferred for
the T consumer threads stays valid):

    allocations; full[D], empty[D] mbarriers in shared memory (D versions of each tile)
    thread 0: init full[s] (1 arrival + the TMA bytes), empty[s] (one arrival per consumer
              warp); barrier_all
    if producer thread:                       setmaxnreg.dec (when registers are shared)
        if the producer's first thread:
            for k in loop: s = k % D, round r = k // D
                wait empty[s] for parity (r & 1) ^ 1      (round 0 passes at once)
                arrive on full[s] expecting the bytes of all copies; issue them into version s
    else:                                     setmaxnreg.inc
        the statements before the loop
        for k in loop: wait full[s] for parity r & 1; the body on version s; each warp arrives
                       on empty[s]
        the statements after the loop

With tl.enable_producer_preload, copies from global into shared memory in front of the loop
that TMA can do (the query tile of attention and MLA) are issued by the producer too, before
the loop's first stage, completing on an mbarrier of their own (tma_ready) that the consumers
wait for where the copies were. On an H100 it made causal attention faster and non-causal
attention slower (bench/mha_fwd.md), so it is the default only where persistence is not: for
one-wave grids (producer_preload_for).

The producer runs up to D iterations ahead; each consumer warp releases a version only after
all its lanes' last reads of it in program order (a wgmma batch is waited for inside T.gemm), so the
producer never overwrites a tile being read. The loop's trip count is the same expression in
both roles, so 0, 1 or fewer than D iterations need nothing special. Consumer-only barriers
become named barriers over T threads (finalize_barriers). Turned off by the pass configs
tl.disable_warp_specialized or tl.disable_tma_lower; loops that do not qualify keep the
cp.async pipeline (pipeline_loops), as do kernels of per-thread code (ir/thread_varying.py).

Persistent kernels (pass config tl.enable_persistent_tiles; unset, the default for loops with
two or more gemms and for GEMMs, persistent_for): the launch has one block per SM (or the
number given), and each role runs its part inside a loop over the tiles of the grid (in rounds
of gridDim.x tiles, serpentine: emulator.machine.tiles_of_block; the code generator binds the
block variables per tile). A per-thread count of the ring's rounds, advanced by each tile's
trip count in both roles, keeps the stage and parity going across tiles, so the producer loads
the next tile's first stages while the consumers finish the last one (its epilogue) instead of
a new block starting cold. The tiles the consumers reload per tile (attention's Q) and the
output tile then share bytes (plan_shared_memory), and the epilogue's staging tile gets its
own where it fits beside the ring. Not combined with clusters.

Clusters (tileops.cluster_plan): when pairs of neighbouring blocks load some of the same tiles
in lock step (a GEMM's B tile for two vertically adjacent output tiles), the blocks run as
clusters of two along that grid axis. Each block issues half of such a tile's TMA boxes,
multicast into both blocks' shared memory (L2 serves the tile once); `full` still expects every
byte of the stage in each block, and `empty` counts the consumer warps of both blocks (each
warp arrives in both), because a producer now also writes into its peer's versions. A cluster
barrier after the mbarriers are initialized and another before the blocks exit keep remote
signals to barriers that exist. Asked for with tl.enable_tma_multicast: on an H100 it measured
level with separate loads for the GEMM, attention and MLA examples (the tensor cores, not L2,
bind them), so it is not the default.
"""
from __future__ import annotations

import dataclasses

from ....ir import dtypes as dt
from ....ir.buffer import GLOBAL, LOCAL_VAR, Buffer
from ....ir.expr import BufferLoad, Call, Var, address_of, const, minmax
from ....ir.stmt import (PERSISTENT_TILES, Allocate, BufferStore, For, IfThenElse, Kernel,
                       call_stmt, seq, stmts_of)
from ....ir.linear import constant_value
from ....ir.thread_varying import ThreadVarying
from ....ir.tileop import Copy
from ....ir.visitor import buffers_used, map_kernels, walk
from ....pass_config import PassConfigKey
from ....passes.parallel_nests import gather_targets
from ..tileops.cluster import cluster_plan
from ..tileops.prefetch import next_tile_prefetch
from ..tileops.tma import tma_plan
from ..tileops.tma_im2col import im2col_plan
from ....target import arch_of
from .persistence import attention_like, persistent_for, producer_preload_for
from .pipeline_loops import Reallocate, Versioned, check_unversioned, schedule_of
from ....ir.annotations import (CLUSTER_DIMS, CONSUMER_REGISTER_COUNT, IM2COL_COL, IM2COL_ROW,
                                NUM_STAGES, PERSISTENT_BLOCKS, PIPELINE_GUARD, PIPELINE_ORDER,
                                PRODUCER_REGISTER_COUNT, PRODUCER_THREADS, REGISTER_REALLOC,
                                SCHEDULED, TILE_RANK, TMA_BARRIER, TMA_MULTICAST, TMA_TILES,
                                WARP_SPECIALIZED)
from ..intrinsics import (BARRIER_ALL, CLUSTER_SYNC, FENCE_BARRIER_INIT, IS_BLOCK_LEADER,
                          IS_PRODUCER_LEADER, IS_PRODUCER_THREAD, MBARRIER_ARRIVE_EXPECT_TX,
                          MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER, MBARRIER_INIT,
                          MBARRIER_WAIT_PARITY, SETMAXNREG_DEC, SETMAXNREG_INC)

PRODUCER_THREAD_COUNT = 128   # a warpgroup: setmaxnreg moves registers a warpgroup at a time
PRODUCER_WARP = 32            # the producer when no registers move: one warp issues every load
PRODUCER_REGISTERS = 40
REGISTER_FILE = 65536


def _cond(name: str, *args):
    return Call(name, tuple(args), dt.dtype("bool"))


def _plan_loop(loop: For, keep_one_iteration: bool = False) -> dict | None:
    """{index of a statement run ahead: its TMA plan} when every statement ahead is a copy TMA
    can do (the loop qualifies for warp specialization), else None."""
    if loop.kind != "pipelined" or loop.annotations.get(NUM_STAGES, 0) < 2 or \
            PIPELINE_ORDER not in loop.annotations:
        return None
    trips = constant_value(loop.extent)
    if trips is not None and trips < 2 and not keep_one_iteration:
        # One iteration of a GEMM's loop has nothing to overlap: a producer warpgroup would
        # only take the registers of blocks the SM could otherwise hold (a 1x1 convolution
        # over 64 channels runs one k-step). Kept where the producer does more: the next
        # tile's loads of a persistent kernel, multicast to a cluster, attention's preloads.
        return None
    if PIPELINE_GUARD in loop.annotations:
        # Tiles the guard skips: the producer's ring would have to pass them too; such a loop
        # keeps the cp.async pipeline, where a skipped tile's copy group is simply empty.
        return None
    body = list(stmts_of(loop.body))
    _, stages = schedule_of(loop)
    last = max(stages)
    ahead = {i: _load_plan(body[i]) for i, st in enumerate(stages) if st < last}
    if not ahead or any(plan is None for plan in ahead.values()):
        return None
    if _reads_block_state(loop, [body[i] for i in ahead]):
        return None
    return ahead


def _load_plan(stmt):
    """The TMA plan of a statement run ahead: a tile copy's boxes, or the im2col loads of
    T.c2d_im2col's nest; None when TMA cannot do it."""
    if isinstance(stmt, Copy):
        return tma_plan(stmt)
    return im2col_plan(stmt)


def _loaded_tile(stmt) -> Buffer:
    """The shared tile a statement run ahead fills (an im2col nest is a one-tile gather)."""
    if isinstance(stmt, Copy):
        return stmt.dst.buffer
    return gather_targets(stmt)[0]


def _load_coordinates(stmt) -> list:
    """The expressions that say where a statement run ahead loads from."""
    if isinstance(stmt, Copy):
        return [x for start, extent in stmt.src.ranges for x in (start, extent)]
    return [stmt.annotations[IM2COL_ROW], stmt.annotations[IM2COL_COL]]


def _reads_block_state(loop: For, copies: list) -> bool:
    """Whether the loop's bounds or the regions its copies ahead load read memory of the block
    (shared tiles, variables, registers) rather than kernel arguments: a list of tiles the
    block compacted before the loop, a count it kept. The producer warp computes those on its
    own while the consumers run the code in front of the loop, so it would read them before
    they are written; such a loop keeps the cp.async pipeline, in which every thread runs that
    code first."""
    exprs = [loop.start, loop.extent]
    exprs += [x for c in copies for x in _load_coordinates(c)]
    return any(isinstance(n, BufferLoad) and n.buffer.scope != GLOBAL
               for e in exprs for n in walk(e))


def launch_registers(threads: int) -> int:
    """Registers a thread of a block of `threads` gets at launch, where the block takes the
    whole register file (__launch_bounds__(threads, 1)): its share, in steps of 8."""
    return min(255, REGISTER_FILE // threads) // 8 * 8


def consumer_registers(threads: int) -> int | None:
    """setmaxnreg for the consumers when the block's register file is what limits them (3+
    warpgroups): what the producer gives back, spread over the consumer threads. setmaxnreg
    moves registers only within what the block was launched with, in whole steps of 8 a
    thread (640 threads get 96 each, 61440 of the 65536): asking for more than that holds
    makes setmaxnreg.inc wait forever."""
    total = threads + PRODUCER_THREAD_COUNT
    if total < 384:
        return None
    pool = launch_registers(total) * total
    share = (pool - PRODUCER_THREAD_COUNT * PRODUCER_REGISTERS) // threads
    return min(240, share // 8 * 8)


class _Specializer:
    def __init__(self, kernel: Kernel, multicast: bool = True, persistent: int | None = None,
                 preload: bool = False, prefetch: bool = True):
        self.kernel = kernel
        self.preload = preload
        self.prefetch = prefetch
        self.T = kernel.num_threads
        self.multicast = multicast
        self.persistent = persistent
        self.cluster = None
        self.rounds = None   # the count of iterations of earlier tiles (persistent kernels)

    def run(self):
        stmts = list(stmts_of(self.kernel.body))
        keep = self.persistent is not None or self.multicast or attention_like(self.kernel)
        plans = {i: p for i, p in ((i, _plan_loop(s, keep) if isinstance(s, For) else None)
                                   for i, s in enumerate(stmts)) if p}
        nested = [n for n in walk(self.kernel.body) if isinstance(n, For) and
                  n.kind == "pipelined" and not any(n is stmts[i] for i in plans)]
        if len(plans) != 1 or len(self.kernel.threads) != 1 or \
                any(_plan_loop(n, keep) for n in nested):
            return self.kernel
        (at, ahead), = plans.items()
        allocs = [s for s in stmts[:at] if isinstance(s, Allocate)]
        before = [s for s in stmts[:at] if not isinstance(s, Allocate)]
        after = stmts[at + 1:]
        loop = stmts[at]
        if self.multicast:
            self.cluster = cluster_plan(self.kernel, loop, ahead)
        tiled = self.persistent is not None and not self.cluster
        if tiled:
            # A count, never negative: the stage and parity taken from it stay plain % and /.
            self.rounds = Buffer("tc_rounds", (1,), dt.int32, LOCAL_VAR, loop.span,
                                 value_bounds=(0, 2**31 - 1))
            allocs += [Allocate(self.rounds, loop.span),
                       BufferStore(self.rounds, (const(0),), const(0), loop.span)]
        preloads = self.preloads(before) if self.preload and not tiled else []
        ready = Buffer("tma_ready", (1,), dt.dtype("uint64"), "shared", loop.span) \
            if preloads else None
        producer, consumer, versions, barriers = self.split(loop, ahead, preloads, ready)
        if preloads:
            # The consumers wait for the preloaded tiles where the first of them was loaded.
            moved, first = {id(c) for c in preloads}, preloads[0]
            wait = call_stmt(MBARRIER_WAIT_PARITY.name, address_of(ready, const(0)), const(0),
                             span=loop.span)
            before = [wait if s is first else s for s in before
                      if s is first or id(s) not in moved]
        work = before + [consumer] + after
        if tiled:
            work = [self.tile_loop(work + [self.advance(loop)], loop.span)]
        leave = [call_stmt(CLUSTER_SYNC.name, span=loop.span)] if self.cluster else []
        body = seq(allocs + barriers + [IfThenElse(
            _cond(IS_PRODUCER_THREAD.name, const(self.T)), producer,
            seq(self.grow() + work), loop.span)] + leave)
        body = Reallocate(versions).visit(body)
        check_unversioned(body, versions)
        attrs = {**self.kernel.attrs, PRODUCER_THREADS: self.producer_threads(),
                 TMA_TILES: {id(v) for v in versions.values()}}
        if self.cluster:
            attrs[CLUSTER_DIMS] = self.cluster.dims
        if tiled:
            attrs[PERSISTENT_BLOCKS] = self.persistent
        return dataclasses.replace(self.kernel, body=body, attrs=attrs)

    @staticmethod
    def preloads(before: list) -> list:
        """The copies from global into shared memory in front of the loop that TMA can do
        (attention's and MLA's query tiles) and that nothing before them touches: the
        producer issues them before the loop's first stage, on a barrier of their own. Not in
        persistent kernels, where the next tile's load would need the consumers to release the
        last one."""
        touched, found = set(), []
        for s in before:
            if isinstance(s, Copy) and id(s.dst.buffer) not in touched and \
                    tma_plan(s) is not None:
                found.append(s)
            touched.update(id(b) for b in buffers_used(s))
        return found

    def tile_loop(self, body: list, span):
        """`body` once per tile of the launch grid this block is given (tiles blockIdx.x,
        blockIdx.x + gridDim.x, ...), with the block variables bound to the tile's coordinates
        (T.use_swizzle's rasterization included) by the code generator and the emulator."""
        tiles = const(1)
        for extent in self.kernel.grid:
            tiles = tiles * extent
        return For(Var("tc_tile", dt.int32), const(0), tiles, "serial", seq(body),
                   {PERSISTENT_TILES: True}, span)

    def advance(self, loop: For):
        """The pipelined loop's iterations added to the count of rounds: the next tile goes on
        in the ring where this one stopped, in both roles."""
        done = BufferLoad(self.rounds, (const(0),))
        trips = minmax("max", loop.extent, const(0))
        return BufferStore(self.rounds, (const(0),), done + trips, loop.span)

    def consumer_regs(self) -> int | None:
        """setmaxnreg for the consumers, None for no register moving: what the user asked
        (T.annotate_consumer_reg_alloc, T.disable_warp_group_reg_alloc), else the share of
        the register file when it limits them."""
        attrs = self.kernel.attrs
        if attrs.get(REGISTER_REALLOC) is False:
            return None
        return attrs.get(CONSUMER_REGISTER_COUNT) or consumer_registers(self.T)

    def producer_threads(self) -> int:
        """A warpgroup where the consumers take registers from the producer (setmaxnreg acts
        on whole warpgroups), else one warp: a single thread issues the loads, and the three
        idle warps of a warpgroup would hold registers and thread slots that keep a second
        block of one consumer warpgroup off the SM."""
        return PRODUCER_THREAD_COUNT if self.consumer_regs() is not None else PRODUCER_WARP

    def grow(self):
        regs = self.consumer_regs()
        return [] if regs is None else [call_stmt(SETMAXNREG_INC.format(regs=regs))]

    def split(self, loop: For, ahead: dict, preloads: list = (), ready: Buffer | None = None):
        body = list(stmts_of(loop.body))
        order, stages = schedule_of(loop)
        num = loop.annotations[NUM_STAGES]
        depth = max(num, max(stages) + 1)
        versions = {}
        for i in ahead:
            b = _loaded_tile(body[i])
            versions.setdefault(id(b), Buffer(b.name, (depth,) + tuple(b.shape), b.dtype,
                                              b.scope, b.span))
        issue = sorted(range(len(body)), key=lambda i: order[i])
        rest = [i for i in issue if i not in ahead]
        groups = _barrier_groups(body, issue, ahead, rest)
        u64 = dt.dtype("uint64")
        slots = depth * len(groups)
        full = Buffer("tma_full", (slots,), u64, "shared", loop.span)
        empty = Buffer("tma_empty", (slots,), u64, "shared", loop.span)
        init = [call_stmt(MBARRIER_INIT.name, address_of(full, const(s)), const(1)) for s in
                range(slots)]
        blocks = self.cluster.size if self.cluster else 1
        init += [call_stmt(MBARRIER_INIT.name, address_of(empty, const(s)),
                           const(self.T // 32 * blocks)) for s in range(slots)]
        init.append(call_stmt(FENCE_BARRIER_INIT.name))
        preload = []
        if ready is not None:
            signal = address_of(ready, const(0))
            init.insert(0, call_stmt(MBARRIER_INIT.name, signal, const(1)))
            note = {SCHEDULED: True, TMA_BARRIER: BufferLoad(ready, (const(0),))}
            preload = [call_stmt(MBARRIER_ARRIVE_EXPECT_TX.name, signal,
                                 const(sum(tma_plan(c).bytes for c in preloads)))] + \
                [dataclasses.replace(c, annotations={**c.annotations, **note}) for c in preloads]
        barriers = [Allocate(b, loop.span) for b in (full, empty, ready) if b is not None] + [
                    IfThenElse(_cond(IS_BLOCK_LEADER.name), seq(init), None, loop.span),
                    call_stmt(CLUSTER_SYNC.name if self.cluster else BARRIER_ALL.name,
                              span=loop.span)]
        k = loop.var
        step = k - loop.start
        if self.rounds is not None:
            step = BufferLoad(self.rounds, (const(0),)) + step
        stage, parity = step % depth, (step // depth) % 2

        def slot(g):
            return stage if g == 0 else const(g * depth) + stage
        produce = []
        for g, group in enumerate(groups):
            copies = []
            total = 0
            for i in group.copies:
                copy = Versioned(versions, stage).visit(body[i])
                total += ahead[i].bytes
                notes = {TMA_BARRIER: BufferLoad(full, (slot(g),)), SCHEDULED: True,
                         TILE_RANK: len(_loaded_tile(body[i]).shape)}
                if self.cluster and i in self.cluster.shared:
                    notes[TMA_MULTICAST] = self.cluster.size
                copies.append(dataclasses.replace(copy, annotations={**copy.annotations,
                                                                     **notes}))
            fetch = (next_tile_prefetch(self.kernel, loop, body[i]) for i in group.copies
                     if self.prefetch and not self.cluster and isinstance(body[i], Copy))
            produce += [call_stmt(MBARRIER_WAIT_PARITY.name, address_of(empty, slot(g)),
                                  parity ^ 1),
                        call_stmt(MBARRIER_ARRIVE_EXPECT_TX.name, address_of(full, slot(g)),
                                  const(total))] + copies + [f for f in fetch if f is not None]
        produce_loop = dataclasses.replace(loop, kind="serial", body=seq(produce),
                                           annotations={})
        shrink = [] if self.consumer_regs() is None else [call_stmt(SETMAXNREG_DEC.format(
            regs=self.kernel.attrs.get(PRODUCER_REGISTER_COUNT, PRODUCER_REGISTERS)))]
        if self.rounds is not None:
            produce_loop = self.tile_loop([produce_loop, self.advance(loop)], loop.span)
        producer = seq(shrink + [IfThenElse(_cond(IS_PRODUCER_LEADER.name, const(self.T)),
                                            seq(preload + [produce_loop]), None, loop.span)])
        release = (MBARRIER_ARRIVE_WARP_CLUSTER.format(size=self.cluster.size) if self.cluster
                   else MBARRIER_ARRIVE_WARP.name)
        consume = []
        for at, i in enumerate(rest + [None]):
            consume += [call_stmt(release, address_of(empty, slot(g)))
                        for g, group in enumerate(groups) if group.last == at - 1]
            consume += [call_stmt(MBARRIER_WAIT_PARITY.name, address_of(full, slot(g)), parity)
                        for g, group in enumerate(groups) if group.first == at]
            if i is not None:
                consume.append(Versioned(versions, stage).visit(body[i]))
        consumer = dataclasses.replace(loop, kind="serial", body=seq(consume),
                                       annotations={WARP_SPECIALIZED: depth})
        return producer, consumer, versions, barriers


@dataclasses.dataclass
class _Group:
    """TMA copies that complete on one full / empty barrier pair: those whose tiles the
    consumers first read in the same statement. The consumers wait right before that statement
    (`first`, a position among the statements they run) and release the tiles right after the
    last statement that reads any of them (`last`), so a tile needed later in the body (the V
    of attention, after the softmax) neither delays the work before it nor is held longer than
    it is read."""
    copies: list
    first: int
    last: int


def _barrier_groups(body: list, issue: list, ahead: dict, rest: list) -> list:
    """The copies ahead grouped by the first statement that reads their tiles, in the order the
    consumers reach them, each group's copies in issue order (copies no statement reads:
    waited for first, released last)."""
    groups: dict = {}
    for i in issue:
        if i not in ahead:
            continue
        b = _loaded_tile(body[i])
        uses = [at for at, j in enumerate(rest)
                if any(getattr(n, "buffer", None) is b for n in walk(body[j]))]
        first, last = (uses[0], uses[-1]) if uses else (0, len(rest) - 1)
        group = groups.setdefault(first, _Group([], first, last))
        group.copies.append(i)
        group.last = max(group.last, last)
    return [groups[first] for first in sorted(groups)]


def warp_specialize(func, target=None, configs: dict | None = None):
    configs = configs or {}
    if arch_of(target) != "sm_90a" or configs.get(PassConfigKey.TL_DISABLE_WARP_SPECIALIZED) or \
            configs.get(PassConfigKey.TL_DISABLE_TMA_LOWER):
        return func

    multicast = bool(configs.get(PassConfigKey.TL_ENABLE_TMA_MULTICAST))
    prefetch = not configs.get(PassConfigKey.TL_DISABLE_L2_PREFETCH)

    def specialize(k):
        # Per-thread code counts on the launch having the T.Kernel's threads and no others
        # (its named barriers, warpgroup indices and shuffles): no producer warpgroup there.
        if ThreadVarying(k).per_thread:
            return k
        return _Specializer(k, multicast, persistent_for(k, configs, target),
                            producer_preload_for(k, configs, target), prefetch).run()
    return map_kernels(func, specialize)

