"""The tile-level reference interpreter: runs a PrimFunc on numpy arrays, block by block.

Semantics are the language's, not a GPU's: tile ops act on whole tiles, T.Parallel bodies run
for all iterations at once (vectorized), pipelined loops run serially, and every buffer holds
values rounded to its dtype. Fresh shared / fragment / local buffers are filled with NaN (or a
pattern for integers), so reading memory that was never written shows up in the result.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..errors import TileError
from ..ir.annotations import (CP_ASYNC_ARRIVE_CALL, FENCE_PROXY_ASYNC, IMPORT_SOURCE_CALL,
                              MANUAL_BARRIER_CALLS, MBARRIER_ARRIVE_CALL, MBARRIER_INIT_CALL,
                              PTX_COMMIT_CALL, PTX_CP_ASYNC_CALL, PTX_WAIT_CALL,
                              SET_MAX_NREG_CALL, WARPGROUP_THREADS, WS_REGION)
from ..ir.buffer import GLOBAL, Buffer, BufferRegion
from ..ir.expr import Call
from ..ir.stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, Kernel, SeqStmt)
from ..ir.tileop import TileOp, contract_of
from .mbarriers import PhaseBook
from .threads import BARRIERS, ThreadAxis
from .values import Evaluator, ThreadPointers, first_bad, in_bounds, to_dtype

_MAX_PARALLEL_DEPTH = 8
_EXTERNS: dict = {}


def register_extern(name: str, fn):
    """Give T.call_extern(name, ...) a Python implementation for the interpreter.
    fn receives the evaluated arguments (T.address_of arguments arrive as Pointer objects)."""
    _EXTERNS[name] = fn


def poison(shape, d) -> np.ndarray:
    if d.is_float:
        return np.full(shape, np.nan, dtype=d.numpy)
    if d.is_bool:
        return np.ones(shape, dtype=np.bool_)
    return np.full(shape, 0x5A if d.bits == 8 else 0x5A5A, dtype=d.numpy)


# Statements with nothing to do when every thread runs each statement together and a copy is
# made when issued: waits for copies, register and proxy directives, source for the GPU module.
_NOTHING_TO_DO = (PTX_COMMIT_CALL, PTX_WAIT_CALL, SET_MAX_NREG_CALL, FENCE_PROXY_ASYNC,
                  IMPORT_SOURCE_CALL)

class Machine:
    def __init__(self, func):
        self.func = func
        self.env: dict[int, object] = {}
        self.arrays: dict[int, np.ndarray] = {}
        self.depth = 0  # number of enclosing T.Parallel axes
        self.current_kernel = None
        self.threads = None  # the thread axis of a kernel of per-thread code (threads.py)
        self.mbarriers = PhaseBook()
        self.region_threads = None  # the threads of the T.ws region being run
        self.ev = Evaluator(self)

    # --- state ----------------------------------------------------------------
    def array_of(self, buffer: Buffer) -> np.ndarray:
        try:
            array = self.arrays[id(buffer)]
        except KeyError:
            raise TileError(f"buffer {buffer.name} is used before it is allocated",
                            buffer.span) from None
        return array if self.threads is None else self.threads.view(buffer, array)

    def element_index(self, buffer: Buffer, idx: list) -> list:
        """idx into array_of(buffer): led by the thread for a local held per thread."""
        return idx if self.threads is None else self.threads.element_index(buffer, idx)

    def lane_call(self, e, args, mask):
        if self.threads is None:
            raise TileError(f"internal: T.{e.name} outside per-thread code", e.span)
        return self.threads.call(e, args, mask)

    def scalar(self, e) -> int:
        v = np.asarray(self.ev.eval(e))
        if v.ndim != 0:
            raise TileError("this value differs between T.Parallel iterations but must be a "
                            "single number here", getattr(e, "span", None))
        return v.item()

    def shape_of(self, buffer: Buffer) -> tuple:
        return tuple(int(s) if isinstance(s, int) else int(self.scalar(s)) for s in buffer.shape)

    def call_extern(self, call, args, mask=None):
        name = call.args[0]
        fn = _EXTERNS.get(name)
        if fn is None:
            raise TileError(f"T.call_extern({name!r}) has no implementation on the interpreter; "
                            "register one with tilecraft.register_extern", call.span)
        return self.per_thread(fn, args, mask)

    def per_thread(self, fn, args, mask):
        """fn(*args) once, or, where an argument differs between threads (each thread's
        pointer or value), once a live thread with that thread's arguments."""
        if self.threads is None or not any(isinstance(a, ThreadPointers) or
                                           np.ndim(a) > 0 for a in args):
            return fn(*args)
        out = np.zeros(self.threads.T, dtype=object)
        for t in np.nonzero(self.threads.live(mask))[0]:
            out[t] = fn(*(a[t] if isinstance(a, ThreadPointers) else
                          np.asarray(a).reshape(-1)[t] if np.size(a) == self.threads.T else a
                          for a in args))
        return out.reshape(self.threads.shape)

    # --- running ----------------------------------------------------------------
    def run(self, bindings: dict, arrays: dict):
        self.env.update(bindings)
        self.arrays.update(arrays)
        with np.errstate(all="ignore"):
            self.exec(self.func.body, None)

    def exec(self, s, mask):
        if isinstance(s, TileOp):   # what a tile op means is its contract (tilecraft/ops)
            if self.threads is not None and self.threads.runs_per_thread(s, mask):
                self.threads.each(self, s, mask, lambda: contract_of(s).interpret(self, s, None))
            else:
                contract_of(s).interpret(self, s, mask)
            return
        getattr(self, "exec_" + type(s).__name__)(s, mask)

    def exec_SeqStmt(self, s: SeqStmt, mask):
        for x in s.stmts:
            self.exec(x, mask)

    def exec_Kernel(self, k: Kernel, mask):
        extents = [self.scalar(g) for g in k.grid]
        self.current_kernel = k
        self.threads = ThreadAxis(k, _MAX_PARALLEL_DEPTH)
        if not self.threads.tv.per_thread:
            self.threads = None
        else:
            self.threads.bind(self.env)
        for index in itertools.product(*(range(n) for n in extents)):
            for var, i in zip(k.block_vars, index):
                self.env[id(var)] = np.int32(i)
            self.exec(k.body, None)

    def exec_Allocate(self, s: Allocate, mask):
        b = s.buffer
        if b.scope == GLOBAL and id(b) in self.arrays:
            return  # a workspace lives for the whole launch
        per_thread = (self.threads.T,) if self.threads and self.threads.per_thread(b) else ()
        self.arrays[id(b)] = poison(per_thread + self.shape_of(b), b.dtype)

    def exec_For(self, s: For, mask):
        if s.kind == "parallel":
            return self.exec_parallel(s, mask)
        start, extent = np.asarray(self.ev.eval(s.start, mask)), \
            np.asarray(self.ev.eval(s.extent, mask))
        if self.threads is not None and (start.ndim or extent.ndim):
            return self.threads.loop(self, s, mask, start, extent)
        start, extent = self.scalar(s.start), self.scalar(s.extent)
        for i in range(start, start + extent):
            self.env[id(s.var)] = np.int64(i)
            self.exec(s.body, mask)

    def exec_parallel(self, s: For, mask):
        if self.depth >= _MAX_PARALLEL_DEPTH:
            raise TileError(f"T.Parallel nests deeper than {_MAX_PARALLEL_DEPTH} dimensions are "
                            "not supported", s.span)
        start, extent = self.scalar(s.start), self.scalar(s.extent)
        shape = [1] * _MAX_PARALLEL_DEPTH
        shape[self.depth] = extent
        self.env[id(s.var)] = (np.arange(start, start + extent, dtype=np.int64)).reshape(shape)
        self.depth += 1
        try:
            self.exec(s.body, mask)
        finally:
            self.depth -= 1

    def mbarrier_call(self, call):
        """T.alloc_barrier's initialization, an arrival or a wait (interp/mbarriers.py)."""
        load = call.args[0]
        key = (id(load.buffer), int(self.scalar(load.indices[0])))
        if call.name == MBARRIER_INIT_CALL:
            self.mbarriers.init(key, self.scalar(call.args[1]), load.buffer.name)
        elif call.name in (MBARRIER_ARRIVE_CALL, CP_ASYNC_ARRIVE_CALL):   # copies are done
            threads = self.region_threads or self.current_kernel.num_threads
            self.mbarriers.arrive(key, threads, call.span)
        else:
            self.mbarriers.wait(key, self.scalar(call.args[1]), call.span)

    def exec_IfThenElse(self, s: IfThenElse, mask):
        if isinstance(s.cond, Call) and s.cond.name == WS_REGION:
            # a T.ws region: run once for the block, its arrivals those of its warpgroups
            outer, self.region_threads = self.region_threads, WARPGROUP_THREADS * len(s.cond.args)
            try:
                self.exec(s.then_body, mask)
            finally:
                self.region_threads = outer
            if s.else_body is not None:   # the chain's next region (other warpgroups)
                self.exec(s.else_body, mask)
            return
        c = np.asarray(self.ev.eval(s.cond, mask), dtype=bool)
        if c.ndim == 0 and mask is None:
            branch = s.then_body if c else s.else_body
            if branch is not None:
                self.exec(branch, None)
            return
        live = c if mask is None else (mask & c)
        if np.any(live):
            self.exec(s.then_body, live)
        if s.else_body is not None:
            dead = ~c if mask is None else (mask & ~c)
            if np.any(dead):
                self.exec(s.else_body, dead)

    def exec_BufferStore(self, s: BufferStore, mask):
        array = self.array_of(s.buffer)
        idx = self.element_index(s.buffer, [np.asarray(self.ev.eval(i, mask)).astype(np.int64)
                                            for i in s.indices])
        value = to_dtype(self.ev.eval(s.value, mask), s.buffer.dtype)
        self.store(s.buffer, array, idx, value, mask, s.span)

    def store(self, buffer, array, idx, value, mask, span):
        parts = idx + [np.asarray(value)] + ([mask] if mask is not None else [])
        shape = np.broadcast(*parts).shape
        if shape == ():
            if in_bounds(idx, array.shape) is True:
                array[tuple(idx)] = value
            elif buffer.scope != GLOBAL:
                raise TileError(f"out-of-bounds write to {buffer.name} (shape "
                                f"{tuple(array.shape)}) at index {tuple(int(i) for i in idx)}",
                                span)
            return
        live = np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape)
        inside = in_bounds([np.broadcast_to(i, shape) for i in idx], array.shape)
        if inside is not True:
            bad = live & ~inside
            if buffer.scope != GLOBAL and np.any(bad):
                raise TileError(f"out-of-bounds write to {buffer.name} (shape "
                                f"{tuple(array.shape)}) at index {first_bad(idx, ~bad)}", span)
            live = live & inside
        sel = tuple(np.broadcast_to(i, shape)[live] for i in idx)
        array[sel] = np.broadcast_to(value, shape)[live]

    def exec_Evaluate(self, s: Evaluate, mask):
        name = getattr(s.value, "name", None)
        if name in BARRIERS or name in _NOTHING_TO_DO:
            return
        if name in MANUAL_BARRIER_CALLS:
            return self.mbarrier_call(s.value)
        if name == PTX_CP_ASYNC_CALL:
            return self.ptx_cp_async(s.value, mask)
        self.ev.eval(s.value, mask)

    def ptx_cp_async(self, call, mask):
        """T.ptx_cp_async, made at once: each thread's (or the block's one) copy of `size`
        bytes, zeros where its predicate is false."""
        dst, src, _, pred = call.args
        n = int(call.args[2].value) * 8 // dst.args[0].buffer.dtype.bits

        def copy(d, s, p):
            d.write(s.read(n) if p else np.zeros(n, d.flat.dtype))
        self.per_thread(copy, [self.ev.eval(a, mask) for a in (dst, src, pred)], mask)

    # --- regions ----------------------------------------------------------------
    def region_box(self, r: BufferRegion):
        starts = [int(self.scalar(x)) for x in r.starts]
        extents = [int(self.scalar(x)) for x in r.extents]
        return starts, extents

    def read_region(self, r: BufferRegion, span) -> np.ndarray:
        """The region as an array of its extents; global elements outside the tensor are 0."""
        array = self.array_of(r.buffer)
        starts, extents = self.region_box(r)
        out = np.zeros(extents, dtype=array.dtype)
        src, dst = _clip(starts, extents, array.shape)
        if src is None or any(a != b for a, b in zip(_sizes(src), extents)):
            if r.buffer.scope != GLOBAL:
                raise TileError(f"the tile {r.buffer.name}{_box_text(starts, extents)} reaches "
                                f"outside the buffer's shape {tuple(array.shape)}", span)
        if src is not None:
            out[dst] = array[src]
        return out

    def write_region(self, r: BufferRegion, values, span, combine=None):
        """Store values (broadcast to the region); global elements outside the tensor are
        dropped. combine(old, new) merges with the current contents (atomics)."""
        array = self.array_of(r.buffer)
        starts, extents = self.region_box(r)
        values = np.broadcast_to(np.asarray(values).reshape(
            [e for e in extents] if np.size(values) == int(np.prod(extents)) else np.shape(values)),
            extents)
        src, dst = _clip(starts, extents, array.shape)
        if src is None or any(a != b for a, b in zip(_sizes(src), extents)):
            if r.buffer.scope != GLOBAL:
                raise TileError(f"the tile {r.buffer.name}{_box_text(starts, extents)} reaches "
                                f"outside the buffer's shape {tuple(array.shape)}", span)
        if src is None:
            return
        new = values[dst]
        if combine is not None:
            new = combine(array[src], new)
        array[src] = to_dtype(new, r.buffer.dtype)


def _clip(starts, extents, shape):
    """(slices into the buffer, slices into the tile) of their overlap, or None if empty."""
    src, dst = [], []
    for s, e, n in zip(starts, extents, shape):
        lo, hi = max(s, 0), min(s + e, n)
        if hi <= lo:
            return None, None
        src.append(slice(lo, hi))
        dst.append(slice(lo - s, hi - s))
    return tuple(src), tuple(dst)


def _sizes(slices):
    return [s.stop - s.start for s in slices]


def _box_text(starts, extents) -> str:
    return "[" + ", ".join(f"{s}:{s + e}" for s, e in zip(starts, extents)) + "]"

