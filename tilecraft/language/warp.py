"""Barriers and warp-level operations of per-thread code: T.sync_threads, T.sync_warp, the
shuffles, warp reductions and lane / warp indices (TileLang's names and arguments).

Each returns an IR call (statements evaluate theirs, as `T.sync_threads()` on a line of its
own); its value differs between threads, so the statement using it runs on every thread
(ir/thread_varying.py). Lanes of a warp are consecutive flat thread indices,
threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z), as on the GPU.
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir import dtypes as dt
from ..ir.annotations import BLOCK_BARRIER, FENCE_PROXY_ASYNC
from ..ir.buffer import FRAGMENT, Buffer, BufferRegion
from ..ir.expr import BufferLoad, Call, Expr, convert, is_python_number
from ..ir.linear import constant_value
from ..ir.visitor import walk

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF
NAMED_BARRIERS = 16     # hardware barriers per block; 0 is __syncthreads'


def _frame(what: str):
    b = bld.active(what)
    if b.in_parallel:
        raise TileError(f"{what} cannot be used inside T.Parallel: T.Parallel assigns its "
                        "iterations to threads itself, so which lanes meet is not the "
                        "program's to say; use it in per-thread code (T.get_thread_binding)",
                        current_span())
    return b.kernel


def _full_mask(what: str, mask):
    if mask is not None and not (isinstance(mask, int) and mask == FULL_MASK):
        raise TileError(f"{what}: mask={mask!r} is not supported yet: every lane of the warp "
                        "takes part (leave mask out, or pass 0xFFFFFFFF)", current_span())


def _static_int(what: str, name: str, value) -> int:
    v = value if isinstance(value, int) and not isinstance(value, bool) else \
        constant_value(value) if isinstance(value, Expr) else None
    if v is None:
        raise TileError(f"{what}: {name} must be a compile-time int, got {value!r}",
                        current_span())
    return v


def _lane_value(what: str, value) -> Expr:
    """The value a thread contributes: a scalar, not a tile, and not a fragment element
    (which thread holds frag[i] is the fragment layout's choice, not the program's)."""
    if isinstance(value, (Buffer, BufferRegion)):
        buffer = value if isinstance(value, Buffer) else value.buffer
        kind = "fragment" if buffer.scope == FRAGMENT else "buffer"
        raise TileError(f"{what} takes one value per thread, not the {kind} {buffer.name}; "
                        "pass a scalar (a T.alloc_var, an element of a T.alloc_local)",
                        current_span())
    if not (isinstance(value, Expr) or is_python_number(value)):
        raise TileError(f"{what} takes a scalar value, got {type(value).__name__}",
                        current_span())
    value = convert(value)
    for n in walk(value):
        if isinstance(n, BufferLoad) and n.buffer.scope == FRAGMENT:
            raise TileError(f"{what}: the value reads fragment {n.buffer.name}, whose elements "
                            "are spread over the threads by its layout; a shuffle exchanges "
                            "per-thread values (copy the element into a T.alloc_var, or "
                            "reduce the fragment with T.reduce_*)", current_span())
    if value.dtype.is_handle:
        raise TileError(f"{what} cannot shuffle a pointer", current_span())
    return value


def _lane_arg(what: str, name: str, x) -> Expr:
    e = convert(x) if is_python_number(x) or isinstance(x, Expr) else None
    if e is None or not e.dtype.is_int:
        raise TileError(f"{what}: {name} must be an integer, got {x!r}", current_span())
    return e


def _width(what: str, width) -> int:
    w = _static_int(what, "width", width)
    if w < 1 or w > WARP_SIZE or w & (w - 1):
        raise TileError(f"{what}: width must be a power of two from 1 to {WARP_SIZE}, got {w}",
                        current_span())
    return w


def _shuffle(name: str, value, lane, width, mask) -> Call:
    what = f"T.{name}"
    _frame(what)
    _full_mask(what, mask)
    v = _lane_value(what, value)
    arg = _lane_arg(what, "the lane argument", lane)
    return Call(name, (v, arg, convert(_width(what, width))), v.dtype, current_span())


def shfl_xor(value, delta, width=WARP_SIZE, mask=None):
    """The value of lane (lane ^ delta) of the same warp (CUDA __shfl_xor_sync); a lane whose
    partner lies in a later group of `width` lanes keeps its own value."""
    return _shuffle("shfl_xor", value, delta, width, mask)


def shfl_down(value, delta, width=WARP_SIZE, mask=None):
    """The value of lane + delta within each group of `width` lanes; the last delta lanes of a
    group keep their own (CUDA __shfl_down_sync)."""
    return _shuffle("shfl_down", value, delta, width, mask)


def shfl_up(value, delta, width=WARP_SIZE, mask=None):
    """The value of lane - delta within each group of `width` lanes; the first delta lanes of
    a group keep their own (CUDA __shfl_up_sync)."""
    return _shuffle("shfl_up", value, delta, width, mask)


def shfl_sync(value, src_lane, width=WARP_SIZE, mask=None):
    """The value of lane src_lane (modulo width) of the calling lane's group of `width`
    lanes: a broadcast (CUDA __shfl_sync)."""
    return _shuffle("shfl_sync", value, src_lane, width, mask)


def _warp_reduce(kind: str):
    def reduce(value):
        what = f"T.warp_reduce_{kind}"
        _frame(what)
        v = _lane_value(what, value)
        if kind != "sum" and v.dtype.is_bool:
            raise TileError(f"{what} needs a number, got a bool", current_span())
        return Call(f"warp_reduce_{kind}", (v,), v.dtype, current_span())
    reduce.__name__ = f"warp_reduce_{kind}"
    reduce.__doc__ = f"The {kind} of `value` over the 32 lanes of the warp, in every lane."
    return reduce


warp_reduce_sum, warp_reduce_max, warp_reduce_min = (_warp_reduce(k)
                                                     for k in ("sum", "max", "min"))


# --- lane and warp indices ------------------------------------------------------------------
def _flat_thread(frame):
    x, y, z = (frame.thread_binding(d) for d in range(3))
    X, Y = frame.thread_extent(0), frame.thread_extent(1)
    return x + X * (y + Y * z)


def _size(what: str, name: str, value, default: int) -> int:
    if value is None:
        return default
    v = _static_int(what, name, value)
    if v < 1:
        raise TileError(f"{what}: {name} must be positive, got {v}", current_span())
    return v


def get_lane_idx(warp_size=None):
    """The calling thread's lane: its flat index modulo the warp size (32)."""
    what = "T.get_lane_idx"
    return _flat_thread(_frame(what)) % _size(what, "warp_size", warp_size, WARP_SIZE)


def get_warp_idx(warp_size=None):
    """The calling thread's warp: its flat index divided by the warp size (32)."""
    what = "T.get_warp_idx"
    return _flat_thread(_frame(what)) // _size(what, "warp_size", warp_size, WARP_SIZE)


def get_warp_idx_sync(warp_size=None):
    """T.get_warp_idx, for converged warps (the same value here)."""
    what = "T.get_warp_idx_sync"
    return _flat_thread(_frame(what)) // _size(what, "warp_size", warp_size, WARP_SIZE)


def get_warp_group_idx(warp_size=None, warps_per_group=None):
    """The calling thread's warpgroup: its flat index divided by warp_size * warps_per_group
    (32 * 4)."""
    what = "T.get_warp_group_idx"
    if warps_per_group is not None and warp_size is None:
        raise TileError(f"{what}: give warp_size when giving warps_per_group", current_span())
    size = _size(what, "warp_size", warp_size, WARP_SIZE) * \
        _size(what, "warps_per_group", warps_per_group, 4)
    return _flat_thread(_frame(what)) // size


# --- barriers -------------------------------------------------------------------------------
def sync_threads(barrier_id=None, arrive_count=None):
    """__syncthreads(); with barrier_id (and arrive_count), `bar.sync barrier_id, count`: the
    calling threads wait until arrive_count threads (all of the block by default, a multiple
    of 32) have reached hardware barrier barrier_id (1..15; 0 is __syncthreads' own)."""
    what = "T.sync_threads"
    frame = _frame(what)
    total = frame.num_threads
    if barrier_id is None and arrive_count is None:
        return Call(BLOCK_BARRIER, (), dt.handle, current_span())
    bid = 0 if barrier_id is None else _static_int(what, "barrier_id", barrier_id)
    if not 0 <= bid < NAMED_BARRIERS:
        raise TileError(f"{what}: barrier_id must be 0..{NAMED_BARRIERS - 1}, got {bid}",
                        current_span())
    count = total if arrive_count is None else _static_int(what, "arrive_count", arrive_count)
    if count < WARP_SIZE or count % WARP_SIZE or count > total:
        raise TileError(f"{what}: arrive_count must be a multiple of {WARP_SIZE} from "
                        f"{WARP_SIZE} to the block's {total} threads, got {count}",
                        current_span())
    if bid == 0 and count == total:
        return Call(BLOCK_BARRIER, (), dt.handle, current_span())
    if bid == 0:
        raise TileError(f"{what}: barrier 0 is the whole block's (__syncthreads); a barrier of "
                        f"{count} of the {total} threads needs barrier_id 1..15",
                        current_span())
    return Call("sync_threads", (convert(bid), convert(count)), dt.handle, current_span())


def fence_proxy_async():
    """fence.proxy.async: this thread's ordinary writes to shared memory are ordered before
    the TMA stores and wgmma reads issued after it (put a barrier after it where other
    threads issue them). Before sm_90 there is no async proxy, and nothing to order."""
    _frame("T.fence_proxy_async")
    return Call(FENCE_PROXY_ASYNC, (), dt.handle, current_span())


def sync_warp(mask=None):
    """__syncwarp(): the lanes of the calling warp wait for each other, and their shared
    memory accesses before it are ordered before those after it."""
    what = "T.sync_warp"
    _frame(what)
    _full_mask(what, mask)
    return Call("sync_warp", (), dt.handle, current_span())
