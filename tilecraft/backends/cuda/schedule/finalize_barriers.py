"""finalize_barriers: what each block-wide barrier becomes on the target.

- wgmma reads its shared operands through the async proxy, which does not see writes made by
  ordinary stores or cp.async (the generic proxy) unless the writing thread executes
  fence.proxy.async.shared::cta after them (PTX ISA, "Proxy fences"). The barriers that publish
  a shared tile to its readers are exactly where every writer has finished, so in a kernel that
  issues wgmma each barrier is preceded by that fence.
- A TMA store reads its shared tile through the async proxy too (the same fence), and goes
  on reading after the issuing thread moves on: that thread waits until its stores have read
  their tiles (cp.async.bulk.wait_group.read 0, a no-op in threads that issued none) before
  each barrier, and at the end of the kernel, so no barrier lets a thread overwrite a tile a
  store still reads and no block leaves while one does. Where a store reads a stage of a
  warp-specialized loop (a loop copying tiles through shared memory), the wait also precedes
  each release of a stage, the mbarrier arrive after which the producer refills it.
- In a warp-specialized kernel (warp_specialize) the producer warpgroup never reaches the
  consumers' barriers, so those synchronize the T consumer threads only: named barrier 1 over
  T threads (barrier 0 stays __syncthreads, used once after the mbarriers are initialized).
- A barrier inside a T.ws(g) region (manual_warpgroups) synchronizes that warpgroup only:
  named barrier REGION_BARRIER + g over its 128 threads.

A barrier that follows another in the same statement list leaves out the fence when the
statements between them write no shared tile the async proxy reads (a reduction's scratch
slots): every such write is then fenced by the next barrier of its own list, or by the first
barrier of a list (which keeps it) or of an enclosing one whose statements contain it. MLA's
loop keeps two fences of three this way. (Leaving out the store wait the same way where no
store was issued made attention slower on the H100, with the same fences and barriers,
bench/mha_fwd.md: the wait stays in front of every barrier.)
"""
from __future__ import annotations

import dataclasses

from ....ir.buffer import is_shared
from ....ir.expr import Binary, BufferLoad, Call, Const, const
from ....ir.stmt import BufferStore, Evaluate, Kernel, SeqStmt, call_stmt, seq
from ....ir.visitor import Mutator, map_kernels, walk
from ....ir.annotations import (MANUAL_WARPGROUPS, PRODUCER_THREADS, is_sync,
                                is_warpgroup_branch)
from ..tileops.wgmma import WARPGROUP
from ..intrinsics import (FENCE_PROXY_ASYNC_SHARED, LD_SHARED, LDMATRIX, LDMATRIX_TRANS,
                          MAKE_SMEM_DESC, MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER, MBARRIER_CALLS,
                          NAMED_BARRIER_SYNC, TMA_LOADS, TMA_STORE_WAIT,
                          TMA_STORES, WGMMA_ISSUES, NAMESPACE, is_call_to)

CONSUMER_BARRIER = 1
REGION_BARRIER = 6     # + the warpgroup of a T.ws region (seesaw_warpgroups uses 2 to 5)


def _issues(kernel: Kernel, *entries) -> bool:
    return any(isinstance(n, Call) and is_call_to(n.name, *entries) for n in walk(kernel))


STORE_READ_WAIT = TMA_STORE_WAIT.format(n=0)
# The consumers' release of a pipeline stage (warp_specialize, overlap_wgmma, seesaw_warpgroups).
STAGE_RELEASES = (MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER)


# Calls that read (or only order) the shared memory whose address they take; any other call
# taking a shared address may write it. The first two read it through the async proxy.
_ASYNC_READERS = (MAKE_SMEM_DESC, *TMA_STORES)
_READ_ONLY = _ASYNC_READERS + (LDMATRIX, LDMATRIX_TRANS, LD_SHARED, *MBARRIER_CALLS)


def _shared_addresses(call: Call) -> set:
    return {id(a.args[0].buffer) for a in walk(call) if isinstance(a, Call) and
            a.name == "address_of" and isinstance(a.args[0], BufferLoad) and
            is_shared(a.args[0].buffer.scope)}


def _stores_from_stages(kernel: Kernel) -> bool:
    """Whether a TMA store reads a tile that TMA loads fill (a stage of a pipelined loop)."""
    loaded, stored = set(), set()
    for n in walk(kernel):
        if isinstance(n, Call) and is_call_to(n.name, *TMA_LOADS):
            loaded |= _shared_addresses(n)
        elif isinstance(n, Call) and is_call_to(n.name, *TMA_STORES):
            stored |= _shared_addresses(n)
    return bool(loaded & stored)


def _async_read(kernel: Kernel) -> set:
    """ids of the shared buffers wgmma or a TMA store reads."""
    out = set()
    for n in walk(kernel):
        if isinstance(n, Call) and is_call_to(n.name, *_ASYNC_READERS):
            out |= _shared_addresses(n)
    return out


def _generic_writes(stmts) -> set:
    """ids of the shared buffers the statements may write with ordinary stores or calls."""
    out = set()
    for s in stmts:
        for n in walk(s):
            if isinstance(n, BufferStore) and is_shared(n.buffer.scope):
                out.add(id(n.buffer))
            elif isinstance(n, Call) and n.name.startswith(NAMESPACE) and \
                    not is_call_to(n.name, *_READ_ONLY):
                out |= _shared_addresses(n)
    return out


class _Barriers(Mutator):
    def __init__(self, fence: bool, consumers: int | None, stores: bool, async_read: set,
                 stage_stores: bool, manual: bool = False):
        self.fence = fence
        self.consumers = consumers
        self.stores = stores
        self.async_read = async_read
        self.stage_stores = stage_stores
        self.manual = manual
        self.region = None    # the warpgroup of the T.ws region being visited

    def visit_IfThenElse(self, s):
        group = _region_group(s) if self.manual else None
        if group is None:
            return self.generic_visit(s)
        outer, self.region = self.region, group
        try:
            then_body = self.visit(s.then_body)
        finally:
            self.region = outer
        else_body = None if s.else_body is None else self.visit(s.else_body)
        return dataclasses.replace(s, then_body=then_body, else_body=else_body)

    def visit_SeqStmt(self, s: SeqStmt):
        out, since = [], None  # the statements since this list's last barrier
        for x in s.stmts:
            if is_sync(x):
                out.append(self.barrier(x, since))
                since = []
            else:
                out.append(self.visit(x))
                if since is not None:
                    since.append(x)
        return seq(out, s.span)

    def visit_Evaluate(self, s: Evaluate):
        if is_sync(s):
            return self.barrier(s, None)
        if self.stage_stores and isinstance(s.value, Call) and \
                is_call_to(s.value.name, *STAGE_RELEASES):
            return seq([call_stmt(STORE_READ_WAIT, span=s.span), s])
        return s

    def barrier(self, s: Evaluate, since):
        """What the barrier s becomes; since: the statements between it and the previous
        barrier of its list (None: it is the list's first)."""
        out = [s]
        if self.region is not None:
            out = [call_stmt(NAMED_BARRIER_SYNC.name, const(REGION_BARRIER + self.region),
                             const(WARPGROUP), span=s.span)]
        elif self.consumers is not None:
            out = [call_stmt(NAMED_BARRIER_SYNC.name, const(CONSUMER_BARRIER),
                             const(self.consumers), span=s.span)]
        if self.stores:
            out.insert(0, call_stmt(STORE_READ_WAIT, span=s.span))
        if self.fence and (since is None or _generic_writes(since) & self.async_read):
            out.insert(0, call_stmt(FENCE_PROXY_ASYNC_SHARED.name, span=s.span))
        return seq(out) if len(out) > 1 else out[0]


def _region_group(s) -> int | None:
    """g of a T.ws(g) region's `if (warpgroup_index() == g)` (None for anything else, and for
    a region of several warpgroups, whose barriers stay block barriers)."""
    if not is_warpgroup_branch(s) or not isinstance(s.cond, Binary) or s.cond.op != "==":
        return None
    b = s.cond.b
    return int(b.value) if isinstance(b, Const) else None


def finalize_barriers(func):
    def finalize(k):
        consumers = k.num_threads if k.attrs.get(PRODUCER_THREADS) else None
        manual = bool(k.attrs.get(MANUAL_WARPGROUPS))
        stores = _issues(k, *TMA_STORES)
        fence = stores or _issues(k, *WGMMA_ISSUES)
        if consumers is None and not fence and not manual:
            return k
        kernel = _Barriers(fence, consumers, stores, _async_read(k),
                           stores and _stores_from_stages(k), manual).visit(k)
        if stores:
            kernel = dataclasses.replace(kernel, body=seq(
                [kernel.body, call_stmt(STORE_READ_WAIT, span=kernel.span)]))
        return kernel
    return map_kernels(func, finalize)
