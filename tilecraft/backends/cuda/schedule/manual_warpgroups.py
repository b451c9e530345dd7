"""manual_warpgroups: warp specialization written by hand (language/warp_specialize.py).

A kernel that uses `T.ws` regions, `T.alloc_barrier` mbarriers or `T.tma_copy` is lowered
here into the forms the rest of the pipeline already knows:

- `with T.ws(g):` becomes `if (warpgroup_index() == g)`, a warpgroup branch: every tile
  operator inside runs on the warpgroup's 128 threads (lower_tile_ops), the fragments used
  there are that warpgroup's own (WARPGROUP_FRAGMENTS: laid out over 128 threads, and each
  gemm into one is split over one warpgroup), the barriers insert_barriers puts inside are
  named barriers of those 128 threads (finalize_barriers), and where regions of different
  warpgroups share a tile the block barrier between them orders it;
- the mbarriers are initialized by the block's first thread before anything else runs
  (then a fence and a block barrier), and T.barrier_wait / T.barrier_arrive become the
  mbarrier wait on a parity and a per-thread arrival;
- `T.tma_copy(src, dst, barrier=b)` becomes, on the first thread of the region running it,
  the expected-bytes count on b followed by the TMA loads completing on b (sm_90a only);
- a T.Pipelined loop of such a kernel runs as a plain loop: the program's own mbarriers are
  its pipeline (the compiler's warp specialization and software pipelining stay out);
- T.fence_proxy_async (in any kernel) is the proxy fence on sm_90a and nothing before, where
  no async proxy reads shared memory.

A fragment used both inside a region and outside any, or by regions of different warpgroups,
and a region of several warpgroups that uses fragments, are refused at their line.
"""
from __future__ import annotations

import dataclasses

from ....errors import TileError, warn_at
from ....ir import dtypes as dt
from ....ir.annotations import (CP_ASYNC_ARRIVE_CALL, FENCE_PROXY_ASYNC, INSTRUCTION,
                                MANUAL_BARRIER_CALLS, MANUAL_WARPGROUPS, MBARRIER_ARRIVE_CALL,
                                MBARRIER_INIT_CALL, MBARRIER_WAIT_CALL, NUM_STAGES,
                                PTX_CP_ASYNC_CALL, SCHEDULED, SET_MAX_NREG_CALL, TMA_BARRIER,
                                TMA_COPY_BARRIER, WARPGROUP_FRAGMENTS, WARPGROUP_INDEX,
                                WS_REGION)
from ....ir.expr import Call, address_of, const, logical
from ....ir.stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, Kernel, SeqStmt,
                         call_stmt, seq, stmts_of)
from ....ir.buffer import is_shared
from ....ir.tileop import Copy, Gemm, TileOp
from ....ir.visitor import Mutator, map_kernels, walk
from ....passes.parallel_nests import fragments_of
from ....target import arch_of
from ..intrinsics import (BARRIER_ALL, CP_ASYNC_ARRIVE_NOINC, FENCE_PROXY_ASYNC_SHARED,
                          FENCE_BARRIER_INIT, IS_BLOCK_LEADER, IS_PRODUCER_LEADER, MBARRIER_ARRIVE,
                          MBARRIER_EXPECT_TX, MBARRIER_INIT, MBARRIER_WAIT_PARITY, SETMAXNREG_DEC,
                          SETMAXNREG_INC)
from ..tileops.tma import tma_plan
from ..tileops.wgmma import WARPGROUP


def is_manual(k: Kernel) -> bool:
    """Whether the kernel uses T.ws, T.alloc_barrier or T.tma_copy."""
    for n in walk(k.body):
        if isinstance(n, Call) and (n.name in (WS_REGION, SET_MAX_NREG_CALL) or
                                    n.name in MANUAL_BARRIER_CALLS):
            return True
        if isinstance(n, Copy) and TMA_COPY_BARRIER in n.annotations:
            return True
    return False


def _address(load):
    return address_of(load.buffer, *load.indices)


class _Lower(Mutator):
    def __init__(self, kernel: Kernel, hopper: bool):
        self.threads = kernel.num_threads
        self.hopper = hopper
        self.groups = None        # the warpgroups of the region being lowered (None: all)
        self.inits: list = []     # mbarrier_init statements, for the prologue
        self.owner: dict = {}     # id(fragment) -> (warpgroup or None, buffer, span)
        self.generic_written = _generic_writes(kernel)

    def note_fragments(self, op, span):
        """Record where each fragment op touches is used; refuse mixed uses."""
        group = self.groups[0] if self.groups and len(self.groups) == 1 else None
        for b in fragments_of(op):
            if self.groups is not None and len(self.groups) > 1:
                raise TileError(f"fragment {b.name} is used in a T.ws region of several "
                                f"warpgroups {self.groups}: a fragment lives in the threads of "
                                "one warpgroup (use one region per warpgroup)", span)
            seen, _, first = self.owner.setdefault(id(b), (group, b, span))
            if seen != group:
                line = first.line if first else "?"
                raise TileError(f"fragment {b.name} is used {_place(group)} and {_place(seen)} "
                                f"(at line {line}): a fragment of a region lives in its "
                                "warpgroup's threads", span)

    def visit_IfThenElse(self, s: IfThenElse):
        if not (isinstance(s.cond, Call) and s.cond.name == WS_REGION):
            return self.generic_visit(s)
        groups = tuple(int(g.value) for g in s.cond.args)
        count = self.threads // WARPGROUP
        if self.threads % WARPGROUP or any(g >= count for g in groups):
            raise TileError(f"T.ws{groups}: the block has {self.threads} threads, "
                            f"{count} whole warpgroup(s) of 128 (T.ws names warpgroups "
                            f"0..{max(count - 1, 0)})", s.span)
        if self.groups is not None:
            raise TileError("T.ws regions cannot be nested", s.span)
        self.groups = groups
        try:
            body = self.visit(s.then_body)
        finally:
            self.groups = None
        # The else of a region is the next region of a chain on the thread index
        # (frontend/thread_range_regions.py): other warpgroups, run at the same time.
        other = None if s.else_body is None else self.visit(s.else_body)
        index = Call(WARPGROUP_INDEX, (), dt.int32, s.span)
        cond = None
        for g in groups:
            one = index == const(g)
            cond = one if cond is None else logical("or", cond, one)
        return IfThenElse(cond, body, other, s.span)

    def visit_For(self, s: For):
        if s.kind == "pipelined" or NUM_STAGES in s.annotations:
            s = dataclasses.replace(s, kind="serial", annotations={})
        return self.generic_visit(s)

    def visit_Evaluate(self, s: Evaluate):
        call = s.value
        if isinstance(call, Call) and call.name == SET_MAX_NREG_CALL:
            if not self.hopper:
                raise TileError("T.set_max_nreg is setmaxnreg, which exists on sm_90a only",
                                s.span)
            count, inc = (int(a.value) for a in call.args)
            intrinsic = SETMAXNREG_INC if inc else SETMAXNREG_DEC
            return call_stmt(intrinsic.format(regs=count), span=s.span)
        if not isinstance(call, Call) or call.name not in MANUAL_BARRIER_CALLS:
            return s
        bar = _address(call.args[0])
        if call.name == MBARRIER_INIT_CALL:
            self.inits.append(call_stmt(MBARRIER_INIT.name, bar, call.args[1], span=s.span))
            return seq([])
        if call.name == MBARRIER_ARRIVE_CALL:
            return call_stmt(MBARRIER_ARRIVE.name, bar, span=s.span)
        if call.name == CP_ASYNC_ARRIVE_CALL:
            return call_stmt(CP_ASYNC_ARRIVE_NOINC.name, bar, span=s.span)
        assert call.name == MBARRIER_WAIT_CALL
        return call_stmt(MBARRIER_WAIT_PARITY.name, bar, call.args[1], span=s.span)

    def visit_Copy(self, op: Copy):
        self.note_fragments(op, op.span)
        mbar = op.annotations.get(TMA_COPY_BARRIER)
        if mbar is None:
            return op
        notes = {k: v for k, v in op.annotations.items() if k != TMA_COPY_BARRIER}
        load = dataclasses.replace(op, annotations={**notes, INSTRUCTION: "tma",
                                                    TMA_BARRIER: mbar, SCHEDULED: True})
        plan = tma_plan(load) if self.hopper else None
        if plan is None:
            # The threads running it copy the tile themselves; each one's writes come before
            # its own arrival on the barrier, which is what a waiter then sees.
            why = "TMA needs sm_90a" if not self.hopper else \
                "its tile is not one TMA can load (a tensor of static shape, 16-byte aligned " \
                "rows, a box of at most 256 elements a side)"
            warn_at(op.span, f"tilecraft: T.tma_copy of {op.src.buffer.name} runs as an "
                    f"ordinary copy by the threads running it: {why}")
            return dataclasses.replace(op, annotations=notes)
        if self.groups is not None and len(self.groups) == 1:
            leader = Call(IS_PRODUCER_LEADER.name, (const(self.groups[0] * WARPGROUP),),
                          dt.boolean, op.span)
        else:
            leader = Call(IS_BLOCK_LEADER.name, (), dt.boolean, op.span)
        expect = call_stmt(MBARRIER_EXPECT_TX.name, _address(mbar), const(plan.bytes),
                           span=op.span)
        return IfThenElse(leader, seq([expect, load]), None, op.span)

    def visit_Gemm(self, op: Gemm):
        self.note_fragments(op, op.span)
        if not self.hopper or not any(id(r.buffer) in self.generic_written
                                      for r in (op.A, op.B)):
            return op
        # A tile written by ordinary stores or cp.async (of another warpgroup, handed over
        # by an mbarrier) is read by wgmma through the async proxy: this thread's proxy fence
        # orders what its wait made visible before those reads.
        return seq([call_stmt(FENCE_PROXY_ASYNC_SHARED.name, span=op.span), op])

    def generic_visit(self, node):
        if isinstance(node, TileOp) and not isinstance(node, Copy):
            self.note_fragments(node, node.span)
        if isinstance(node, For) and node.kind == "parallel":
            self.note_fragments(node, node.span)
        return super().generic_visit(node)


def _generic_writes(kernel: Kernel) -> set:
    """ids of the shared tiles some statement writes through the generic proxy: ordinary
    stores, copies other than T.tma_copy, and T.ptx_cp_async / extern calls given a pointer."""
    out = set()
    for n in walk(kernel.body):
        if isinstance(n, BufferStore) and is_shared(n.buffer.scope):
            out.add(id(n.buffer))
        elif isinstance(n, TileOp) and not (isinstance(n, Copy) and
                                            TMA_COPY_BARRIER in n.annotations):
            out |= {id(b) for b in n.writes() if is_shared(b.scope)}
        elif isinstance(n, Call) and n.name in (PTX_CP_ASYNC_CALL, "call_extern"):
            out |= {id(a.args[0].buffer) for a in n.args
                    if isinstance(a, Call) and a.name == "address_of" and
                    is_shared(a.args[0].buffer.scope)}
    return out


def _place(group) -> str:
    return f"T.ws({group})" if group is not None else "outside any T.ws region"


def _check_barriers_at_top(k: Kernel):
    """T.alloc_barrier belongs with the kernel's allocations: its mbarriers are initialized
    once, before anything else runs."""
    top = {id(s) for s in stmts_of(k.body)}
    for n in walk(k.body):
        if isinstance(n, Evaluate) and isinstance(n.value, Call) and \
                n.value.name == MBARRIER_INIT_CALL and id(n) not in top:
            raise TileError("T.alloc_barrier belongs in the T.Kernel body itself, with the "
                            "kernel's other allocations, not inside a loop, an `if` or a "
                            "T.ws region", n.span)


def _lower_kernel(k: Kernel, hopper: bool) -> Kernel:
    if not is_manual(k):
        return k
    _check_barriers_at_top(k)
    lowering = _Lower(k, hopper)
    body = lowering.visit(k.body)
    stmts = [s for s in stmts_of(body) if not (isinstance(s, SeqStmt) and not s.stmts)]
    # after the allocations in front of the kernel's work (the mbarriers' among them)
    at = next((i for i, s in enumerate(stmts) if not isinstance(s, Allocate)), len(stmts))
    prologue = []
    if lowering.inits:
        init = lowering.inits + ([call_stmt(FENCE_BARRIER_INIT.name)] if hopper else [])
        prologue = [IfThenElse(Call(IS_BLOCK_LEADER.name, (), dt.boolean), seq(init), None),
                    call_stmt(BARRIER_ALL.name)]
    local = tuple(b.name for g, b, _ in lowering.owner.values() if g is not None)
    attrs = {**k.attrs, MANUAL_WARPGROUPS: True}
    if local:
        attrs[WARPGROUP_FRAGMENTS] = tuple(dict.fromkeys(
            (*k.attrs.get(WARPGROUP_FRAGMENTS, ()), *local)))
    return dataclasses.replace(k, body=seq(stmts[:at] + prologue + stmts[at:]), attrs=attrs)


class _UserFences(Mutator):
    """T.fence_proxy_async: the fence on sm_90a; before, no async proxy reads shared memory
    and there is nothing to order."""

    def __init__(self, hopper: bool):
        self.hopper = hopper

    def visit_Evaluate(self, s: Evaluate):
        if not (isinstance(s.value, Call) and s.value.name == FENCE_PROXY_ASYNC):
            return s
        return call_stmt(FENCE_PROXY_ASYNC_SHARED.name, span=s.span) if self.hopper else seq([])


def manual_warpgroups(func, target=None):
    hopper = arch_of(target) == "sm_90a"
    fences = _UserFences(hopper)
    return map_kernels(func, lambda k: _lower_kernel(fences.visit(k), hopper))
