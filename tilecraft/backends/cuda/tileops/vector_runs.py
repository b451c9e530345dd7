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

from ....arith.bounds import divisor_of
from ....ir import dtypes as dt
from ....ir.buffer import LOCAL, Buffer, is_shared
from ....ir.expr import BufferLoad, Call, Const, address_of, const
from ....ir.linear import structural_key
from ....ir.stmt import Allocate, BufferStore, Evaluate, For, flat_stmts, seq
from ....ir.visitor import Mutator, stores_independent, substitute, walk
from ....layout import vector_runs
from ..intrinsics import LD_REGS, LD_SHARED, ST_REGS, ST_SHARED


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


def stage_runs(loop: For, layout, ctx):
    """The unrolled register loop `loop` (one element per iteration l) rewritten to move runs
    of elements with vector accesses (module docstring), or `loop` itself."""
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

    def at(e, k):
        return ctx.simplify(substitute(e, {id(l): q * w + k}))

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
