"""Warp shuffles, warp reductions and __syncwarp for all threads of a block at once.

A shuffle reads another lane's value: the executing lanes must be whole warps (a shuffle with a
full mask that only part of a warp executes is reported), and a lane read must execute it too.
Which lane each thread reads, and the butterfly of a warp reduction, are the interpreter's
(interp/threads.py), so both agree bit for bit. __syncwarp orders the shared-memory accesses
of its warp's lanes, and only theirs: the race checker's partial barrier.
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from ....interp.threads import REDUCTIONS, WARP, butterfly, shuffle_sources
from .checker import Site


def whole_warps(m, what: str) -> bool:
    """True when the executing lanes are whole warps; else the divergence is reported."""
    if m.T % WARP:
        raise TileError(f"{what}: the emulator needs a block of whole warps, got {m.T} "
                        "threads", m.span)
    if m.lanes.size == m.T:
        return True
    live = np.zeros(m.T, bool)
    live[m.lanes] = True
    per_warp = live.reshape(-1, WARP)
    partial = per_warp.any(1) & ~per_warp.all(1)
    if partial.any():
        w = int(np.argmax(partial))
        m.reports.add("warp-divergence",
                      f"{what} is warp-collective but only some lanes of warp {w} execute it "
                      f"at {Site(what, '', m.span).where()}", None,
                      (w * WARP + int(np.argmax(per_warp[w])),), (Site(what, "", m.span),))
    return False


def _read_lanes(m, what: str, value, src):
    """value (per thread) of lane src of each thread; a lane read that does not execute the
    shuffle is reported."""
    value = np.broadcast_to(np.asarray(value), (m.T,))
    if (src >= m.T).any() or (src < 0).any():
        raise TileError(f"{what} reads past the block's {m.T} threads", m.span)
    if m.lanes.size != m.T:
        live = np.zeros(m.T, bool)
        live[m.lanes] = True
        idle = live & ~live[src]
        if idle.any():
            t = int(np.argmax(idle))
            m.reports.add("warp-divergence", f"{what}: thread {t} reads lane {src[t] % WARP} "
                          "of its warp, which does not execute the shuffle", None, (t,),
                          (Site(what, "", m.span),))
    return value[src]


def shfl_xor(m, value, lane_mask):
    """tc::shfl_xor(v, mask) of the whole warp (the reductions of tile ops)."""
    if np.asarray(value).ndim == 0:
        return value
    mask = int(np.asarray(lane_mask).reshape(-1)[0])
    return _read_lanes(m, "shfl_xor", value, np.arange(m.T) ^ mask)


def shfl_group(m, kind: str, width: int, value, arg):
    """tc::shfl_<kind>_group<width>(v, arg): T.shfl_xor / _down / _up / _sync."""
    what = f"shfl_{kind}"
    whole_warps(m, what)
    return _read_lanes(m, what, value, shuffle_sources(kind, arg, width, m.T))


def warp_reduce(m, reduction: str, value):
    """tc::warp_reduce_<reduction>(v): T.warp_reduce_sum / max / min."""
    what = f"warp_reduce_{reduction}"
    whole_warps(m, what)
    v = np.broadcast_to(np.asarray(value), (m.T,))
    return butterfly(REDUCTIONS[reduction], v, _dtype_of(v))


def syncwarp(m):
    """tc::syncwarp(): the lanes of each executing warp wait for each other (each warp a group
    of its own: other warps stay unordered, even when every warp executes it)."""
    whole_warps(m, "syncwarp")
    live = np.zeros(m.T, bool)
    live[m.lanes] = True
    per_warp = live.reshape(-1, WARP)
    whole = (per_warp & per_warp.all(1, keepdims=True)).reshape(-1)
    m.tracker.partial_barrier(np.where(whole, np.arange(m.T) // WARP, -1))


def _dtype_of(values: np.ndarray):
    from ....ir import dtypes as dt
    return dt.dtype(values.dtype.name)
