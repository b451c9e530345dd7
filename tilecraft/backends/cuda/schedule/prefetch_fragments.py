"""prefetch_fragments: copies from global memory into fragments, issued stages ahead in a
T.Pipelined loop (registers double-buffered).

cp.async and TMA move global memory into shared memory only, so pipeline_loops leaves a
T.copy into a fragment where it is: each iteration issues its loads and then waits for them
before the element-wise work that reads them, and with nothing else in flight the loop runs at
the latency of memory, not its bandwidth (a GEMV, whose whole body is such copies and the
arithmetic on them). A register copy is asynchronous by itself, though: a load does not stall
the thread until its result is read. So for a loop asked to run with num_stages = S >= 2, each
qualifying copy `C(k) -> f` becomes

    before the loop:  for s in [0, S-1): if s < n: C(start + s) -> f_s      (f_0 is f)
    body k:           if k + S - 1 < end: C(k + S - 1) -> f_{S-1}
                      the rest of the body, reading f for iteration k as before
                      if k + 1 < end: f_0 = f_1; ...; f_{S-2} = f_{S-1}

which keeps S - 1 iterations' loads in flight while one computes. The shift is element-wise
register moves (a T.copy between the versions, which nvcc renames away where it can).
Guarded by k + 1 < end, it leaves f holding the last iteration's data after the loop, as the
original did. It runs after infer_layouts and gives every version the fragment's layout: the
versions are registers of the same threads, and the layout choice stays the one the loop as
written gets (counting each copy once).

A plain T.serial loop gets the same rewrite with S = 2 (its next iteration's loads in flight
while one computes) when its qualifying copies are few registers: at most
SERIAL_PREFETCH_BYTES a thread in all, so the second version costs a few registers and not
occupancy. That is inference, not a change of meaning: the copies read global memory the loop
does not write, so reading it an iteration early gives the same values. A loop written as
T.Pipelined with num_stages 0 or 1 is left as written (the way to ask for no prefetch).

A copy qualifies when it is a statement of the loop body itself (not nested), fills its whole
fragment from a global tensor the loop does not write, its source region depends on nothing
the loop computes (no buffer loads, no variables bound inside the body; the loop variable and
values fixed before the loop are fine), and no statement before it in the body touches the
fragment (those would see the next iteration's data). Anything else stays as written.
"""
from __future__ import annotations

import copy
import dataclasses

from ....arith.bounds import simplify
from ....ir.buffer import FRAGMENT, GLOBAL, Buffer, BufferRegion
from ....ir.expr import BufferLoad, Const, Var, convert
from ....ir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt, seq, stmts_of
from ....ir.tileop import Copy, TileOp
from ....ir.visitor import Mutator, buffers_used, map_kernels, substitute, walk
from ....ir.annotations import LAYOUTS, NUM_STAGES

# The registers a serial loop may add, per thread, to keep its next iteration's copies in
# flight: 128 bytes is 32 registers, a small part of the 255 a thread can have.
SERIAL_PREFETCH_BYTES = 128


def _writes(node, buffer: Buffer) -> bool:
    for n in walk(node):
        if isinstance(n, BufferStore) and n.buffer is buffer:
            return True
        if isinstance(n, TileOp) and any(b is buffer for b in n.writes()):
            return True
        if isinstance(n, Evaluate) and any(b is buffer for b in buffers_used(n)):
            return True   # an intrinsic given the tensor's address may write it
    return False


def _qualifies(loop: For, body: list, i: int, inner_vars: set) -> bool:
    """inner_vars: ids of the variables of the loops inside the body."""
    c = body[i]
    if not (isinstance(c, Copy) and c.src.buffer.scope == GLOBAL and
            c.dst.buffer.scope == FRAGMENT and c.dst.covers_whole()):
        return False
    for start, extent in c.src.ranges:
        for e in (start, extent):
            for n in walk(e):
                if isinstance(n, BufferLoad) or (isinstance(n, Var) and id(n) in inner_vars):
                    return False
    if _writes(loop.body, c.src.buffer):
        return False
    return not any(c.dst.buffer in buffers_used(s) for s in body[:i])


class _Retarget(Mutator):
    def __init__(self, old: Buffer, new: Buffer):
        self.old, self.new = old, new

    def visit_BufferRegion(self, r: BufferRegion):
        return dataclasses.replace(r, buffer=self.new) if r.buffer is self.old else r


def _move(dst: Buffer, src: Buffer, span) -> Copy:
    """T.copy(src, dst) of whole fragments (register moves: tileops/copy.py)."""
    return Copy(src.region(), dst.region(), {}, span)


def _when(cond, stmt, span):
    cond = simplify(cond)
    if isinstance(cond, Const):
        return stmt if cond.value else seq([], span)
    return IfThenElse(cond, stmt, None, span)


def _bytes_per_thread(buffer: Buffer, layouts) -> int:
    return layouts.buffer(buffer).locals_per_thread * buffer.dtype.bytes


def _stages(loop: For, chosen: list, layouts) -> int:
    """How many iterations' copies the loop keeps in registers (< 2: no rewrite)."""
    if NUM_STAGES in loop.annotations:      # written as T.Pipelined: as many as asked
        return loop.annotations[NUM_STAGES]
    if loop.kind != "serial" or (isinstance(loop.extent, Const) and loop.extent.value < 2):
        return 0
    size = sum(_bytes_per_thread(c.dst.buffer, layouts) for c in chosen)
    return 2 if size <= SERIAL_PREFETCH_BYTES else 0


def _prefetch(loop: For, twins: dict, layouts):
    """The loop with its qualifying copies issued ahead (None when none qualifies); twins
    gets {id(new buffer): the fragment whose layout it takes}."""
    body = list(stmts_of(loop.body))
    inner_vars = {id(n.var) for n in walk(loop.body) if isinstance(n, For)}
    chosen = [i for i in range(len(body)) if _qualifies(loop, body, i, inner_vars)]
    if not chosen:
        return None
    stages = _stages(loop, [body[i] for i in chosen], layouts)
    if stages < 2:
        return None
    k, start, n, span = loop.var, loop.start, loop.extent, loop.span
    end = start + n
    allocations, prologue, ahead, shifts = [], [], [], []
    for i in chosen:
        copy = body[i]
        f = copy.dst.buffer
        versions = [f] + [Buffer(f"{f.name}_ahead{j}", f.shape, f.dtype, f.scope, f.span)
                          for j in range(1, stages)]
        allocations += [Allocate(v, span) for v in versions[1:]]
        twins.update((id(v), f) for v in versions[1:])
        for s in range(stages - 1):
            load = _Retarget(f, versions[s]).visit(substitute(copy, {id(k): start + s}))
            prologue.append(_when(convert(s) < n, load, span))
        load = _Retarget(f, versions[-1]).visit(substitute(copy, {id(k): k + (stages - 1)}))
        ahead.append(IfThenElse(k + (stages - 1) < end, load, None, span))
        shifts += [_move(versions[j], versions[j + 1], span) for j in range(stages - 1)]
    rest = [s for i, s in enumerate(body) if i not in chosen]
    shift = IfThenElse(k + 1 < end, seq(shifts, span), None, span)
    new_loop = dataclasses.replace(loop, body=seq(ahead + rest + [shift], span))
    return seq(allocations + prologue + [new_loop], span)


class _Prefetcher(Mutator):
    def __init__(self, layouts):
        self.twins: dict = {}
        self.layouts = layouts

    def visit_SeqStmt(self, s: SeqStmt):
        return seq([self.visit(x) for x in s.stmts], s.span)

    def visit_For(self, s: For):
        if s.kind == "parallel":
            return s
        s = dataclasses.replace(s, body=self.visit(s.body))
        out = _prefetch(s, self.twins, self.layouts)
        return s if out is None else out


def prefetch_fragments(func):
    """Return func with the qualifying fragment copies of its pipelined and serial loops issued ahead
    (after infer_layouts: each kernel's layout map gains the new buffers and loops)."""
    def rewrite(kernel):
        p = _Prefetcher(kernel.attrs.get(LAYOUTS))
        body = p.visit(kernel.body)
        if not p.twins:
            return kernel
        old = kernel.attrs[LAYOUTS]
        m = copy.copy(old)
        m.buffers, m.origin, m.loops = dict(old.buffers), dict(old.origin), dict(old.loops)
        for n in walk(body):
            if isinstance(n, Allocate) and id(n.buffer) in p.twins:
                m.buffers[id(n.buffer)] = old.buffer(p.twins[id(n.buffer)])
                m.origin[id(n.buffer)] = n
        return dataclasses.replace(kernel, body=body, attrs={**kernel.attrs, LAYOUTS: m})
    return map_kernels(func, rewrite)
