"""Per-thread code on CUDA threads: the thread indices a program reads, and its warp
collectives and barriers, in terms the header library has.

(T.get_thread_binding's variables become terms of the lowered kernel's flat thread index:
ir/thread_varying.thread_indices, applied by lower_tile_ops.) The language's lane calls
(T.shfl_*, T.warp_reduce_*) and barriers (T.sync_threads with a barrier id, T.sync_warp) become
the header functions of warp.h and sync.h (the whole-block T.sync_threads() already is one).
"""
from __future__ import annotations

from ...ir.expr import Call
from ...ir.visitor import Mutator
from ...interp.threads import SHUFFLE_KINDS
from .intrinsics import NAMED_BARRIER_SYNC, SHFL_GROUP, SYNCWARP, WARP_REDUCE


class _HeaderCalls(Mutator):
    def visit_Call(self, e: Call):
        e = self.generic_visit(e)
        if e.name in SHUFFLE_KINDS:
            name = SHFL_GROUP.format(shuffle=SHUFFLE_KINDS[e.name], width=e.args[2].value)
            return Call(name, e.args[:2], e.dtype, e.span)
        if e.name.startswith("warp_reduce_"):
            return Call(WARP_REDUCE.format(reduction=e.name[len("warp_reduce_"):]), e.args,
                        e.dtype, e.span)
        if e.name == "sync_threads":
            return Call(NAMED_BARRIER_SYNC.name, e.args, e.dtype, e.span)
        if e.name == "sync_warp":
            return Call(SYNCWARP.name, (), e.dtype, e.span)
        return e


def header_calls(body):
    """body with the language's lane calls and barriers written as header calls."""
    return _HeaderCalls().visit(body)
