"""batch_shared_loads: an unrolled per-thread loop that writes a shared tile loads what it reads
from other shared tiles before its first store.

The lowered code of a T.Parallel nest that reads shared tiles and writes another (the W4A16
GEMM unpacks its packed weight tile into a float16 tile: per step a 32-bit load, a 2-byte scale
load, arithmetic, a 16-byte store) is an unrolled loop of load, compute, store. Every pointer
into shared memory points into the one arena, so nvcc cannot tell that a step's store leaves
the next step's loads alone and keeps program order: each step waits the full shared-memory
latency for its loads, and with a few warps a scheduler nothing hides it. The tiles read here
are ones the loop does not write, so the loads may all be issued first: each loaded value
goes into a register array indexed by the loop counter, filled by an unrolled loop of its own
right before the loop, which then reads the registers.

What moves, from a loop of `unroll` kind with a constant trip count that stores into shared
memory:
- a vector load into registers at the top level of its body, `st_regs(&R[i], ld_shared(&S[j]))`,
  where R is a one-dimensional register array the loop fills before it reads it and nothing
  outside the loop names (R becomes trip count times as long, each iteration its own part);
- a load of a shared tile element inside any expression (a scale, S[j]), evaluated in every
  iteration (not under an if, nor in a select's branch), into an array of its own (one
  register, loaded once, when j does not follow the counter);
where S is a shared tile the loop does not write (no store, no address taken by anything but a
load) and j depends on the loop counter and on values fixed for the whole loop (no variable of
an inner loop, no register the loop writes). The arrays stay within REGISTER_BUDGET bytes per
thread; loops whose loads would take more keep their order. Turned off with
tl.disable_shared_load_batching.
"""
from __future__ import annotations

import dataclasses
import math

from ....arith.bounds import simplify
from ....ir.buffer import LOCAL, Buffer, is_shared
from ....ir.expr import Binary, BufferLoad, Call, Cast, Const, Select, Unary, Var, const
from ....ir.linear import constant_value, structural_key
from ....ir.stmt import Allocate, BufferStore, Evaluate, For, SeqStmt, seq
from ....ir.visitor import Mutator, map_kernels, named_outside, substitute, walk
from .every_iteration import visit_body
from .overlap_wgmma import addressed_load
from ....pass_config import PassConfigKey

REGISTER_BUDGET = 256   # bytes a thread may hold in the arrays of one loop
MAX_TRIPS = 64
_PURE = (Binary, Unary, Select, Cast, Const, Var, BufferLoad)


def _is(call, prefix: str) -> bool:
    return isinstance(call, Call) and call.name.startswith(prefix)


def _stores_to_shared(body) -> bool:
    for n in walk(body):
        if isinstance(n, BufferStore) and is_shared(n.buffer.scope):
            return True
        if _is(n, "tc::st_shared_"):
            return True
    return False


def _written(body) -> set:
    """ids of the buffers the loop may write: stored, or addressed by a call that is not a
    shared-memory load."""
    out = set()
    for n in walk(body):
        if isinstance(n, BufferStore):
            out.add(id(n.buffer))
        elif isinstance(n, Call) and n.name != "address_of" and not _is(n, "tc::ld_shared_"):
            for a in n.args:
                if _is(a, "address_of"):
                    out.update(id(x.buffer) for x in a.args if isinstance(x, BufferLoad))
    return out


class _Loop:
    """The loads of one loop that may move."""

    def __init__(self, loop: For, trips: int):
        self.loop, self.trips = loop, trips
        self.written = _written(loop.body)
        self.inner = {id(x.var) for x in walk(loop.body) if isinstance(x, For)}
        # The counter's and the inner loops' ranges: an index such as (q * 8 + r) // 8 of a
        # scale read once per 8 elements depends on q alone once r < 8 is known.
        self.bounds = {id(x.var): (constant_value(x.start), constant_value(x.start) +
                                   constant_value(x.extent) - 1)
                       for x in walk(loop) if isinstance(x, For) and
                       constant_value(x.start) is not None and
                       constant_value(x.extent) is not None}
        self.vectors = []   # (statement, register array, load address)
        self.scalars = {}   # structural key of the load as written -> the load simplified

    def index_fixed(self, indices) -> bool:
        """Indices that depend on nothing but the counter and values fixed for the loop."""
        for n in (x for i in indices for x in walk(i)):
            if not isinstance(n, _PURE):
                return False
            if isinstance(n, Var) and id(n) in self.inner:
                return False
            if isinstance(n, BufferLoad) and (id(n.buffer) in self.written or
                                              is_shared(n.buffer.scope)):
                return False
        return True

    def readable(self, load: BufferLoad) -> bool:
        return is_shared(load.buffer.scope) and id(load.buffer) not in self.written and \
            self.index_fixed(load.indices)

    def vector(self, s, seen: set):
        """A top-level `st_regs(&R[i], ld_shared(&S[j]))` filling R before R is read."""
        if not (isinstance(s, Evaluate) and _is(s.value, "tc::st_regs_")):
            return False
        target, value = addressed_load(s.value), s.value.args[1]
        if target is None or target.buffer.scope != LOCAL or len(target.buffer.shape) != 1 or \
                id(target.buffer) in seen or \
                not _is(value, "tc::ld_shared_") or addressed_load(value) is None:
            return False
        source = addressed_load(value)
        if not (self.readable(source) and self.index_fixed(target.indices)):
            return False
        self.vectors.append((s, target.buffer, value))
        return True

    def take(self, e) -> bool:
        """A load of a shared tile the loop may issue first, recorded."""
        if not (isinstance(e, BufferLoad) and is_shared(e.buffer.scope)):
            return False
        simple = dataclasses.replace(e, indices=tuple(simplify(i, self.bounds)
                                                      for i in e.indices))
        if not self.readable(simple):
            return False
        self.scalars.setdefault(structural_key(e), simple)
        return True

    def find(self):
        seen = set()   # the buffers the body's statements read so far

        def claim(s, depth: int) -> bool:
            taken = depth == 0 and self.vector(s, seen)
            if depth == 0:
                seen.update(id(n.buffer) for n in walk(s) if isinstance(n, BufferLoad))
            return taken
        visit_body(self.loop.body, self.take, claim)


class _Rewrite(Mutator):
    """The loop's body reading the arrays: scalar loads replaced, vector loads dropped and
    their register arrays indexed by the counter."""

    def __init__(self, step, scalars: dict, grown: dict, dropped: set):
        # step: the iteration's position (the counter less the loop's start)
        self.step, self.scalars, self.grown, self.dropped = step, scalars, grown, dropped

    def visit_BufferLoad(self, e):
        hit = self.scalars.get(structural_key(e))
        if hit is not None:
            array, invariant = hit
            return BufferLoad(array, (const(0) if invariant else self.step,))
        indices = tuple(self.visit(i) for i in e.indices)
        grown = self.grown.get(id(e.buffer))
        if grown is not None:
            (index,) = indices
            flat = self.step * const(_elements(e.buffer), self.step.dtype) + index
            return BufferLoad(grown, (flat,), e.span)
        return dataclasses.replace(e, indices=indices)

    def visit_SeqStmt(self, s):
        return seq([self.visit(x) for x in s.stmts if id(x) not in self.dropped], s.span)


class _Loops(Mutator):
    def __init__(self, kernel_body):
        self.body = kernel_body
        self.count = 0
        self.retired = set()   # ids of register arrays replaced by their grown twins

    def visit_SeqStmt(self, s: SeqStmt):
        out = [self.visit(x) for x in s.stmts]
        return seq([x for x in out if not (isinstance(x, Allocate) and
                                           id(x.buffer) in self.retired)], s.span)

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        trips = constant_value(s.extent)
        if s.kind != "unroll" or trips is None or not 2 <= trips <= MAX_TRIPS or \
                not _stores_to_shared(s.body):
            return s
        found = _Loop(s, trips)
        found.find()
        vectors = [v for v in found.vectors if not named_outside(self.body, v[1], s)]
        if not vectors and not found.scalars:
            return s
        # A load whose index does not follow the counter is the same in every iteration:
        # one register, loaded once.
        invariant = {key for key, e in found.scalars.items()
                     if not any(n is s.var for i in e.indices for n in walk(i))}
        cost = trips * sum(b.dtype.bytes * _elements(b) for _, b, _ in vectors) + \
            sum(e.dtype.bytes * (1 if key in invariant else trips)
                for key, e in found.scalars.items())
        if cost > REGISTER_BUDGET:
            return s
        self.count += 1
        q = Var(f"{s.var.name}_ahead", s.var.dtype)
        step = _position(q, s.start)
        allocs, once, fill, scalars, grown = [], [], [], {}, {}
        for stmt, regs, value in vectors:
            # One dimension, iteration after iteration: a register array's byte is found in
            # its 32-bit word the same way as before (codegen/pairs.py).
            bigger = Buffer(f"{regs.name}_ahead", (trips * _elements(regs),), regs.dtype,
                            LOCAL, regs.span)
            grown[id(regs)] = bigger
            self.retired.add(id(regs))
            allocs.append(Allocate(bigger, s.span))
            fill.append(substitute(_Rewrite(step, {}, grown, set()).visit(stmt),
                                   {id(s.var): q}))
        for key, load in found.scalars.items():
            fixed = key in invariant
            array = Buffer(f"{load.buffer.name}_ahead_{self.count}_{len(scalars)}",
                           (1 if fixed else trips,), load.dtype, LOCAL, s.span)
            scalars[key] = (array, fixed)
            allocs.append(Allocate(array, s.span))
            if fixed:
                once.append(BufferStore(array, (const(0),), load, s.span))
            else:
                fill.append(BufferStore(array, (step,), substitute(load, {id(s.var): q}),
                                        s.span))
        preload = [For(q, s.start, s.extent, "unroll", seq(fill, s.span), {}, s.span)] \
            if fill else []
        body = _Rewrite(_position(s.var, s.start), scalars, grown, {id(v[0]) for v in vectors}).visit(s.body)
        return seq(allocs + once + preload + [dataclasses.replace(s, body=body)], s.span)



def _elements(b: Buffer) -> int:
    return math.prod(b.static_shape())


def _position(var: Var, start):
    """The iteration's position, counted from 0, of a loop with counter var from start."""
    return var - start if constant_value(start) != 0 else var


def batch_shared_loads(func, configs: dict | None = None):
    """func with the shared-memory loads of its unrolled loops that write shared tiles issued
    ahead of their stores."""
    if (configs or {}).get(PassConfigKey.TL_DISABLE_SHARED_LOAD_BATCHING):
        return func

    def kernel(k):
        body = _Loops(k.body).visit(k.body)
        return k if body is k.body else dataclasses.replace(k, body=body)
    return map_kernels(func, kernel)
