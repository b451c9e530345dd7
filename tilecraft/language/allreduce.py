"""TVM's cross-thread reduction as TileLang kernels write it (the dequantizing GEMVs):

    with T.attr(T.comm_reducer(lambda x, y: x + y, [T.Cast(accum_dtype, 0)]), "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, red[0], kr,
                                          dtype="handle"))

combines `acc[0]` of the threads that differ only in the thread indices listed (kr) and leaves
the result in `red[0]` of each of them. Here it is an xor butterfly of T.shfl_xor steps, one per
bit of the listed indices' lanes: it needs them to be power-of-two extents whose threads lie in
one warp (threadIdx.x up to 32 threads, or a small y beneath it); wider reductions, several
values at once and a condition other than True are refused.
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..frontend.frames import AttrFrame
from ..ir.expr import BufferLoad, Const, cast
from ..ir.stmt import BufferStore
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
    step(value)
    for mask in _lane_masks(what, b.kernel, indices):
        step(reducer.combiner(result, shfl_xor(result, mask)))
    return bld.EMITTED   # T.evaluate(...) around it has nothing left to do


def _value(x):
    return x.value if isinstance(x, Const) else x


def _lane_masks(what: str, frame, indices) -> list:
    """The xor masks of a butterfly over the listed thread indices (each index's lanes)."""
    masks = []
    for v in indices:
        dims = [d for d in range(len(frame.threads)) if frame.thread_vars[d] is v]
        if not dims:
            raise TileError(f"{what}: {v!r} is not a thread index of this T.Kernel "
                            "(T.get_thread_binding)", current_span())
        d = dims[0]
        stride = 1
        for e in frame.threads[:d]:
            stride *= e
        extent = frame.threads[d]
        if extent & (extent - 1) or stride & (stride - 1) or stride * extent > WARP_SIZE:
            raise TileError(f"{what} over threadIdx.{'xyz'[d]} ({extent} threads, {stride} "
                            "apart) is not supported yet: the reduced threads must be a "
                            f"power of two within one warp of {WARP_SIZE}", current_span())
        step = stride
        while step < stride * extent:
            masks.append(step)
            step *= 2
    return sorted(masks, reverse=True)
