"""insert_barriers: a __syncthreads wherever one thread may touch shared memory another used.

Runs on tile-level IR, where every statement is executed by the whole block: a tile op, a
T.Parallel nest, a block-uniform `if` or loop. Within one tile op no two threads touch the same
shared element in conflicting ways (an op's lowering guarantees it), so hazards exist only
between statements: a read or write after a write (RAW, WAW) or a write after a read (WAR) of
the same shared buffer by different statements. A barrier is placed before the second statement
of each such pair unless one already separates them; loops are scanned twice so that hazards
around the back edge (the next iteration overwriting what this one still reads) get a barrier
before the first statement of the body that meets them. Barriers never go inside a T.Parallel
nest (whose conditions may differ per thread); block-uniform `if`s may hold them, since every
thread takes the same branch. In per-thread code an `if` or loop whose condition differs
between threads (ir/thread_varying.py) is one statement here: what it touches is settled
before it, and what its threads share inside it is theirs to order (T.sync_warp, a named
barrier), as a block barrier there would not be reached by every thread. A T.reduce_* whose reduced dimension spans several warps
synchronizes the block itself (its partials meet in shared memory between two barriers), so it
settles every hazard pending before it, as a barrier would.
"""
from __future__ import annotations

from ..errors import TileError
from ..ir.buffer import FRAGMENT, is_shared
from ..ir.expr import BufferLoad
from ..ir.stmt import BufferStore, For, IfThenElse, Kernel, seq, stmts_of
from ..ir.thread_varying import ThreadVarying
from ..ir.tileop import Reduce, TileOp
from ..ir.visitor import children, map_kernels, walk
from ..ir.annotations import (LAYOUTS, MANUAL_WARPGROUPS, SCHEDULED, SMEM_OFFSETS, is_sync,
                              is_warpgroup_branch, sync_stmt)
import dataclasses

from ..pass_config import PassConfigKey


def shared_buffers_of(s) -> list:
    """Every shared buffer a tile-level statement (or expression) touches."""
    out = {}
    for n in walk(s):
        if isinstance(n, TileOp):
            for b in list(n.reads()) + list(n.writes()):
                if is_shared(b.scope):
                    out[id(b)] = b
        elif isinstance(n, (BufferLoad, BufferStore)) and is_shared(n.buffer.scope):
            out[id(n.buffer)] = n.buffer
    return list(out.values())


def shared_accesses(s) -> tuple[set, set]:
    """(ids read, ids written) of shared buffers by a tile-level statement."""
    reads, writes = set(), set()
    for n in _unscheduled(s):
        if isinstance(n, TileOp):
            reads |= {id(b) for b in n.reads() if is_shared(b.scope)}
            writes |= {id(b) for b in n.writes() if is_shared(b.scope)}
        elif isinstance(n, BufferLoad) and is_shared(n.buffer.scope):
            reads.add(id(n.buffer))
        elif isinstance(n, BufferStore) and is_shared(n.buffer.scope):
            writes.add(id(n.buffer))
    return reads, writes


def _unscheduled(node):
    """The nodes of node's tree, pre-order, leaving out the copies (and gathers) a software
    pipeline issued: its own waits and barriers order them."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (TileOp, For)) and getattr(n, "annotations", {}).get(SCHEDULED):
            continue
        yield n
        stack.extend(reversed(children(n)))


class _State:
    # Shared tiles that the planner placed on the same bytes (at different times) are one
    # resource here: reusing the bytes must wait for the last reads of the previous tile.
    overlaps: dict = {}

    def __init__(self, reads=(), writes=()):
        self.reads, self.writes = set(reads), set(writes)

    def copy(self):
        return _State(self.reads, self.writes)

    def _meets(self, keys, pending) -> bool:
        for k in keys:
            if k in pending or pending & _State.overlaps.get(k, frozenset()):
                return True
        return False

    def conflicts(self, reads, writes) -> bool:
        return self._meets(reads, self.writes) or self._meets(writes, self.writes | self.reads)

    def merge(self, other):
        self.reads |= other.reads
        self.writes |= other.writes


class _Inserter:
    def __init__(self, kernel: Kernel | None = None, rules=None):
        self.kernel = kernel
        self.rules = rules
        self.varying = ThreadVarying(kernel) if kernel is not None else None
        self.across_warps: dict = {}   # id(reduce) -> whether it synchronizes the block

    def synchronizes(self, s) -> bool:
        """A T.reduce_* whose reduced dimension spans several warps exchanges its partials
        through shared memory between two block barriers (tileops/reduce.py): every access
        before it is ordered before every access after it, as by a barrier of our own.
        (Asked once per reduction: a loop body is scanned more than once.)"""
        layouts = self.kernel.attrs.get(LAYOUTS) if self.kernel is not None else None
        if not isinstance(s, Reduce) or layouts is None or \
                FRAGMENT != s.src.buffer.scope or s.dst.buffer.scope != FRAGMENT:
            return False   # (a reduction of a shared tile is refused by its lowering)
        if id(s) not in self.across_warps:
            try:
                synchronizes = self.rules.reduce_synchronizes(
                    layouts.buffer(s.src.buffer), layouts.buffer(s.dst.buffer), s.dim,
                    self.kernel.num_threads)
            except TileError:  # the lowering reports it; assume no barrier here
                synchronizes = False
            self.across_warps[id(s)] = synchronizes
        return self.across_warps[id(s)]

    def block(self, stmts, state: _State) -> list:
        out = []
        for s in stmts:
            out.extend(self.stmt(s, state))
        return out

    def stmt(self, s, state: _State) -> list:
        if is_sync(s):
            state.reads.clear()
            state.writes.clear()
            return [s]
        if self.varying is not None and self.varying.condition(s):
            return self.plain(s, state)
        if isinstance(s, For) and s.kind != "parallel":
            return self.loop(s, state)
        if is_warpgroup_branch(s):
            # Each warpgroup runs its own branch (seesaw_warpgroups), which orders its shared
            # accesses with named barriers of its own; a block barrier inside would deadlock.
            # What the branches touch is settled before them, as for one statement. A T.ws
            # region (manual_warpgroups) gets the barriers its own statements need, which
            # finalize_barriers makes barriers of the region's warpgroup.
            if self.kernel is not None and self.kernel.attrs.get(MANUAL_WARPGROUPS):
                inner = seq(self.block(stmts_of(s.then_body), _State()))
                # the else of a region: the chain's next region (manual_warpgroups)
                other = None if s.else_body is None else \
                    seq(self.block(stmts_of(s.else_body), _State()))
                s = dataclasses.replace(s, then_body=inner, else_body=other)
            return self.plain(s, state)
        if isinstance(s, IfThenElse):  # outside T.Parallel: the same branch for every thread
            prefix = []
            cond_reads, _ = shared_accesses(s.cond)
            if state.conflicts(cond_reads, set()):
                prefix.append(sync_stmt(s.span))
                state.reads.clear()
                state.writes.clear()
            state.reads |= cond_reads
            then_state, else_state = state.copy(), state.copy()
            then_body = seq(self.block(stmts_of(s.then_body), then_state))
            else_body = None
            if s.else_body is not None:
                else_body = seq(self.block(stmts_of(s.else_body), else_state))
            then_state.merge(else_state)
            state.reads, state.writes = then_state.reads, then_state.writes
            return prefix + [dataclasses.replace(s, then_body=then_body, else_body=else_body)]
        return self.plain(s, state)

    def plain(self, s, state: _State) -> list:
        reads, writes = shared_accesses(s)
        out = []
        if state.conflicts(reads, writes):
            out.append(sync_stmt(s.span))
            state.reads.clear()
            state.writes.clear()
        state.reads |= reads
        state.writes |= writes
        if self.synchronizes(s):
            state.reads.clear()
            state.writes.clear()
        return out + [s]

    def loop(self, s: For, state: _State) -> list:
        stmts = stmts_of(s.body)
        first = state.copy()
        body = self.block(stmts, first)
        clean = _State()
        alone = self.block(stmts, clean)  # the body with nothing pending when it starts
        prefix = []
        if _syncs_more(body, alone):
            # What was written before the loop and is touched inside it, before the body's own
            # barriers, is published once before the loop, not by a barrier every iteration
            # would execute.
            prefix.append(sync_stmt(s.span))
            state.reads.clear()
            state.writes.clear()
            body, first = alone, clean
        entry = state.copy()
        # What is pending at the end of an iteration meets the start of the next one.
        probe = self.block(stmts, _State(first.reads, first.writes))
        if _syncs_more(probe, body):
            carried = _State(first.reads | entry.reads, first.writes | entry.writes)
            body, first = self.with_carried_sync(alone, carried, s.span), clean
        # After the loop: whatever an iteration left pending, or the entry state if it ran
        # zero times.
        state.reads = first.reads | entry.reads
        state.writes = first.writes | entry.writes
        return prefix + [dataclasses.replace(s, body=seq(self.without_trailing(body)))]

    def with_carried_sync(self, alone: list, carried: _State, span) -> list:
        """The body as it needs barriers on its own (`alone`), with one more barrier before its
        first statement that meets what the previous iteration (or the code before the loop)
        left pending: the statements ahead of that one need not wait for the last ones of the
        iteration before. A persistent GEMM's next tile thus runs its main loop while the
        previous tile's last TMA store still reads the staging tile, and waits only before
        writing it again."""
        for i, x in enumerate(alone):
            if is_sync(x) or self.synchronizes(x):
                break  # everything pending is settled here (not reached when a barrier is due)
            if carried.conflicts(*shared_accesses(x)):
                return alone[:i] + [sync_stmt(span)] + alone[i:]
        return [sync_stmt(span)] + alone

    def without_trailing(self, body: list) -> list:
        """The loop body with its reductions across warps told to leave out their trailing
        barrier where another barrier of the body (or another such reduction's) always runs
        before they come round again: every path from one run of a reduction back to it passes
        all the other statements of the body, and each reduction gets scratch slots of its own
        (lower_tile_ops), so that barrier already keeps the next run's partials from
        overwriting slots still being read. MLA's loop drops two of its five barriers this way
        (faster on the H100: bench/mla_decode.md)."""
        if sum(1 for x in body if is_sync(x) or self.synchronizes(x)) < 2:
            return body
        return [dataclasses.replace(x, trailing_barrier=False) if self.synchronizes(x) else x
                for x in body]


def _syncs_more(a, b) -> bool:
    """Whether statement list a needs a barrier earlier, or more barriers, than b."""
    return _first_sync_index(a) < _first_sync_index(b) or _count_syncs(a) > _count_syncs(b)


def _first_sync_index(stmts) -> int:
    for i, s in enumerate(stmts):
        if is_sync(s):
            return i
    return len(stmts)


def _count_syncs(stmts) -> int:
    return sum(1 for s in stmts if is_sync(s))


def _overlap_table(offsets: dict) -> dict:
    table = {}
    items = list(offsets.items())
    for i, (a, (sa, na)) in enumerate(items):
        for b, (sb, nb) in items[i + 1:]:
            if sa < sb + nb and sb < sa + na:
                table.setdefault(a, set()).add(b)
                table.setdefault(b, set()).add(a)
    return {k: frozenset(v) for k, v in table.items()}


def insert_barriers(func, rules, configs: dict | None = None):
    """Return func with barriers added to every kernel. `rules` are the backend's instruction
    facts (passes/instruction_rules.py). With tl.disable_thread_storage_sync the program's own
    barriers (T.sync_threads) are the only ones."""
    if (configs or {}).get(PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC):
        return func
    _State.overlaps = _overlap_table(func.attrs.get(SMEM_OFFSETS, {}))
    return map_kernels(func, lambda k: dataclasses.replace(
        k, body=seq(_Inserter(k, rules).block(stmts_of(k.body), _State()))))
