"""seesaw_warpgroups: two consumer warpgroups take turns at the row work of a decode loop.

MLA decoding's loop serves one 64-row query tile per block: each iteration computes a 64 x N
score tile (`acc_s`), its online softmax (row max, scale, exponentials, row sum), and rescales
and accumulates the 64 x 512 output (`acc_o`) with P = softmax(scores) from shared memory. With
FullCol both consumer warpgroups share every score tile (n = N/2 each), so the score GEMM
reads three bytes of shared memory per two useful, and the softmax of each block runs in both
warpgroups in lockstep, separated by two barriers of all consumers (the row max and sum meet
across them). FlashMLA's "seesaw" schedule gives each warpgroup whole blocks instead:

    pair i:   warpgroup 0                         warpgroup 1
              scores + softmax of block 2i        scores of block 2i + 1
              publish its row vectors  -- A -->   take them (the running max and sum)
              O += P_2i V_2i  (its columns)       O += P_2i V_2i  (its columns)
                                                  softmax of block 2i + 1
              take them               <-- B --    publish its row vectors
              O += P_2i+1 V_2i+1                  O += P_2i+1 V_2i+1

The loop body splits into a row part (every statement but those writing the output
accumulator) and an O part (the accumulator's statements: the rescale and the P.V gemm). The
row part of block 2i runs on warpgroup 0 and that of block 2i + 1 on warpgroup 1, with its
fragments laid out over the 128 threads of one warpgroup (kernel attr WARPGROUP_FRAGMENTS; a
64-row tile then keeps each row within one warp, so the reductions need no barrier). The O
part of each block runs on both, in block order, as the user wrote it. The row vectors the
chain carries from block to block (running max and sum) and those the O part reads (the
scale) pass between the warpgroups through a small shared mailbox, published with named
barriers HANDOFF (bar.arrive by the writer, bar.sync by the reader). Each block's P is stored
over a tile of its pipeline stage that is dead by then (the rotary keys, read only by the
score gemm), so the two P tiles in flight take no shared memory of their own; the stage is
released (its empty mbarrier) by both warpgroups after their last gemm of the pair.

A fragment used both in the row part and elsewhere gets a twin over one warpgroup: the row part
uses the twin, the rest the user's fragment, and a register copy converts between them (the
twin's rows sit in the same threads of each warpgroup as the accumulator's). Each
warpgroup's branch holds its whole pair body, under a warp-uniform warpgroup index, so no
wgmma is in flight across a join and ptxas does not serialize them (C7520). An odd trip
count runs its last block on warpgroup 0 alone. On the H100 it made MLA decode faster at KV
4096 and 8192, KV 1024 level (bench/mla_decode.md). Deferring warpgroup 1's wait for
block 2i's P.V until after its softmax measured slower (the stage is released later),
so each gemm still waits for itself. Applies to warp-specialized sm_90a loops with two
consumer warpgroups whose row tile is one wgmma row block (64 rows) and a ring of two stages
or more; turned off with tl.disable_seesaw_warpgroups.
"""
from __future__ import annotations

import dataclasses

from ....ir.buffer import FRAGMENT, SHARED, Buffer, BufferRegion, is_shared
from ....ir import dtypes as dt
from ....ir.ftg import element_accesses
from ....ir.expr import BufferLoad, Call, Const, Var, const
from ....ir.stmt import (Allocate, For, IfThenElse, Kernel, BufferStore,
                       call_stmt, called, flat_stmts, seq)
from ....ir.tileop import Copy, Gemm, TileOp
from ....ir.annotations import PRODUCER_THREADS, SCHEDULED, WARPGROUP_FRAGMENTS, WARPGROUP_INDEX
from ....ir.visitor import Mutator, RenameBuffers, map_kernels, substitute, walk
from ....target import parse_arch
from ....pass_config import PassConfigKey
from .overlap_wgmma import ConsumerLoops
from ..tileops.wgmma import WARPGROUP, wgmma_partition
from ..intrinsics import (FENCE_PROXY_ASYNC_SHARED, MBARRIER_ARRIVE_WARP,
                          MBARRIER_ARRIVE_WARP_CLUSTER, MBARRIER_WAIT_PARITY, NAMED_BARRIER_ARRIVE, NAMED_BARRIER_SYNC,
                          is_call_to)

HANDOFF = (2, 3)   # named barriers: block 2i's rows published (by wg 0), block 2i + 1's (wg 1)
OWN = (4, 5)       # named barrier of warpgroup w's 128 threads: its P is in shared memory
ROWS = 64          # the row tile one warpgroup's wgmma covers
PUBLISH = NAMED_BARRIER_ARRIVE.name   # the writer of the mailbox does not wait for the reader
WAIT = MBARRIER_WAIT_PARITY.name
RELEASES = (MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER)


def warpgroup_branch(then_body, else_body, span=None) -> IfThenElse:
    """`if (warpgroup_index() == 0) then_body else else_body`."""
    wg = Call(WARPGROUP_INDEX, (), dt.int32, span)
    return IfThenElse(wg == const(0), then_body, else_body, span)


def _accesses(s) -> tuple[dict, dict]:
    """(read, written) buffers of a tile-level statement, by id."""
    reads, writes = element_accesses(s)
    return {id(b): b for b in reads}, {id(b): b for b in writes}


def _rows_per_warpgroup(gemm: Gemm, threads: int) -> bool:
    """Each warpgroup holds all rows of the gemm's accumulator (its columns split), so a row
    vector sits in the same threads of either warpgroup."""
    m, n, _ = gemm.dims()
    split = wgmma_partition(gemm, m, n, threads)
    return split is not None and split[0] == 1


def _fragments(d: dict) -> dict:
    return {k: b for k, b in d.items() if b.scope == FRAGMENT}


class _Rename(RenameBuffers):
    """Fragments replaced by their twins; the P tile by a stage of the tile it reuses."""

    def __init__(self, twins: dict, p: Buffer, home: BufferRegion):
        super().__init__(twins)
        self.p, self.home = p, home

    def visit_BufferRegion(self, r):
        if r.buffer is not self.p:
            return super().visit_BufferRegion(r)
        r = self.generic_visit(r)
        lead = self.home.ranges[:len(self.home.ranges) - len(r.ranges)]
        return BufferRegion(self.home.buffer, tuple(lead) + tuple(r.ranges), r.span)


def _scheduled(s):
    """s with its copies marked as ordered by this pass's own barriers (insert_barriers
    leaves them alone)."""
    class Mark(Mutator):
        def visit_Copy(self, op):
            return dataclasses.replace(op, annotations={**op.annotations, SCHEDULED: True})
    return Mark().visit(s)


class _Plan:
    """The analysis of one consumer loop; `ok` is False when the schedule does not apply."""

    def __init__(self, loop: For, threads: int, outside: set, outside_reads: set):
        self.ok = False
        body = flat_stmts(loop.body)
        gemms = [s for s in body if isinstance(s, Gemm)]
        stores = [s for s in body if isinstance(s, Copy) and s.src.buffer.scope == FRAGMENT and
                  is_shared(s.dst.buffer.scope)]
        if len(stores) != 1:
            return
        self.store = store = stores[0]
        self.p, acc_s = store.dst.buffer, store.src.buffer
        o_gemms = [g for g in gemms if g.A.buffer is self.p]
        s_gemms = [g for g in gemms if g.C.buffer is acc_s]
        if len(o_gemms) != 1 or not s_gemms or len(s_gemms) + 1 != len(gemms) or \
                any(g.instruction != "wgmma" for g in gemms) or \
                acc_s.static_shape() is None or acc_s.static_shape()[0] != ROWS:
            return
        acc_o = o_gemms[0].C.buffer
        self.waits, self.releases, self.row, self.o = [], [], [], []
        for s in body:
            name = called(s)
            if name == WAIT:
                self.waits.append(s)
                self.row.append(s)
            elif is_call_to(name, *RELEASES):
                self.releases.append(s)
            elif name is not None:
                return
            elif id(acc_o) in _accesses(s)[1]:
                self.o.append(s)
            else:
                self.row.append(s)
        o_reads = {}
        for s in self.o:
            reads, writes = _accesses(s)
            o_reads.update(reads)
            if any(b.scope == FRAGMENT and b is not acc_o for b in writes.values()):
                return
        row_reads, row_writes = {}, {}
        for s in self.row:
            if s in self.waits:
                continue
            reads, writes = _accesses(s)
            row_reads.update(reads)
            row_writes.update(writes)
        if id(acc_o) in row_reads or not _rows_per_warpgroup(o_gemms[0], threads):
            return
        # The row part writes fragments and its P only (each warpgroup runs it for its own
        # blocks), and reads shared memory only through its gemms' operands.
        if any(b.scope != FRAGMENT for b in row_writes.values() if b is not self.p) or \
                any(is_shared(b.scope) and not any(b is g.A.buffer or b is g.B.buffer
                                                   for g in s_gemms)
                    for b in row_reads.values()):
            return
        row_fragments = _fragments({**row_reads, **row_writes})
        if any(len(b.static_shape() or ()) not in (1, 2) or b.static_shape()[0] != ROWS
               for b in row_fragments.values()):
            return
        # P goes over a pipelined tile of the same shape that only the score gemms read. Its
        # ring must hold two blocks: warpgroup 1 computes block 2i + 1's scores before either
        # warpgroup is done with block 2i.
        self.home = self._home(s_gemms, body)
        if self.home is None or self.home.buffer.static_shape()[0] < 2:
            return
        self.twins = {k: Buffer(b.name + "_wg", b.shape, b.dtype, FRAGMENT, b.span)
                      for k, b in row_fragments.items() if k in outside or k in o_reads}
        self.local = [b for k, b in row_fragments.items() if k not in self.twins]
        # Row vectors handed from one warpgroup to the other: those the chain carries (read
        # before the row part writes them) and those the O part reads.
        written, carried = set(), []
        for s in self.row:
            reads, writes = _accesses(s)
            carried += [b for k, b in _fragments(reads).items()
                        if k not in written and k in row_writes and b not in carried]
            written |= set(writes)
        self.handed = carried + [b for k, b in row_fragments.items()
                                 if k in o_reads and k in row_writes and b not in carried]
        if not self.handed or any(len(b.static_shape()) != 1 or
                                  b.dtype != self.handed[0].dtype for b in self.handed):
            return
        # Twins take the user's values before the loop where the row part reads them first,
        # and give them back after it where the kernel reads them later (both warpgroups
        # hold the last block's values of the handed vectors only).
        self.live_in = [b for k, b in row_fragments.items() if k in self.twins and
                        (b in carried or k not in row_writes)]
        self.live_out = [b for k, b in row_fragments.items()
                         if k in outside_reads and k in row_writes]
        if any(b not in self.handed for b in self.live_out):
            return
        self.o_reads = [b for k, b in row_fragments.items() if k in o_reads]
        self.mailbox = Buffer("tc_rows", (2 * len(self.handed), ROWS), self.handed[0].dtype,
                              SHARED, loop.span)
        self.ok = True

    def _home(self, s_gemms, body):
        p_shape = self.p.static_shape()
        for g in s_gemms:
            for operand in (g.A, g.B):
                b = operand.buffer
                shape = b.static_shape()
                if b is self.p or shape is None or len(shape) != len(p_shape) + 1 or \
                        tuple(shape[1:]) != tuple(p_shape) or b.dtype != self.p.dtype:
                    continue
                readers = [s for s in body if id(b) in _accesses(s)[0]]
                if all(isinstance(s, Gemm) and s in s_gemms for s in readers):
                    return operand
        return None


class _Schedule:
    """The pair loop of one consumer loop (plan.ok)."""

    def __init__(self, plan: _Plan, loop: For):
        self.plan, self.loop = plan, loop
        self.pair = Var(loop.var.name + "2", loop.var.dtype)
        self.span = loop.span
        self.rename = _Rename(plan.twins, plan.p, plan.home)
        self.rename_p = _Rename({}, plan.p, plan.home)   # the O part keeps the user's buffers

    def block(self, stmts, j: int, rows: bool = True) -> list:
        k = self.loop.start + const(2) * self.pair + const(j)
        rename = self.rename if rows else self.rename_p
        return [substitute(rename.visit(s), {id(self.loop.var): k}) for s in stmts]

    def copies(self, pairs) -> list:
        return [Copy(a.region(), b.region(), span=self.span) for a, b in pairs]

    def mailbox(self, slot: int, v: int) -> BufferRegion:
        row = slot * len(self.plan.handed) + v
        return BufferRegion(self.plan.mailbox, ((const(row), const(1)), (const(0), const(ROWS))))

    def publish(self, slot: int) -> list:
        twins = self.plan.twins
        out = [Copy(BufferRegion(twins.get(id(b), b), ((const(0), const(ROWS)),)),
                    self.mailbox(slot, v), span=self.span)
               for v, b in enumerate(self.plan.handed)]
        return out + [call_stmt(FENCE_PROXY_ASYNC_SHARED.name, span=self.span),
                      call_stmt(PUBLISH, const(HANDOFF[slot]),
                                const(2 * WARPGROUP), span=self.span)]

    def receive(self, slot: int) -> list:
        twins = self.plan.twins
        return [call_stmt(NAMED_BARRIER_SYNC.name, const(HANDOFF[slot]), const(2 * WARPGROUP),
                          span=self.span)] + \
            [Copy(self.mailbox(slot, v), BufferRegion(twins.get(id(b), b),
                                                      ((const(0), const(ROWS)),)),
                  span=self.span) for v, b in enumerate(self.plan.handed)]

    def o_part(self, j: int, own: bool, wg: int) -> list:
        """Block j's O part on warpgroup wg: its stage's tiles waited for (already arrived:
        the other warpgroup's scores used them), its row vectors converted from the twins,
        then the user's statements."""
        plan = self.plan
        out = [] if own else self.block(plan.waits, j)
        if own:  # this warpgroup's P stores, by all its 128 threads, precede its gemm
            out.append(self.own_barrier(wg))
        out += self.copies([(plan.twins[id(b)], b) for b in plan.o_reads])
        return out + self.block(plan.o, j, rows=False)

    def row_split(self):
        """The row part as (start, rest): the start reads none of the handed row vectors (the
        score gemms), so warpgroup 1 runs it before it waits for warpgroup 0's."""
        handed = {id(b) for b in self.plan.handed}
        row = self.plan.row
        at = next((i for i, s in enumerate(row) if handed & set(_accesses(s)[0])), len(row))
        return row[:at], row[at:]

    def own_barrier(self, wg: int):
        return call_stmt(NAMED_BARRIER_SYNC.name, const(OWN[wg]), const(WARPGROUP),
                         span=self.span)

    def p_after_reads(self, stmts, wg: int) -> list:
        """The P store waits for all the warpgroup's warps: the tile it overwrites was the
        score gemm's operand, which each warp's own wgmma wait does not cover for the others."""
        out = []
        for s in stmts:
            if s is self.plan.store:
                out.append(self.own_barrier(wg))
            out.append(s)
        return out

    def loop_stmts(self) -> list:
        plan, span = self.plan, self.span
        start, rest = self.row_split()
        rest0, rest1 = self.p_after_reads(rest, 0), self.p_after_reads(rest, 1)
        has_b = (const(2) * self.pair + const(1)) < self.loop.extent
        even = isinstance(self.loop.extent, Const) and self.loop.extent.value % 2 == 0
        releases = self.block(plan.releases, 0)
        releases_b = self.block(plan.releases, 1)

        def guarded(stmts):
            stmts = [s for s in stmts if s is not None]
            if not stmts or even:
                return seq(stmts, span) if stmts else None
            return IfThenElse(has_b, seq(stmts, span), None, span)

        wg0 = (self.block(start + rest0, 0) + self.publish(0) + self.o_part(0, True, 0) +
               releases + [guarded(self.receive(1) + self.o_part(1, False, 0) + releases_b)])
        wg1 = ([guarded(self.block(start, 1))] + self.receive(0) + self.o_part(0, False, 1) +
               releases + [guarded(self.block(rest1, 1) + self.publish(1) +
                                   self.o_part(1, True, 1) + releases_b)])
        branch = warpgroup_branch(seq([_scheduled(s) for s in wg0 if s is not None], span),
                                  seq([_scheduled(s) for s in wg1 if s is not None], span), span)
        pairs = (self.loop.extent + const(1)) // const(2)
        new_loop = dataclasses.replace(self.loop, var=self.pair, start=const(0), extent=pairs,
                                       body=branch)
        return self.copies([(b, plan.twins[id(b)]) for b in plan.live_in]) + [new_loop] + \
            self.copies([(plan.twins[id(b)], b) for b in plan.live_out])


def _outside_refs(kernel: Kernel, loop: For) -> tuple[set, set]:
    """ids of the buffers the kernel touches outside the loop, and of those it reads there."""
    inside = {id(n) for n in walk(loop)}
    touched, read = set(), set()
    for n in walk(kernel.body):
        if id(n) in inside:
            continue
        if isinstance(n, (BufferLoad, BufferStore)):
            touched.add(id(n.buffer))
            if isinstance(n, BufferLoad):
                read.add(id(n.buffer))
        elif isinstance(n, TileOp):
            touched |= {id(b) for b in list(n.reads()) + list(n.writes())}
            read |= {id(b) for b in n.reads()}
    return touched, read


class _Rewriter:
    """The consumer loops of one kernel, rewritten; the buffers and one-warpgroup fragments
    that takes."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.new_buffers: list = []
        self.local: set = set()

    def rewrite(self, loop: For):
        plan = _Plan(loop, self.kernel.num_threads, *_outside_refs(self.kernel, loop))
        if not plan.ok:
            return None
        self.new_buffers += list(plan.twins.values()) + [plan.mailbox]
        self.local |= {b.name for b in list(plan.twins.values()) + plan.local}
        return _Schedule(plan, loop).loop_stmts()


def seesaw_warpgroups(func, arch: str = "sm_90a", configs: dict | None = None):
    if parse_arch(arch)[0] != 90 or \
            (configs or {}).get(PassConfigKey.TL_DISABLE_SEESAW_WARPGROUPS):
        return func

    def split(k):
        if not (k.attrs.get(PRODUCER_THREADS) and k.num_threads == 2 * WARPGROUP):
            return k
        rewriter = _Rewriter(k)
        out = ConsumerLoops(rewriter.rewrite).visit(k)
        if not rewriter.new_buffers:
            return k
        allocs = [Allocate(b, k.span) for b in rewriter.new_buffers]
        local = set(k.attrs.get(WARPGROUP_FRAGMENTS, ())) | rewriter.local
        return dataclasses.replace(out, body=seq(allocs + [out.body], k.span),
                                   attrs={**out.attrs, WARPGROUP_FRAGMENTS: local})
    return map_kernels(func, split)
