"""fence_async_proxy: order ordinary shared-memory writes before the tensor cores read them.

wgmma reads its shared operands through the async proxy, which does not see writes made by
ordinary stores or cp.async (the generic proxy) unless the writing thread executes
fence.proxy.async.shared::cta after them. The barriers that publish a shared tile to the
threads that read it are exactly where every writer has finished, so in a kernel that issues
wgmma each block-wide barrier is preceded by that fence (PTX ISA, "Proxy fences").
"""
from __future__ import annotations

import dataclasses

from ..ir import dtypes as dt
from ..ir.expr import Call
from ..ir.stmt import Evaluate, Kernel, SeqStmt, seq
from ..ir.visitor import Mutator, walk
from .insert_barriers import is_sync


def _issues_wgmma(kernel: Kernel) -> bool:
    return any(isinstance(n, Call) and n.name.startswith("tc::wgmma_m64") for n in walk(kernel))


class _Fence(Mutator):
    def visit_Evaluate(self, s: Evaluate):
        if not is_sync(s):
            return s
        return seq([Evaluate(Call("tc::fence_proxy_async_shared", (), dt.handle), s.span), s])


def fence_async_proxy(func):
    def rebuild(s):
        if isinstance(s, Kernel):
            return _Fence().visit(s) if _issues_wgmma(s) else s
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s
    return dataclasses.replace(func, body=rebuild(func.body))
