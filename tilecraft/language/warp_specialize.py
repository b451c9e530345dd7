"""Warp specialization written by hand, as TileLang spells it: mbarriers, TMA loads that
signal them, and regions of the block run by one warpgroup each.

    bars = T.alloc_barrier([128, 128])        # mbarriers in shared memory, each expecting
                                              # that many arrivals a phase
    with T.ws(1):                             # only warpgroup 1 (threads 128..255) runs this
        T.barrier_wait(bars[1], parity)       # wait for the phase of that parity
        T.tma_copy(A[...], A_shared, barrier=bars[0])   # one thread: expect its bytes on the
                                                        # barrier, then load them by TMA
        T.barrier_arrive(bars[0])             # every thread of the region arrives

The tile operators inside `T.ws(g)` run on the warpgroup's 128 threads, and the fragments
they use live in those threads (schedule/manual_warpgroups.py lowers the regions). Regions of
different warpgroups that share a tile written by ordinary stores are also ordered by a block
barrier, so their program order must be a valid order; the interpreter runs them in program
order and refuses a wait that order cannot pass (interp/mbarriers.py).
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..frontend.frames import WarpGroupFrame
from ..ir import dtypes as dt
from ..ir.annotations import (CP_ASYNC_ARRIVE_CALL, MBARRIER_ARRIVE_CALL, MBARRIER_INIT_CALL,
                              MBARRIER_WAIT_CALL, PTX_COMMIT_CALL, PTX_CP_ASYNC_CALL,
                              PTX_WAIT_CALL, TMA_COPY_BARRIER)
from ..ir.buffer import GLOBAL, SHARED, Buffer, is_shared
from ..ir.expr import BufferLoad, Call, Expr, const, convert, is_python_number
from ..ir.stmt import Allocate, Evaluate
from ..ir import tileop as top

U64 = dt.dtype("uint64")


def alloc_barrier(arrive_count):
    """mbarriers in shared memory: one expecting `arrive_count` arrivals a phase, or one per
    entry of a list of counts (index the result to name one)."""
    what = "T.alloc_barrier"
    bld.active(what)
    counts = list(arrive_count) if isinstance(arrive_count, (list, tuple)) else [arrive_count]
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c <= 0
                         for c in counts):
        raise TileError(f"{what}: arrive_count must be a positive int or a non-empty list of "
                        f"them, got {arrive_count!r}", current_span())
    buf = Buffer("__unnamed", (len(counts),), U64, SHARED, current_span())
    bld.emit(Allocate(buf, current_span()), what)
    for i, c in enumerate(counts):
        bld.emit(Evaluate(Call(MBARRIER_INIT_CALL, (BufferLoad(buf, (const(i),)), const(c)),
                               dt.handle, current_span()), current_span()), what)
    return buf


def _barrier(what: str, x) -> BufferLoad:
    """One mbarrier: an element of T.alloc_barrier's buffer, or the buffer (its first)."""
    if isinstance(x, Buffer) and x.dtype is U64 and x.ndim == 1:
        return BufferLoad(x, (const(0),))
    if isinstance(x, BufferLoad) and x.buffer.dtype is U64 and x.buffer.ndim == 1:
        return x
    raise TileError(f"{what}: expected an mbarrier of T.alloc_barrier (the buffer or one of "
                    f"its elements), got {type(x).__name__}", current_span())


def _emit_call(what: str, name: str, args):
    bld.emit(Evaluate(Call(name, tuple(args), dt.handle, current_span()), current_span()),
             what)


def barrier_wait(barrier_id, parity):
    """Wait until the mbarrier's phase of this parity (0 or 1) has completed."""
    what = "T.barrier_wait"
    if not (isinstance(parity, Expr) or is_python_number(parity)):
        raise TileError(f"{what}: parity must be an integer, got {type(parity).__name__}",
                        current_span())
    _emit_call(what, MBARRIER_WAIT_CALL, (_barrier(what, barrier_id), convert(parity)))


def barrier_arrive(barrier_id):
    """Each thread that runs it arrives on the mbarrier once."""
    _emit_call("T.barrier_arrive", MBARRIER_ARRIVE_CALL,
               (_barrier("T.barrier_arrive", barrier_id),))


def mbarrier_wait_parity(mbarrier, parity):
    """TileLang's other spelling of T.barrier_wait."""
    barrier_wait(mbarrier, parity)


def mbarrier_arrive(mbarrier):
    """TileLang's other spelling of T.barrier_arrive."""
    barrier_arrive(mbarrier)


def tma_copy(src, dst, barrier=None):
    """A global -> shared tile copy by TMA, signalling `barrier`: one thread of those running it
    adds the tile's bytes to the barrier's expected transactions and issues the loads; the
    barrier's phase completes when they have landed (and its arrivals are in)."""
    from .tileops import copy_regions
    what = "T.tma_copy"
    bld.active(what)
    if barrier is None:
        raise TileError(f"{what}: barrier= is required: the mbarrier the loads signal",
                        current_span())
    mbar = _barrier(what, barrier)
    _, _, regions = copy_regions(what, src, dst)
    if regions is None or regions[0].buffer.scope != GLOBAL or \
            not is_shared(regions[1].buffer.scope):
        raise TileError(f"{what}: copies a tile of a global tensor into shared memory",
                        current_span())
    s, d = regions
    bld.emit(top.Copy(s, d, {TMA_COPY_BARRIER: mbar}, current_span()), what)


def ptx_cp_async(dst, src, num_elems, predicate=None):
    """cp.async written by hand: num_elems elements (4, 8 or 16 bytes) from global memory at
    src to shared memory at dst (T.access_ptr / T.address_of of each), asynchronously; where
    predicate is false the destination is zero-filled. Wait with T.ptx_commit_group +
    T.ptx_wait_group, or signal an mbarrier with T.cp_async_barrier_noinc."""
    what = "T.ptx_cp_async"
    bld.active(what)
    ends = []
    for role, p, scope in (("destination", dst, "shared"), ("source", src, "global")):
        if not (isinstance(p, Call) and p.name == "address_of"):
            raise TileError(f"{what}: the {role} is a pointer from T.access_ptr or "
                            f"T.address_of, got {type(p).__name__}", current_span())
        buf = p.args[0].buffer
        if (scope == "shared") != is_shared(buf.scope) or \
                (scope == "global") != (buf.scope == GLOBAL):
            raise TileError(f"{what}: the {role} must be in {scope} memory, but "
                            f"{buf.name} is {buf.scope}", current_span())
        ends.append(buf)
    if not isinstance(num_elems, int) or isinstance(num_elems, bool):
        raise TileError(f"{what}: num_elems must be an int known when the kernel is written, "
                        f"got {num_elems!r}", current_span())
    size = num_elems * ends[0].dtype.bits // 8
    if size not in (4, 8, 16) or ends[0].dtype.bits != ends[1].dtype.bits:
        raise TileError(f"{what}: {num_elems} x {ends[0].dtype} is {size} bytes; cp.async "
                        "copies 4, 8 or 16 bytes between buffers of one element size",
                        current_span())
    pred = const(True) if predicate is None else convert(predicate)
    _emit_call(what, PTX_CP_ASYNC_CALL, (dst, src, const(size), pred))


def cp_async_barrier_noinc(barrier):
    """Each thread running it arrives on the mbarrier once the T.ptx_cp_async copies it issued
    before have landed; the arrivals count toward the barrier's arrive_count."""
    what = "T.cp_async_barrier_noinc"
    _emit_call(what, CP_ASYNC_ARRIVE_CALL, (_barrier(what, barrier),))


def ptx_commit_group():
    """Close this thread's group of T.ptx_cp_async copies."""
    _emit_call("T.ptx_commit_group", PTX_COMMIT_CALL, ())


def ptx_wait_group(n=0):
    """Wait until at most n of this thread's committed copy groups are still in flight."""
    what = "T.ptx_wait_group"
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise TileError(f"{what}: takes a count of groups (an int >= 0) known when the kernel "
                        f"is written, got {n!r}", current_span())
    _emit_call(what, PTX_WAIT_CALL, (const(n),))


def ws(*groups):
    """A region run by the given warpgroups (128 threads each, numbered from 0) only."""
    what = "T.ws"
    bld.active(what)
    if not groups or any(isinstance(g, bool) or not isinstance(g, int) or g < 0
                         for g in groups):
        raise TileError(f"{what}: takes one or more warpgroup indices (ints from 0), got "
                        f"{groups!r}", current_span())
    return WarpGroupFrame(tuple(sorted(set(groups))), current_span())


__all__ = ["alloc_barrier", "barrier_wait", "barrier_arrive", "mbarrier_wait_parity",
           "mbarrier_arrive", "tma_copy", "ptx_cp_async", "cp_async_barrier_noinc",
           "ptx_commit_group", "ptx_wait_group", "ws"]

