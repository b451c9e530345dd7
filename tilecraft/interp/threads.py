"""Per-thread code on the interpreter: the block's threads as one more numpy axis.

In a kernel that reads its thread index or shuffles (ir/thread_varying.py) the threads are a
leading axis of length `threads`, ahead of T.Parallel's axes: a thread index evaluates to
np.arange along it, so a statement whose values differ between threads computes all of them
at once, and a condition that differs between threads masks lanes of it, as T.Parallel's
conditions do. Locals written with such values hold one copy per thread (a leading axis of
their array); the other locals keep one copy, as every thread holds the same. A loop whose
bounds differ runs from the lowest start to the highest end, each thread live in its own
range. A per-thread T.copy / T.fill (a local side) runs once per live thread, with that
thread's index and its copies of the locals. Barriers have nothing to do: all threads run
each statement together. Shuffles and warp reductions read the other lanes of the warp.
"""
from __future__ import annotations

import numpy as np

from ..errors import TileError
from ..ir.thread_varying import ThreadVarying, is_per_thread_op, thread_indices
from .values import compute_dtype, to_dtype

WARP = 32
BARRIERS = ("tc::syncthreads", "sync_threads", "sync_warp")
REDUCTIONS = {"sum": np.add, "max": np.maximum, "min": np.minimum}
SHUFFLE_KINDS = {"shfl_xor": "xor", "shfl_down": "down", "shfl_up": "up", "shfl_sync": "idx"}


class ThreadAxis:
    def __init__(self, kernel, depth: int):
        self.tv = ThreadVarying(kernel)
        self.T = kernel.num_threads
        self.shape = (self.T,) + (1,) * depth        # a value of each thread
        self.flat = np.arange(self.T, dtype=np.int64).reshape(self.shape)
        self.kernel = kernel
        self.lane = None        # the one thread running a per-thread tile op, if any

    # --- indices and storage -------------------------------------------------------------
    def index_values(self, flat):
        return thread_indices(self.kernel, flat)

    def bind(self, env: dict):
        env.update(self.index_values(self.flat))

    def per_thread(self, buffer) -> bool:
        return self.tv.varying_buffer(buffer)

    def element_index(self, buffer, idx: list) -> list:
        """idx into the array of buffer: a per-thread local's is led by the thread."""
        if self.lane is None and self.per_thread(buffer):
            return [self.flat] + list(idx)
        return idx

    def view(self, buffer, array):
        """The array a per-thread tile op sees: the running thread's copy of a local."""
        if self.lane is not None and self.per_thread(buffer):
            return array[self.lane]
        return array

    # --- statements ----------------------------------------------------------------------
    def runs_per_thread(self, op, mask) -> bool:
        return is_per_thread_op(op) and (self.tv.statement(op) or _threads_differ(mask))

    def each(self, machine, op, mask, run):
        """run() once for every thread the mask leaves live, as that thread."""
        live = self.live(mask)
        saved = {k: machine.env[k] for k in self.index_values(0)}
        try:
            for t in np.nonzero(live)[0]:
                self.lane = int(t)
                machine.env.update(self.index_values(np.int64(t)))
                run()
        finally:
            self.lane = None
            machine.env.update(saved)

    def live(self, mask) -> np.ndarray:
        if mask is None:
            return np.ones(self.T, bool)
        m = np.asarray(mask, bool)
        if m.ndim == 0:
            return np.full(self.T, bool(m))
        m = m.reshape(m.shape[0] if m.ndim == len(self.shape) else 1, -1)
        return np.broadcast_to(m.any(axis=1), (self.T,)).copy()

    def loop(self, machine, s, mask, start, extent):
        """A loop whose bounds differ between threads: every thread live in its range."""
        start = np.broadcast_to(np.asarray(start, np.int64), self.shape)
        end = start + np.broadcast_to(np.asarray(extent, np.int64), self.shape)
        live = self.live(mask).reshape(self.shape)
        if not live.any():
            return
        for i in range(int(start[live].min()), int(end[live].max())):
            now = live & (start <= i) & (i < end)
            if now.any():
                machine.env[id(s.var)] = np.int64(i)
                machine.exec(s.body, now if mask is None else (now & mask))

    # --- warp collectives ----------------------------------------------------------------
    def lanes_of(self, what: str, value, mask, span) -> np.ndarray:
        """value of each thread, as a [threads] array; the threads the mask leaves live
        must be whole warps."""
        try:
            v = np.broadcast_to(np.asarray(value), self.shape).reshape(self.T)
        except ValueError:
            raise TileError(f"{what} takes one value per thread", span) from None
        live = self.live(mask)
        for w in range(0, self.T, WARP):
            part = live[w:w + WARP]
            if part.any() and not part.all():
                raise TileError(f"{what} is executed by only some lanes of warp {w // WARP}: "
                                "every lane of the warp must take part (a condition around "
                                "it differs between the warp's threads)", span)
        return v

    def call(self, e, args, mask):
        """A shuffle or warp reduction (ir/thread_varying.LANE_CALLS) for every thread."""
        what = f"T.{e.name}"
        values = self.lanes_of(what, args[0], mask, e.span)
        if e.name.startswith("warp_reduce_"):
            out = butterfly(REDUCTIONS[e.name[len("warp_reduce_"):]], values, e.dtype)
        else:
            arg = self.lanes_of(what, args[1], mask, e.span)
            src = shuffle_sources(SHUFFLE_KINDS[e.name], arg, int(args[2]), self.T)
            if (src >= self.T).any():
                t = int(np.argmax(src >= self.T))
                raise TileError(f"{what}: thread {t} reads thread {int(src[t])}, past the "
                                f"block's {self.T} threads (a warp the block does not fill)",
                                e.span)
            out = values[src]
        return to_dtype(out, e.dtype).reshape(self.shape)



def shuffle_sources(kind: str, arg, width: int, threads: int) -> np.ndarray:
    """The flat thread each of `threads` threads reads in a shuffle of kind xor / down / up
    / idx with per-thread argument arg over groups of `width` lanes (its own where CUDA says
    a lane keeps its value)."""
    flat = np.arange(threads, dtype=np.int64)
    lane = flat % WARP
    group = lane // width * width
    arg = np.broadcast_to(np.asarray(arg, np.int64), (threads,))
    if kind == "xor":
        src = lane ^ arg
        src = np.where(src < group + width, src, lane)
    elif kind == "down":
        src = np.where(lane - group + arg < width, lane + arg, lane)
    elif kind == "up":
        src = np.where(lane - group - arg >= 0, lane - arg, lane)
    else:
        src = group + arg % width
    return flat - lane + src


def butterfly(combine, values, d) -> np.ndarray:
    """A warp's combination of values ([threads]) as the GPU computes it: five xor-shuffle
    steps, each rounded to dtype d (in a warp the block does not fill, over its own lanes)."""
    n = len(values)
    flat = np.arange(n)
    v = values
    cd = compute_dtype(d)
    for m in (16, 8, 4, 2, 1):
        src = flat ^ m
        other = np.where(src < n, v[np.minimum(src, n - 1)], v)
        v = to_dtype(combine(np.asarray(v).astype(cd), np.asarray(other).astype(cd)), d)
    return v


def _threads_differ(mask) -> bool:
    return mask is not None and np.ndim(mask) > 0 and np.shape(mask)[0] > 1
