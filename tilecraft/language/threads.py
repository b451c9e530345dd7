"""The launch's own indices: threadIdx and blockIdx of the enclosing T.Kernel.

TileLang's T.get_thread_binding / T.get_block_binding family and TVMScript's T.thread_binding
loops. A kernel that reads its thread index writes code for one thread: where a statement's
values depend on it (ir/thread_varying.py), every thread runs the statement with its own
index, instead of the block running it once.
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir.expr import Const

_AXES = ("x", "y", "z")


def _kernel(what: str):
    b = bld.active(what)
    if b.in_parallel:
        raise TileError(f"{what} cannot be used inside T.Parallel: T.Parallel spreads its "
                        "iterations over the threads itself; read the index before the loop, "
                        "or write a per-thread loop with T.serial", current_span())
    return b.kernel


def _dim(what: str, dim, count: int = 3) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < count:
        raise TileError(f"{what}: dim must be 0, 1 or 2 (the x, y or z index), got {dim!r}",
                        current_span())
    return dim


def get_thread_binding(dim=0):
    """threadIdx.x / .y / .z (dim 0 / 1 / 2) of the calling thread."""
    what = "T.get_thread_binding"
    return _kernel(what).thread_binding(_dim(what, dim))


def get_thread_bindings():
    """[threadIdx.x, threadIdx.y, threadIdx.z]."""
    frame = _kernel("T.get_thread_bindings")
    return [frame.thread_binding(d) for d in range(3)]


def get_thread_extent(dim=0) -> int:
    """blockDim along dim: the T.Kernel's threads= entry (1 where it gives none)."""
    what = "T.get_thread_extent"
    return _kernel(what).thread_extent(_dim(what, dim))


def get_thread_extents() -> list:
    frame = _kernel("T.get_thread_extents")
    return [frame.thread_extent(d) for d in range(3)]


def _block_dim(what: str, frame, dim) -> int:
    _dim(what, dim)
    if dim >= len(frame.grid):
        raise TileError(f"{what}({dim}): the T.Kernel's grid has {len(frame.grid)} "
                        f"dimension(s), so there is no blockIdx.{_AXES[dim]}", current_span())
    return dim


def get_block_binding(dim=0):
    """blockIdx.x / .y / .z: the same variable `with T.Kernel(...) as (bx, by)` binds."""
    what = "T.get_block_binding"
    frame = _kernel(what)
    return frame.block_vars[_block_dim(what, frame, dim)]


def get_block_bindings():
    """The block indices, one per grid dimension."""
    return list(_kernel("T.get_block_bindings").block_vars)


def _extent(e):
    return e.value if isinstance(e, Const) else e


def get_block_extent(dim=0):
    """gridDim along dim: an int, or the expression of a symbolic grid extent."""
    what = "T.get_block_extent"
    frame = _kernel(what)
    return _extent(frame.grid[_block_dim(what, frame, dim)])


def get_block_extents() -> list:
    return [_extent(g) for g in _kernel("T.get_block_extents").grid]


def thread_binding(start, stop=None, thread=None, annotations=None):
    """TVMScript's loop over a launch index, `for i in T.thread_binding(0, n,
    thread="threadIdx.x")` (or `i = T.thread_binding(...)`): inside a T.Kernel the index
    itself, so the loop must cover the launch's whole extent along that axis."""
    what = "T.thread_binding"
    frame = _kernel(what)
    if annotations:
        raise TileError(f"{what}: annotations= are not supported", current_span())
    if stop is None:
        start, stop = 0, start
    tags = {f"{kind}.{axis}": (kind, d) for kind in ("threadIdx", "blockIdx")
            for d, axis in enumerate(_AXES)}
    if thread not in tags:
        raise TileError(f"{what}: thread= must name a launch index, one of "
                        f"{', '.join(tags)}; got {thread!r}", current_span())
    kind, dim = tags[thread]
    if kind == "threadIdx":
        extent, index = frame.thread_extent(dim), frame.thread_binding(dim)
    else:
        _block_dim(what, frame, dim)
        extent, index = _extent(frame.grid[dim]), frame.block_vars[dim]
    if not (isinstance(start, int) and start == 0) or not _same_extent(stop, extent):
        raise TileError(f"{what}(..., thread={thread!r}) must cover the launch's extent along "
                        f"that axis, 0 to {extent}; got {start!r} to {stop!r}", current_span())
    return index


def _same_extent(stop, extent) -> bool:
    if isinstance(stop, Const):
        stop = stop.value
    return stop is extent or (isinstance(stop, int) and not isinstance(stop, bool) and
                              stop == extent)
