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
from ..ir.annotations import (MBARRIER_ARRIVE_CALL, MBARRIER_INIT_CALL, MBARRIER_WAIT_CALL,
                              TMA_COPY_BARRIER)
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
           "mbarrier_arrive", "tma_copy", "ws"]

