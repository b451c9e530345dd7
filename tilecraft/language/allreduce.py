"""TVM's cross-thread reduction as TileLang kernels write it (the dequantizing GEMVs):

    with T.attr(T.comm_reducer(lambda x, y: x + y, [T.Cast(accum_dtype, 0)]), "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, red[0], kr,
                                          dtype="handle"))

combines `acc[0]` of the threads that differ only in the thread indices listed (kr) and leaves
the result in `red[0]` of each of them. Where those threads are power-of-two groups within one
warp (threadIdx.x up to 32 threads, or a small y beneath it) it is an xor butterfly of
T.shfl_xor steps, one per bit of their lanes; otherwise (threadIdx.y over 32 threads of 2
apart) the values meet in shared memory. Several values at once and a condition other than
True are refused.
"""
from __future__ import annotations

import math

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..frontend.frames import AttrFrame
from ..ir import dtypes as dt
from ..ir.expr import BufferLoad, Const, Var, cast, convert
from ..ir.stmt import BufferStore, For
from ..ir.thread_varying import is_local
from .warp import WARP_SIZE, shfl_xor


class CommReducer:
    """T.comm_reducer(combiner, identity): how values combine (commutatively)."""

    def __init__(self, combiner, identity):
        self.combiner = combiner
        self.identity = identity


def comm_reducer(combiner, identity):
    if not callable(combiner):
        raise TileError("T.comm_reducer takes the combining function first, e.g. "
                        "lambda x, y: x + y", current_span())
    if isinstance(identity, (list, tuple)) and len(identity) != 1:
        raise TileError("T.comm_reducer: a reducer of several values at once is not supported "
                        "yet (give one identity)", current_span())
    return CommReducer(combiner, identity)


def attr(node, key, value=None):
    """`with T.attr(reducer, "reduce_scope", ...)`: the reducer of the T.tvm_thread_allreduce
    inside (or after, written as a statement). Other attributes are not supported yet."""
    b = bld.active("T.attr")
    if key != "reduce_scope" or not isinstance(node, CommReducer):
        raise TileError(f"T.attr({key!r}) is not supported by tilecraft yet: only "
                        "T.attr(T.comm_reducer(...), \"reduce_scope\", ...) around "
                        "T.tvm_thread_allreduce is", current_span())
    return AttrFrame(b, node, current_span())


def tvm_thread_allreduce(*args, dtype="handle"):
    what = "T.tvm_thread_allreduce"
    b = bld.active(what)
    if b.in_parallel:
        raise TileError(f"{what} cannot be used inside T.Parallel", current_span())
    reducer = b.reduce_scope
    if reducer is None:
        raise TileError(f"{what} needs its reducer: put it in `with T.attr(T.comm_reducer(...), "
                        "\"reduce_scope\", ...)`", current_span())
    if len(args) < 5 or _value(args[0]) != 1:
        raise TileError(f"{what}(count, value, cond, result, *thread_indices): a reduction of "
                        "one value is supported (count 1)", current_span())
    _, value, cond, result, *indices = args
    if not (cond is True or (isinstance(cond, Const) and cond.value is True)):
        raise TileError(f"{what}: a condition other than True is not supported yet",
                        current_span())
    if not isinstance(result, BufferLoad) or not is_local(result.buffer):
        raise TileError(f"{what}: the result must be an element of a T.alloc_local or "
                        "T.alloc_var, such as red[0]", current_span())

    def step(v):   # each step's value goes through the result: one shuffle per step
        b.emit(BufferStore(result.buffer, result.indices, cast(v, result.dtype),
                           current_span()))
    reduced = _reduced_dims(what, b.kernel, indices)
    masks = _lane_masks(b.kernel, reduced)
    if masks is None:
        _through_shared(b, reducer, value, result, reduced)
        return bld.EMITTED
    step(value)
    for mask in masks:
        step(reducer.combiner(result, shfl_xor(result, mask)))
    return bld.EMITTED   # T.evaluate(...) around it has nothing left to do


def _value(x):
    return x.value if isinstance(x, Const) else x


def _reduced_dims(what: str, frame, indices) -> list:
    """The thread dimensions the listed indices are."""
    dims = []
    for v in indices:
        found = [d for d in range(len(frame.threads)) if frame.thread_vars[d] is v]
        if not found:
            raise TileError(f"{what}: {v!r} is not a thread index of this T.Kernel "
                            "(T.get_thread_binding)", current_span())
        dims.append(found[0])
    return dims


def _stride(frame, d) -> int:
    return math.prod(frame.threads[:d])


def _lane_masks(frame, dims) -> list | None:
    """The xor masks of a butterfly over the reduced thread dimensions (each one's lanes);
    None where their threads are not power-of-two groups within one warp."""
    masks = []
    for d in dims:
        stride, extent = _stride(frame, d), frame.threads[d]
        if extent & (extent - 1) or stride & (stride - 1) or stride * extent > WARP_SIZE:
            return None
        step = stride
        while step < stride * extent:
            masks.append(step)
            step *= 2
    return sorted(masks, reverse=True)


def _through_shared(b, reducer, value, result, dims):
    """A reduction over threads of several warps (or not a power of two of them): each thread
    puts its value in a shared slot, and each combines its group's slots in order (the
    barriers between are insert_barriers'). The result is the same in every thread of the
    group, as the butterfly's."""
    from .allocate import alloc_shared
    frame = b.kernel
    span = current_span()
    scratch = alloc_shared((frame.num_threads,), result.dtype)
    index = [frame.thread_binding(d) for d in range(len(frame.threads))]
    flat = sum((index[d] * _stride(frame, d) for d in range(len(frame.threads))), convert(0))
    base = flat - sum((index[d] * _stride(frame, d) for d in dims), convert(0))
    b.emit(BufferStore(scratch, (flat,), cast(convert(value), result.dtype), span))
    identity = reducer.identity
    identity = identity[0] if isinstance(identity, (list, tuple)) else identity
    b.emit(BufferStore(result.buffer, result.indices, cast(convert(identity), result.dtype),
                       span))
    k = Var("k_reduce", dt.int32, span)
    offset, below = convert(0), 1
    for d in dims:
        offset = offset + (k // below) % frame.threads[d] * _stride(frame, d)
        below *= frame.threads[d]
    member = BufferLoad(scratch, (base + offset,))
    body = BufferStore(result.buffer, result.indices,
                       cast(reducer.combiner(result, member), result.dtype), span)
    b.emit(For(k, convert(0), convert(below), "serial", body, span=span))
