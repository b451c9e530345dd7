"""Element-wise loops that write shared memory, one vector access per run of elements.

A T.Parallel nest that touches no fragment and stores into shared memory at its innermost
variable's own position is laid out in runs of w consecutive elements per thread
(passes/parallel_nests.store_run: up to 16 bytes of the stored type). Lowered element by
element, each thread would then store 2-byte values 16 bytes apart from its neighbours' (a
bank conflict in every store) and read its inputs the same way. So each run becomes

    for q (unrolled):                      run q: elements q w .. q w + w - 1
        in_k[..] = vector load of the run's part of each shared input (ld_shared)
        for r in 0..w (unrolled): out_k[r] = value(q w + r), reading in_k[r // c]
        vector store of out_k to the run's place in each shared output (st_shared)

with in_k and out_k register arrays: the loads and stores move 4 to 16 bytes each, and the
arithmetic works on registers (which the code generator computes two at a time for 16-bit
floats, codegen/pairs.py). A shared input read at the run's own elements (c = 1) or at a
coarser position (x[i, j // 2]: c = 2, half as many elements) is loaded whole; one read at
the same element for the whole run stays a scalar load (nvcc loads it once); others stay as
they are. The rewrite applies when every statement is such a store whose w elements are
consecutive and aligned in the flat shared buffer (the swizzles keep 16-byte chunks whole), and
a buffer both read and written is read only at the element being written; the loop is kept as
it is otherwise.
"""
from __future__ import annotations

import dataclasses

from ....arith.bounds import divisor_of
from ....ir import dtypes as dt
from ....ir.buffer import LOCAL, Buffer, is_shared, row_major_offset
from ....ir.expr import BufferLoad, Call, Const, Select, address_of, const, select
from ....ir.linear import structural_key
from ....ir.stmt import Allocate, BufferStore, Evaluate, For, flat_stmts, seq
from ....ir.visitor import Mutator, stores_independent, substitute, walk
from ....layout import vector_runs
from ..intrinsics import (CP_ASYNC_CG_16, LD_GLOBAL, LD_GLOBAL_PRED, LD_REGS, LD_SHARED,
                          ST_REGS, ST_SHARED)
from .global_runs import guarded_global_loads, uniform_over_run


def _chunks(count: int, nbytes: int) -> list | None:
    """(first element, bits) of the vector accesses that move `count` elements of `nbytes`
    each: 16-byte ones, or one access of 2, 4 or 8 bytes; None when no width fits."""
    total = count * nbytes
    if total >= 16:
        if total % 16:
            return None
        per = 16 // nbytes
        return [(k * per, 128) for k in range(count // per)]
    return [(0, total * 8)] if total in (2, 4, 8) else None


class _Reads(Mutator):
    def __init__(self, staged: dict, r):
        self.staged = staged   # structural key of a load -> (register array, c)
        self.r = r             # the element's place in its run

    def visit_BufferLoad(self, e: BufferLoad):
        hit = self.staged.get(structural_key(e))
        if hit is None:
            return self.generic_visit(e)
        regs, c = hit
        return BufferLoad(regs, (self.r if c == 1 else self.r // c,), e.span)

    def visit_Select(self, e: Select):   # a guarded global read (global_runs.py)
        hit = self.staged.get(structural_key(e))
        if hit is None:
            return self.generic_visit(e)
        return BufferLoad(hit[0], (self.r,), e.span)


class _LoadIndices(Mutator):
    def __init__(self, simplify):
        self.simplify = simplify

    def visit_BufferLoad(self, e):
        e = self.generic_visit(e)
        indices = tuple(self.simplify(i) for i in e.indices)
        if all(a is b for a, b in zip(indices, e.indices)):
            return e
        return dataclasses.replace(e, indices=indices)


def _in_load_indices(e, simplify):
    """e with the indices of the loads in it simplified (a load is an atom of the linear form
    the caller simplifies e to, so what is inside it would stay as written)."""
    if not any(isinstance(n, BufferLoad) for n in walk(e)):
        return e
    return _LoadIndices(simplify).visit(e)


def stage_runs(loop: For, layout, ctx, asynchronous: bool = False):
    """The unrolled register loop `loop` (one element per iteration l) rewritten to move runs
    of elements with vector accesses (module docstring), or `loop` itself. asynchronous: the
    loop is a gather a software pipeline issues ahead; where every store is a global run of
    16-byte chunks it becomes cp.async copies (zero-filled where the run's condition fails)."""
    body = flat_stmts(loop.body)
    if not body or not all(isinstance(s, BufferStore) and is_shared(s.buffer.scope) and
                           len(s.indices) == 1 for s in body):
        return loop
    n = int(loop.extent.value)
    w = min([vector_runs(layout, 16)] + [16 // s.buffer.dtype.bytes for s in body])
    if w < 2 or n % w:
        return loop
    l = loop.var
    q, r = ctx.fresh("q", n // w), ctx.fresh("r", w)

    seen = {}

    def at(e, k):
        key = (id(e), k)
        if key not in seen:
            # inside the indices of loads too: a gather's row Ind[(q * w + k) // w] is Ind[q]
            seen[key] = (e, ctx.simplify(_in_load_indices(substitute(e, {id(l): q * w + k}),
                                                          ctx.simplify)))
        return seen[key][1]

    def steps(e) -> list | None:
        """e at element k of the run minus e at its first, for each k, if all constant."""
        base = at(e, 0)
        out = []
        for k in range(w):
            d = ctx.simplify(at(e, k) - base)
            if not isinstance(d, Const):
                return None
            out.append(int(d.value))
        return out

    if not stores_independent(body) or any(
            steps(s.indices[0]) != list(range(w)) or divisor_of(at(s.indices[0], 0)) % w or
            _chunks(w, s.buffer.dtype.bytes) is None for s in body):
        return loop
    staged, loads, allocations = {}, [], []
    for s in body:
        for e in walk(s.value):
            if not isinstance(e, BufferLoad) or not is_shared(e.buffer.scope) or \
                    len(e.indices) != 1 or structural_key(e) in staged:
                continue
            d = steps(e.indices[0])
            c = next((c for c in (1, 2, 4, 8, 16) if c < w and w % c == 0 and
                      d == [k // c for k in range(w)]), None) if d is not None else None
            if c is None:
                continue
            count, base = w // c, at(e.indices[0], 0)
            chunks = _chunks(count, e.buffer.dtype.bytes)
            if chunks is None or divisor_of(base) % count:
                continue
            regs = Buffer(f"{e.buffer.name}_run", (count,), e.buffer.dtype, LOCAL, e.span)
            allocations.append(Allocate(regs, e.span))
            staged[structural_key(e)] = (regs, c)
            for first, bits in chunks:
                value = Call(LD_SHARED.format(bits=bits),
                             (address_of(e.buffer, ctx.simplify(base + first)),), dt.handle)
                loads.append(Evaluate(Call(ST_REGS.format(bits=bits),
                                           (address_of(regs, const(first)), value), dt.handle),
                                      e.span))
    gathered = {}   # staged global runs: key -> (load, guard, chunks)
    for s in body:
        for value, load, guard in guarded_global_loads(s.value):
            key = structural_key(value)
            offset = row_major_offset(load)
            if key in staged or key in gathered or \
                    not dt.same_storage(value.dtype, load.buffer.dtype) or \
                    offset is None or steps(offset) != list(range(w)):
                continue
            chunks = _chunks(w, load.buffer.dtype.bytes)
            if chunks is None or divisor_of(at(offset, 0)) % w or (
                    guard is not None and not uniform_over_run(guard, at, w, ctx.simplify)):
                continue
            gathered[key] = (load, guard, chunks)
    if asynchronous:
        copies = _async_copies(body, gathered, at, ctx)
        if copies is not None:
            return For(q, const(0), const(n // w), "unroll", seq(copies, loop.span), {},
                       loop.span)
    for key, (load, guard, chunks) in gathered.items():
        regs = Buffer(f"{load.buffer.name}_run", (w,), load.buffer.dtype, LOCAL, load.span)
        allocations.append(Allocate(regs, load.span))
        staged[key] = (regs, 1)
        for first, bits in chunks:
            addr = address_of(load.buffer, *_indices(load, guard, at, first))
            fetch = Call(LD_GLOBAL.format(bits=bits), (addr,), dt.handle) if guard is None \
                else Call(LD_GLOBAL_PRED.format(bits=bits), (addr, at(guard, 0)), dt.handle)
            loads.append(Evaluate(Call(ST_REGS.format(bits=bits),
                                       (address_of(regs, const(first)), fetch), dt.handle),
                                  load.span))
    reads = _Reads(staged, r)
    computes, stores = [], []
    for s in body:
        out = Buffer(f"{s.buffer.name}_run", (w,), s.buffer.dtype, LOCAL, s.span)
        allocations.append(Allocate(out, s.span))
        value = substitute(reads.visit(s.value), {id(l): q * w + r})
        computes.append(BufferStore(out, (r,), value, s.span))
        base = at(s.indices[0], 0)
        for first, bits in _chunks(w, s.buffer.dtype.bytes):
            stores.append(Evaluate(Call(ST_SHARED.format(bits=bits), (
                address_of(s.buffer, ctx.simplify(base + first)),
                Call(LD_REGS.format(bits=bits), (address_of(out, const(first)),), dt.handle)),
                dt.handle), s.span))
    inner = For(r, const(0), const(w), "unroll", seq(computes, loop.span), {}, loop.span)
    runs = For(q, const(0), const(n // w), "unroll", seq(loads + [inner] + stores, loop.span),
               {}, loop.span)
    return seq(allocations + [runs], loop.span)


def _async_copies(body, gathered, at, ctx) -> list | None:
    """One cp.async per 16-byte chunk of each store's run, when every store stores a staged
    global run of its own dtype in 16-byte chunks; else None."""
    out = []
    for s in body:
        hit = gathered.get(structural_key(s.value))
        if hit is None or not dt.same_storage(hit[0].buffer.dtype, s.buffer.dtype) or \
                any(bits != 128 for _, bits in hit[2]):
            return None
        load, guard, chunks = hit
        pred = at(guard, 0) if guard is not None else const(True)
        for first, _ in chunks:
            dst = address_of(s.buffer, ctx.simplify(at(s.indices[0], 0) + first))
            src = address_of(load.buffer, *_indices(load, guard, at, first))
            out.append(Evaluate(Call(CP_ASYNC_CG_16.name, (dst, src, pred), dt.handle), s.span))
    return out


def _indices(load, guard, at, first: int) -> list:
    """The indices of a run's chunk at `first`. An index that reads memory (a position taken
    from a list, as a gather of listed columns does) is read only under the run's guard: the
    list's slots past its end hold nothing, and the predicated access needs no address there."""
    out = []
    for i in load.indices:
        index = at(i, first)
        if guard is not None and any(isinstance(n, BufferLoad) for n in walk(index)):
            index = select(at(guard, 0), index, const(0, index.dtype))
        out.append(index)
    return out
