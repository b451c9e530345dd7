"""Runs a lowered (thread-level) PrimFunc on numpy, block by block.

All threads of a block execute each statement together (lock-step), vectorized: the thread
index is np.arange(threads), so every expression evaluates to one value per thread. A branch
whose condition differs between threads runs with a mask of the threads that take it (those
are `lanes`); loops must have the same trip count in every thread that runs them. Barriers end
an epoch of the race checker; one reached by only part of the block is reported.

A warp-specialized kernel (sm_90a) has a producer warpgroup after its consumer threads; a
kernel that waits on mbarriers or named barriers runs as cooperative agents (agents.py) so
that its roles progress independently, the rest of it still in lock-step.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ....errors import TileError
from ....interp.machine import poison
from ....interp.values import Evaluator, to_dtype
from ....ir.buffer import GLOBAL
from ....ir.expr import Call, Expr
from ....ir.stmt import (PERSISTENT_TILES, Allocate, BufferStore, Evaluate, For, IfThenElse,
                       Kernel, SeqStmt)
from ....ir.visitor import walk
from ..tileops.tma import TensorMapVar
from . import intrinsics
from .agents import Scheduler, blocking_statements
from .barriers import Barriers
from .checker import Reports, SharedTracker, Site
from .bulk_stores import BulkStores
from .copies import AsyncCopies
from .hopper import WARPGROUP, Hopper
from .memory import BlockMemory, Pointer
from ....ir.annotations import (IMPORT_SOURCE_CALL, PERSISTENT_BLOCKS, PRODUCER_THREADS,
                                SMEM_BYTES, USE_SWIZZLE, WARPGROUP_THREAD)
from ..intrinsics import (CP_ASYNC_ARRIVE_NOINC, MBARRIER_CALLS, NAMED_BARRIER_SYNC,
                          NAMESPACE, SYNCWARP, TMA_LOADS, TMA_STORES, WGMMA_ISSUES, is_call_to)


class ThreadEvaluator(Evaluator):
    """The interpreter's expression evaluator, with loads and calls that reach the emulated
    memory spaces and the header library's functions."""

    def eval_BufferLoad(self, e, mask):
        m = self.m
        idx = [self.eval(i, mask) for i in e.indices]
        if m.wgmma_busy and id(e.buffer) in m.wgmma_busy:
            m.accumulator_in_flight(e.buffer, m.lanes_of(mask), "reads")
        return m.mem.load(e.buffer, idx, m.lanes_of(mask), m.span)

    def eval_Call(self, e, mask):
        m = self.m
        if e.name == "address_of":
            load = e.args[0]
            if isinstance(load, TensorMapVar):  # a kernel parameter the TMA loads name
                return load
            idx = [self.eval(i, mask) for i in load.indices]
            flat, ok = m.mem.flat_index(load.buffer, idx)
            return Pointer(load.buffer, flat, ok)
        if e.name.startswith(NAMESPACE):
            args = [a if isinstance(a, str) else self.eval(a, mask) for a in e.args]
            saved = m.lanes
            m.lanes = m.lanes_of(mask)
            try:
                return intrinsics.call(m, e.name[len(NAMESPACE):], args)
            finally:
                m.lanes = saved
        if e.name == "call_extern":
            raise TileError("the emulator cannot run T.call_extern", e.span)
        return super().eval_Call(e, mask)


class BlockMachine:
    """The state of the block being run and the statement executor."""

    def __init__(self, emulator, kernel: Kernel, coords: tuple, plan: "KernelPlan",
                 tiles: "TileWalk | None" = None):
        self.env = emulator.env
        self.kernel = kernel
        self.tiles = tiles
        self.reports = emulator.reports
        self.plan = plan
        self.consumers = kernel.num_threads
        self.T = kernel.num_threads + int(kernel.attrs.get(PRODUCER_THREADS, 0))
        self.tx = np.arange(self.T, dtype=np.int64)
        smem = int(kernel.attrs.get(SMEM_BYTES, 0))
        self.tracker = SharedTracker(smem, self.reports, emulator.check)
        self.tracker.partial = plan.partial
        self.mem = BlockMemory(emulator.func, emulator.globals, self.T, smem, self.reports,
                               self.tracker)
        self.copies = AsyncCopies(self)
        self.wgmma_busy: dict = {}   # register arrays a wgmma in flight will write
        self.hopper = Hopper(self)
        self.bulk_stores = BulkStores(self)
        # Bytes the async proxy reads (wgmma operands, TMA stores) need fenced writers.
        self.barriers = Barriers(self, plan.tma, plan.wgmma or plan.tma_store)
        if emulator.check and (plan.tma or plan.wgmma or plan.mbarriers):
            self.tracker.hooks = self.barriers
        self.deadlocked = False
        self.mask = None
        self.lanes = self.tx
        self.span = kernel.span
        self.ev = ThreadEvaluator(self)
        self.bind_block(coords)
        if kernel.thread_var is None:
            raise TileError("the emulator runs lowered kernels; this one has no thread index "
                            "(run the sm_80 pipeline first)", kernel.span)
        self.env[id(kernel.thread_var)] = self.tx
        wtx = kernel.attrs.get(WARPGROUP_THREAD)
        if wtx is not None:
            self.env[id(wtx)] = self.tx % 128

    def bind_block(self, coords: tuple):
        for var, i in zip(self.kernel.block_vars, coords):
            self.env[id(var)] = np.int64(i)

    def iterations(self, s: For):
        """Runs a loop's iterations: binds its variable (and, for a persistent kernel's loop
        over tiles, the block variables) and yields before each."""
        if s.annotations.get(PERSISTENT_TILES):
            for t in self.tiles.mine(self.uniform(s.extent)):
                self.env[id(s.var)] = np.int64(t)
                self.bind_block(self.tiles.coords(t))
                yield
            return
        start, extent = (np.asarray(self.ev.eval(e, self.mask)) for e in (s.start, s.extent))
        if start.ndim or extent.ndim:
            yield from self.divergent_iterations(s, start, extent)
            return
        for i in range(int(start), int(start + extent)):
            self.env[id(s.var)] = np.int64(i)
            yield

    def divergent_iterations(self, s: For, start, extent):
        """A loop whose bounds differ between threads (per-thread code): iterations from the
        lowest start to the highest end, each run by the threads inside their own range."""
        start = np.broadcast_to(start, (self.T,)).astype(np.int64)
        end = start + np.broadcast_to(extent, (self.T,)).astype(np.int64)
        lanes = self.lanes
        if not lanes.size:
            return
        for i in range(int(start[lanes].min()), int(end[lanes].max())):
            live = np.zeros(self.T, bool)
            live[lanes] = (start[lanes] <= i) & (i < end[lanes])
            if live.any():
                self.env[id(s.var)] = np.int64(i)
                with self.only(live):
                    yield

    def run(self, body):
        with np.errstate(all="ignore"):
            if id(body) in self.plan.blocking:
                self.deadlocked = not Scheduler(self, self.plan.blocking).run(body)
            else:
                self.exec(body)
            if self.deadlocked:
                return
            self.hopper.finish()
        self.copies.finish()
        self.barriers.finish()
        self.bulk_stores.finish()

    def accumulator_in_flight(self, buffer, lanes, verb: str):
        """A register array a wgmma in flight writes (its accumulator: no access until the
        wait) or reads (its A operand: no write until the wait)."""
        units, site, written = self.wgmma_busy[id(buffer)]
        hit = units[lanes // WARPGROUP] > 0
        if hit.any() and (written or verb == "writes"):
            here = Site(verb.rstrip("s"), buffer.name, self.span)
            t = int(lanes[np.argmax(hit)])
            use = "writes" if written else "reads"
            self.reports.add("async-before-wait", f"{buffer.name}: thread {t} {verb} it at "
                             f"{here.where()} while the wgmma issued at {site.where()} that "
                             f"{use} it has not been waited for (wgmma_wait_group)",
                             buffer.name, (t,), (site, here))

    def lanes_of(self, mask):
        if mask is None or mask is self.mask:
            return self.lanes
        mask = np.asarray(mask, dtype=bool)
        if mask.ndim == 0:
            return self.lanes if mask else self.lanes[:0]
        return np.nonzero(np.broadcast_to(mask, (self.T,)))[0]

    def uniform(self, e) -> int:
        """A value every executing thread agrees on (loop bounds)."""
        v = np.asarray(self.ev.eval(e, self.mask))
        if v.ndim == 0:
            return int(v)
        v = np.broadcast_to(v, (self.T,))[self.lanes]
        if v.size and (v != v[0]).any():
            raise TileError("the emulator needs loop bounds that are the same in every thread "
                            f"(they range over {int(v.min())}..{int(v.max())} here)", self.span)
        return int(v[0]) if v.size else 0

    def barrier(self):
        if self.mask is not None:
            idle = np.nonzero(~self.mask)[0]
            site = Site("syncthreads", "", self.span)
            self.reports.add(
                "barrier-divergence",
                f"syncthreads at {site.where()} is reached by {self.lanes.size} of {self.T} "
                f"threads (thread {idle[0]} never arrives): the block deadlocks or "
                "synchronizes wrongly", None, (int(self.lanes[0]) if self.lanes.size else 0,
                                               int(idle[0])), (site,))
        self.tracker.barrier()
        self.barriers.join(self.lanes)

    # --- statements --------------------------------------------------------------
    def exec(self, s):
        outer = self.span
        if s.span is not None:
            self.span = s.span
        try:
            getattr(self, "exec_" + type(s).__name__)(s)
        finally:
            self.span = outer

    def exec_SeqStmt(self, s: SeqStmt):
        for x in s.stmts:
            self.exec(x)

    def exec_For(self, s: For):
        if s.kind == "parallel":
            raise TileError("internal: a T.Parallel loop reached the emulator", s.span)
        for _ in self.iterations(s):
            self.exec(s.body)

    def exec_IfThenElse(self, s: IfThenElse):
        c = np.asarray(self.ev.eval(s.cond, self.mask), dtype=bool)
        if c.ndim == 0:
            branch = s.then_body if c else s.else_body
            if branch is not None:
                self.exec(branch)
            return
        c = np.broadcast_to(c, (self.T,))
        self._masked(s.then_body, c)
        if s.else_body is not None:
            self._masked(s.else_body, ~c)

    def _masked(self, body, cond):
        live = cond if self.mask is None else (self.mask & cond)
        if not live.any():
            return
        with self.only(live):
            self.exec(body)

    @contextlib.contextmanager
    def only(self, live):
        """Run the enclosed statements on the threads `live` selects (a boolean mask)."""
        saved = self.mask, self.lanes
        if live.all():
            self.mask, self.lanes = None, self.tx
        else:
            self.mask, self.lanes = live, np.nonzero(live)[0]
        try:
            yield
        finally:
            self.mask, self.lanes = saved

    def exec_BufferStore(self, s: BufferStore):
        value = to_dtype(self.ev.eval(s.value, self.mask), s.buffer.dtype)
        idx = [self.ev.eval(i, self.mask) for i in s.indices]
        if self.wgmma_busy and id(s.buffer) in self.wgmma_busy:
            self.accumulator_in_flight(s.buffer, self.lanes, "writes")
        self.mem.store(s.buffer, idx, value, self.lanes, self.span)

    def exec_Evaluate(self, s: Evaluate):
        if getattr(s.value, "name", None) != IMPORT_SOURCE_CALL:
            self.ev.eval(s.value, self.mask)

    def exec_Allocate(self, s: Allocate):
        self.mem.allocate(s.buffer, s.span, None if self.mask is None else self.lanes)

    def exec_Kernel(self, s: Kernel):
        raise TileError("internal: a kernel launch nested in another kernel", s.span)


def _rasterize(panel: int, order: str, gx: int, gy: int, bx: int, by: int) -> tuple:
    """tc::rasterize_row / rasterize_col (raster.h), serpentine."""
    if panel <= 0:
        return bx, by
    linear = by * gx + bx
    if order == "row":
        p, o = divmod(linear, panel * gx)
        h = min(panel, gy - p * panel)
        x, y = o // h, p * panel + o % h
        return (gx - 1 - x if p % 2 else x), y
    p, o = divmod(linear, panel * gy)
    w = min(panel, gx - p * panel)
    y, x = o // w, p * panel + o % w
    return x, (gy - 1 - y if p % 2 else y)


def tiles_of_block(block: int, blocks: int, tiles: int) -> list:
    """The tiles a persistent kernel's block runs: rounds of `blocks` consecutive tiles, the
    block taking tile `block` of even rounds and `blocks - 1 - block` of odd ones. Where tile
    costs follow a pattern that repeats with the tile index (causal attention: the query block
    is the fastest coordinate), a plain round-robin gives each block the same few positions in
    that pattern every round; the serpentine pairs positions from both ends, so the blocks'
    totals even out, while each round still runs neighbouring tiles (L2 locality)."""
    out, r = [], 0
    while True:
        t = r * blocks + (blocks - 1 - block if r % 2 else block)
        if t >= tiles:
            return out
        out.append(t)
        r += 1


class TileWalk:
    """Block `index` of `count` in launch order. `coords(t)`: the block coordinates the CUDA
    code gives tile t of the grid (gx, gy, gz) (T.use_swizzle's rasterization included); a
    persistent kernel's block runs tiles index, index + count, ... (`mine`)."""

    def __init__(self, index: int, count: int, grid: tuple, swizzle, rank: int):
        self.index, self.count, self.grid, self.swizzle, self.rank = index, count, grid, \
            swizzle, rank

    def mine(self, tiles: int):
        return tiles_of_block(self.index, self.count, tiles)

    def coords(self, t: int) -> tuple:
        gx, gy, _ = self.grid
        coords = (t % gx, t // gx % gy, t // (gx * gy))
        if self.swizzle is not None and self.rank >= 2:
            coords = _rasterize(self.swizzle[0], self.swizzle[1], gx, gy, *coords[:2]) + \
                coords[2:]
        return coords[:self.rank]


class KernelPlan:
    """What one kernel needs beyond the sm_80 model, found once per launch."""

    def __init__(self, k: Kernel):
        names = {n.name for n in walk(k.body) if isinstance(n, Call)}
        self.tma = any(is_call_to(n, *TMA_LOADS, *TMA_STORES) for n in names)
        self.wgmma = any(is_call_to(n, *WGMMA_ISSUES) for n in names)
        self.tma_store = any(is_call_to(n, *TMA_STORES) for n in names)
        # mbarriers order accesses between warpgroups (emulator/barriers.py's clocks)
        self.mbarriers = any(is_call_to(n, *MBARRIER_CALLS, CP_ASYNC_ARRIVE_NOINC)
                             for n in names)
        # Barriers of part of the block that order only the threads meeting there: a warp's
        # __syncwarp, and the named barriers of per-thread code (a warp-specialized kernel's
        # own named barriers, over all its consumers, end the epoch as block barriers do).
        self.partial = any(is_call_to(n, SYNCWARP) for n in names) or (
            not k.attrs.get(PRODUCER_THREADS) and any(is_call_to(n, NAMED_BARRIER_SYNC)
                                                      for n in names))
        self.blocking = blocking_statements(k.body)


class Emulator:
    """Runs a lowered PrimFunc: `Emulator(lowered).run(globals, bindings)` -> Reports.

    globals: id(parameter buffer) -> C-contiguous numpy array (written in place);
    bindings: id(scalar parameter or symbolic size) -> value. check=False skips the race /
    uninitialized / cp.async bookkeeping (bounds are always checked)."""

    def __init__(self, func, check: bool = True, report_limit: int = 200):
        self.func = func
        self.check = check
        self.reports = Reports(report_limit)
        self.env: dict = {}
        self.globals: dict = {}

    def run(self, globals_: dict, bindings: dict) -> Reports:
        self.globals = dict(globals_)
        self.env.update(bindings)
        # Each T.alloc_global is made for the launch, poisoned, as the CUDA launcher makes it
        # (uninitialized) for every call.
        from ..codegen.cuda import workspaces
        ev = Evaluator(self)
        for w in workspaces(self.func):
            shape = tuple(int(np.asarray(ev.eval(d))) if isinstance(d, Expr) else int(d)
                          for d in w.shape)
            self.globals.setdefault(id(w), poison(shape, w.dtype))
        body = self.func.body
        for s in (body.stmts if isinstance(body, SeqStmt) else (body,)):
            if isinstance(s, Allocate) and s.buffer.scope == GLOBAL:
                continue   # a workspace of the whole program, made above
            if not isinstance(s, Kernel):
                raise TileError(f"the emulator runs kernel launches only, not "
                                f"{type(s).__name__} outside a kernel", s.span)
            # C arithmetic wraps and rounds without a word: numpy's warnings for the same
            # (overflow, invalid casts) are silenced once here, not per expression
            with np.errstate(all="ignore"):
                self.run_kernel(s)
        return self.reports

    def run_kernel(self, k: Kernel):
        ev = Evaluator(self)
        grid = [int(np.asarray(ev.eval(g))) for g in k.grid] + [1, 1]
        gx, gy, gz = grid[:3]
        swizzle = k.attrs.get(USE_SWIZZLE)
        plan = KernelPlan(k)
        # Blocks run in launch order. A persistent kernel's blocks bind their variables per
        # tile (TileWalk); the others each own the tile of their own linear index.
        persistent = k.attrs.get(PERSISTENT_BLOCKS)
        tiles = gx * gy * gz
        count = tiles if persistent is None else min(tiles, persistent or intrinsics.EMULATED_SMS)
        for b in range(count):
            walk_ = TileWalk(b, count, (gx, gy, gz), swizzle, len(k.block_vars))
            coords = walk_.coords(b) if persistent is None else ()
            self.reports.block = coords or (b,)
            block = BlockMachine(self, k, coords, plan, walk_)
            block.run(k.body)
            if block.deadlocked:    # the GPU would hang here: the rest is not worth running
                break
        self.reports.block = ()
