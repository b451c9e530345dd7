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
  store still reads and no block leaves while one does.
- In a warp-specialized kernel (warp_specialize) the producer warpgroup never reaches the
  consumers' barriers, so those synchronize the T consumer threads only: named barrier 1 over
  T threads (barrier 0 stays __syncthreads, used once after the mbarriers are initialized).
"""
from __future__ import annotations

import dataclasses

from ..ir.expr import Call, const
from ..ir.stmt import Evaluate, Kernel, SeqStmt, call_stmt, seq
from ..ir.visitor import Mutator, walk
from .insert_barriers import is_sync

CONSUMER_BARRIER = 1


def _issues(kernel: Kernel, prefix: str) -> bool:
    return any(isinstance(n, Call) and n.name.startswith(prefix) for n in walk(kernel))


STORE_READ_WAIT = "tc::tma_store_wait<0>"


class _Barriers(Mutator):
    def __init__(self, fence: bool, consumers: int | None, stores: bool):
        self.fence = fence
        self.consumers = consumers
        self.stores = stores

    def visit_Evaluate(self, s: Evaluate):
        if not is_sync(s):
            return s
        out = [s]
        if self.consumers is not None:
            out = [call_stmt("tc::named_barrier_sync", const(CONSUMER_BARRIER),
                             const(self.consumers), span=s.span)]
        if self.stores:
            out.insert(0, call_stmt(STORE_READ_WAIT, span=s.span))
        if self.fence:
            out.insert(0, call_stmt("tc::fence_proxy_async_shared", span=s.span))
        return seq(out) if len(out) > 1 else out[0]


def finalize_barriers(func):
    def rebuild(s):
        if isinstance(s, Kernel):
            consumers = s.num_threads if s.attrs.get("producer_threads") else None
            stores = _issues(s, "tc::tma_store_")
            fence = stores or _issues(s, "tc::wgmma_m64")
            if consumers is None and not fence:
                return s
            kernel = _Barriers(fence, consumers, stores).visit(s)
            if stores:
                kernel = dataclasses.replace(kernel, body=seq(
                    [kernel.body, call_stmt(STORE_READ_WAIT, span=kernel.span)]))
            return kernel
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s
    return dataclasses.replace(func, body=rebuild(func.body))
