"""finalize_barriers: what each block-wide barrier becomes on the target.

- wgmma reads its shared operands through the async proxy, which does not see writes made by
  ordinary stores or cp.async (the generic proxy) unless the writing thread executes
  fence.proxy.async.shared::cta after them (PTX ISA, "Proxy fences"). The barriers that publish
  a shared tile to its readers are exactly where every writer has finished, so in a kernel that
  issues wgmma each barrier is preceded by that fence.
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


def _issues_wgmma(kernel: Kernel) -> bool:
    return any(isinstance(n, Call) and n.name.startswith("tc::wgmma_m64") for n in walk(kernel))


class _Barriers(Mutator):
    def __init__(self, fence: bool, consumers: int | None):
        self.fence = fence
        self.consumers = consumers

    def visit_Evaluate(self, s: Evaluate):
        if not is_sync(s):
            return s
        out = [s]
        if self.consumers is not None:
            out = [call_stmt("tc::named_barrier_sync", const(CONSUMER_BARRIER),
                             const(self.consumers), span=s.span)]
        if self.fence:
            out.insert(0, call_stmt("tc::fence_proxy_async_shared", span=s.span))
        return seq(out) if len(out) > 1 else out[0]


def finalize_barriers(func):
    def rebuild(s):
        if isinstance(s, Kernel):
            consumers = s.num_threads if s.attrs.get("producer_threads") else None
            fence = _issues_wgmma(s)
            if consumers is None and not fence:
                return s
            return _Barriers(fence, consumers).visit(s)
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s
    return dataclasses.replace(func, body=rebuild(func.body))
