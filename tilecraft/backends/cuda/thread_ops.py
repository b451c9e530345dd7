"""Per-thread code on CUDA threads: the thread indices a program reads, and its warp
collectives and barriers, in terms the header library has.

(T.get_thread_binding's variables become terms of the lowered kernel's flat thread index:
ir/thread_varying.thread_indices, applied by lower_tile_ops.) The language's lane calls
(T.shfl_*, T.warp_reduce_*) and barriers (T.sync_threads with a barrier id, T.sync_warp) become
the header functions of warp.h and sync.h (the whole-block T.sync_threads() already is one), and
cp.async written by hand (T.ptx_cp_async, T.ptx_commit_group, T.ptx_wait_group) those of
async.h.
"""
from __future__ import annotations

from ...ir.expr import Call
from ...ir.visitor import Mutator
from ...interp.threads import SHUFFLE_KINDS
from ...ir.annotations import PTX_COMMIT_CALL, PTX_CP_ASYNC_CALL, PTX_WAIT_CALL
from .intrinsics import (CP_ASYNC_CA, CP_ASYNC_CG_16, CP_ASYNC_COMMIT, CP_ASYNC_WAIT,
                         NAMED_BARRIER_SYNC, SHFL_GROUP, SYNCWARP, WARP_REDUCE)


class _AsyncGroupCalls(Mutator):
    """T.ptx_commit_group / T.ptx_wait_group, which block-wide code holds too (after a
    T.Parallel(prefer_async=True) nest)."""

    def visit_Call(self, e: Call):
        e = self.generic_visit(e)
        if e.name == PTX_COMMIT_CALL:
            return Call(CP_ASYNC_COMMIT.name, (), e.dtype, e.span)
        if e.name == PTX_WAIT_CALL:
            return Call(CP_ASYNC_WAIT.format(n=e.args[0].value), (), e.dtype, e.span)
        return e


class _HeaderCalls(_AsyncGroupCalls):
    def visit_Call(self, e: Call):
        e = super().visit_Call(e)
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
        if e.name == PTX_CP_ASYNC_CALL:   # (dst, src, bytes, pred): 16 bytes bypass L1
            dst, src, size, pred = e.args
            name = CP_ASYNC_CG_16.name if size.value == 16 else \
                CP_ASYNC_CA.format(size=size.value)
            return Call(name, (dst, src, pred), e.dtype, e.span)
        return e


def header_calls(body, per_thread: bool = True):
    """body with the language's lane calls and barriers written as header calls (per-thread
    code), or only its copy-group commits and waits (block-wide code)."""
    return (_HeaderCalls() if per_thread else _AsyncGroupCalls()).visit(body)
