"""What every tile-op lowering shares: the kernel's thread context and access rewriting.

Lowering turns tile-level statements into code for one thread. Buffers change representation
on the way: a fragment becomes a per-thread register array (indexed by the fragment layout's
local index), a shared tile becomes a flat array (indexed by its layout's offset), and global
accesses that may fall outside the tensor are guarded, so that out-of-bounds reads give zero
and out-of-bounds writes do nothing, as in the language.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from ....arith.bounds import bound_of, simplify
from ....ir.linear import linear_form
from ....errors import TileError
from ....ir import dtypes as dt
from ....ir.buffer import FRAGMENT, GLOBAL, LOCAL, Buffer, is_shared
from ....ir.expr import (BufferLoad, Call, Const, Expr, Var, binary, const, convert, logical,
                       select)
from ....ir.stmt import BufferStore, Evaluate, IfThenElse
from ....ir.visitor import Mutator, substitute, walk
from ..intrinsics import ATOMIC, PACK_BF162, PACK_HALF2


@dataclass
class ThreadContext:
    """One kernel being lowered."""
    tx: Var
    num_threads: int
    layouts: object  # passes.infer_layouts.LayoutMap
    var_bounds: dict = field(default_factory=dict)
    registers: dict = field(default_factory=dict)  # id(fragment) -> local Buffer
    flat_shared: dict = field(default_factory=dict)  # id(shared tile) -> flat Buffer
    allocations: list = field(default_factory=list)  # new Allocate statements to hoist
    tensor_maps: dict = field(default_factory=dict)  # (buffer, box, swizzle) -> TensorMapVar
    counter: int = 0
    unswitch_masks: bool = True  # tileops/uniform_select (off: tl.disable_uniform_masks)
    private_scratch: set = field(default_factory=set)  # ids of scratch needing own bytes
    fragment_registers: int = 0  # 32-bit registers per thread all the kernel's fragments take

    def fresh(self, name: str, extent: int | None = None) -> Var:
        self.counter += 1
        v = Var(name, dt.int32)
        if extent is not None:
            self.var_bounds[id(v)] = (0, extent - 1)
        return v

    def simplify(self, e):
        return simplify(e, self.var_bounds)

    def register_array(self, frag: Buffer) -> Buffer:
        reg = self.registers.get(id(frag))
        if reg is None:
            layout = self.layouts.buffer(frag)
            reg = Buffer(frag.name, (layout.locals_per_thread,), frag.dtype, LOCAL, frag.span)
            self.registers[id(frag)] = reg
        return reg

    def flat(self, shared: Buffer) -> Buffer:
        flat = self.flat_shared.get(id(shared))
        if flat is None:
            layout = self.layouts.buffer(shared)
            size = int(np.prod(layout.output_shape))
            flat = Buffer(shared.name, (size,), shared.dtype, shared.scope, shared.span)
            self.flat_shared[id(shared)] = flat
        return flat

    def shared_offset(self, shared: Buffer, indices) -> Expr:
        layout = self.layouts.buffer(shared)
        return self.simplify(flat_offset(layout, layout.forward(list(indices))))


def packed_pair(dtype_name: str, low: Expr, high: Expr) -> Call:
    """One 32-bit word of two 16-bit values, `low` in bits 0..15: what mma, wgmma and stmatrix
    take for float16 (tc::pack_half2) and bfloat16 (tc::pack_bf162) register pairs."""
    name = PACK_HALF2.name if dtype_name == "float16" else PACK_BF162.name
    return Call(name, (low, high), dt.dtype("uint32"))


def flat_offset(layout, outputs):
    """A layout's physical index as one element offset (row-major over its outputs)."""
    shape = layout.output_shape
    flat = outputs[0]
    for out, extent in zip(outputs[1:], shape[1:]):
        flat = flat * extent + out
    return flat


def flat_offset_table(layout) -> np.ndarray:
    """flat_offset for every logical index, as a numpy array of the layout's input shape."""
    table = layout.table()
    shape = layout.output_shape
    flat = table[..., 0]
    for d in range(1, table.shape[-1]):
        flat = flat * shape[d] + table[..., d]
    return flat


def evaluate_table(expr, env: dict) -> np.ndarray:
    """expr evaluated on numpy arrays bound to its variables (env: id(var) -> array)."""
    from ....interp.values import evaluate
    return evaluate(expr, env)


# Fragments that take this many of a thread's 255 registers leave too few for an address per
# unrolled iteration. Below it the precomputed addresses cost nothing and the rewritten form was
# slower: 128x128 sm80 attention on 256 threads (fragments ~200 registers) lost time with it,
# while 128x64 on 128 threads (~280) spilled less and ran faster (bench/mha_fwd.md).
TIGHT_REGISTERS = 224


def hoistable_offset(e, ctx: ThreadContext, unrolled: list) -> Expr:
    """e, an offset into a swizzled shared tile read in unrolled loops (unrolled: [(var,
    extent)]), with each term that mixes the thread index and those loops' variables written
    as the term of iteration 0 plus, or XOR-ed with, a constant of the iteration: the
    per-thread part is then computed once, before the loops, and each unrolled access adds an
    immediate. Written as given, `((kk * 16 + c) % 64 / 8 ^ r) * 8` is a different per-thread
    value for each kk, and an attention loop's ldmatrix addresses filled (and spilled) dozens of
    registers. Each rewrite is checked on every thread and every iteration."""
    loops = [(v, n) for v, n in unrolled if n > 1]
    if not loops or not isinstance(e, Expr) or not e.dtype.is_int or \
            ctx.fragment_registers < TIGHT_REGISTERS:
        return e
    tx = ctx.tx
    combos = np.array(list(product(*[range(n) for _, n in loops]))).T
    env = {id(tx): np.arange(ctx.num_threads)[:, None]}
    env.update({id(v): combos[i][None, :] for i, (v, _) in enumerate(loops)})
    at_start = {id(v): const(0) for v, _ in loops}
    thread_zero = {id(tx): const(0)}
    own = {id(v) for v, _ in loops} | {id(tx)}
    terms, total = linear_form(e)
    out, changed = const(total), False
    for atom, coeff in terms.values():
        free = {id(x) for x in walk(atom) if isinstance(x, Var)}
        term = atom
        if id(tx) in free and free <= own and len(free) > 1:
            first = ctx.simplify(substitute(atom, at_start))
            every = np.broadcast_to(evaluate_table(atom, env), (ctx.num_threads, combos.shape[1]))
            base = np.broadcast_to(evaluate_table(first, env), every.shape)
            step = ctx.simplify(substitute(atom, thread_zero))
            step0 = ctx.simplify(substitute(first, thread_zero))
            if np.all(every - base == (every - base)[:1]):
                term, changed = first + ctx.simplify(step - step0), True
            elif np.all(every >= 0) and np.all(base >= 0) and \
                    np.all(every ^ base == (every ^ base)[:1]):
                # (binary folds the XOR with iteration 0's value away when that is 0.)
                term, changed = binary("^", first, ctx.simplify(binary("^", step, step0))), True
        out = out + term * coeff
    return ctx.simplify(out) if changed else e


def coverage_guard(logical_idx, extents, ctx: ThreadContext):
    """The condition that the element a layout slot names lies inside the tile, for the dims
    where it may not (a layout over more slots than a small or partial tile has), or None."""
    cond = None
    for idx, extent in zip(logical_idx, extents):
        e = extent.value if hasattr(extent, "value") else extent
        if bound_of(idx, ctx.var_bounds)[1] >= e:
            c = idx < extent
            cond = c if cond is None else logical("and", cond, c)
    return cond


def uses_var(e, var: Var) -> bool:
    return any(n is var for n in walk(e))


def in_bounds_condition(ctx: ThreadContext, buffer: Buffer, indices) -> Expr | None:
    """The condition that indices lie inside a global buffer, or None when provably so."""
    cond = None
    for idx, extent in zip(indices, buffer.shape):
        lo, hi = bound_of(idx, ctx.var_bounds)
        ext_lo = bound_of(extent, ctx.var_bounds)[0] if isinstance(extent, Expr) else extent
        parts = []
        if lo < 0:
            parts.append(idx >= 0)
        if not hi < ext_lo:
            parts.append(idx < extent)
        for p in parts:
            cond = p if cond is None else logical("and", cond, p)
    return cond


class AccessRewriter(Mutator):
    """Rewrites loads and stores of one thread's lowered code to the buffers' storage.

    local_index(fragment, indices) is supplied by the caller: it must return the register
    index of an element this thread holds (a T.Parallel lowering proves ownership first)."""

    def __init__(self, ctx: ThreadContext, local_index):
        self.ctx = ctx
        self.local_index = local_index

    def visit_BufferLoad(self, e: BufferLoad):
        indices = tuple(self.ctx.simplify(self.visit(i)) for i in e.indices)
        b = e.buffer
        if b.scope == FRAGMENT:
            return BufferLoad(self.ctx.register_array(b), (self.local_index(b, indices),), e.span)
        if is_shared(b.scope):
            return BufferLoad(self.ctx.flat(b), (self.ctx.shared_offset(b, indices),), e.span)
        load = BufferLoad(b, indices, e.span)
        if b.scope == GLOBAL:
            cond = in_bounds_condition(self.ctx, b, indices)
            if cond is not None:
                return select(cond, load, const(0, b.dtype))
        return load

    def visit_Call(self, e: Call):
        """address_of(global[...]) names an address, it reads nothing: no bounds guard (what
        takes the address checks its range, as the L2 prefetch's condition does)."""
        load = e.args[0] if e.name == "address_of" and e.args else None
        if isinstance(load, BufferLoad) and load.buffer.scope == GLOBAL:
            indices = tuple(self.ctx.simplify(self.visit(i)) for i in load.indices)
            return dataclasses.replace(e, args=(BufferLoad(load.buffer, indices, load.span),))
        return self.generic_visit(e)

    def visit_BufferStore(self, s: BufferStore):
        value = self.visit(s.value)
        indices = tuple(self.ctx.simplify(self.visit(i)) for i in s.indices)
        b = s.buffer
        if b.scope == FRAGMENT:
            return BufferStore(self.ctx.register_array(b), (self.local_index(b, indices),),
                               value, s.span)
        if is_shared(b.scope):
            return BufferStore(self.ctx.flat(b), (self.ctx.shared_offset(b, indices),), value,
                               s.span)
        store = BufferStore(b, indices, value, s.span)
        if b.scope == GLOBAL:
            cond = in_bounds_condition(self.ctx, b, indices)
            if cond is not None:
                return IfThenElse(cond, store, None, s.span)
        return store

    def visit_Atomic(self, s):
        """A scalar atomic: one hardware atomic on the element's address."""
        from ....ir.tileop import Atomic
        assert isinstance(s, Atomic)
        value = self.visit(s.value)
        indices = tuple(self.ctx.simplify(self.visit(i)) for i in s.dst.starts)
        b = s.dst.buffer
        if is_shared(b.scope):
            target = BufferLoad(self.ctx.flat(b), (self.ctx.shared_offset(b, indices),))
        else:
            target = BufferLoad(b, indices)
        call = Evaluate(Call(ATOMIC.format(kind=s.kind), (Call("address_of", (target,), dt.handle),
                                                       value), dt.handle), s.span)
        if b.scope == GLOBAL:
            cond = in_bounds_condition(self.ctx, b, indices)
            if cond is not None:
                return IfThenElse(cond, call, None, s.span)
        return call


def constant_int(e) -> int | None:
    e = simplify(convert(e)) if not isinstance(e, int) else e
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, Const) else None


def require_static(what: str, e, span) -> int:
    v = constant_int(e)
    if v is None:
        raise TileError(f"{what} must be known at compile time for the CUDA backend", span)
    return v


class _FoldProvable(Mutator):
    """Replaces integer comparisons that the variables' ranges decide by constants, and the
    selects, logic and ifs that then become constant: a bounds mask on a tile that never
    reaches the edge (k * 64 + j < 4096 for every k and j) disappears from the kernel."""

    def __init__(self, var_bounds: dict):
        self.vb = var_bounds

    def visit_Binary(self, e):
        from ....ir.expr import Binary, logical
        a, b = self.visit(e.a), self.visit(e.b)
        if e.op in ("and", "or"):
            return logical(e.op, a, b, e.span)
        if e.op in ("<", "<=", ">", ">=", "==", "!=") and a.dtype.is_int and b.dtype.is_int:
            decided = _decide(e.op, bound_of(a, self.vb), bound_of(b, self.vb))
            if decided is not None:
                return const(decided, dt.boolean, e.span)
        if a is e.a and b is e.b:
            return e
        return Binary(e.op, a, b, e.dtype, e.span)

    def visit_Select(self, e):
        cond = self.visit(e.cond)
        if isinstance(cond, Const):
            return self.visit(e.a if cond.value else e.b)
        return select(cond, self.visit(e.a), self.visit(e.b), e.span)

    def visit_IfThenElse(self, s):
        cond = self.visit(s.cond)
        if isinstance(cond, Const):
            branch = s.then_body if cond.value else s.else_body
            return self.visit(branch) if branch is not None else _nothing()
        return IfThenElse(cond, self.visit(s.then_body),
                          None if s.else_body is None else self.visit(s.else_body), s.span)


def _nothing():
    from ....ir.stmt import SeqStmt
    return SeqStmt(())


def _decide(op, a, b):
    """The comparison a op b over ranges a = (lo, hi), b = (lo, hi), when every value agrees."""
    (alo, ahi), (blo, bhi) = a, b
    if op == "<":
        return True if ahi < blo else False if alo >= bhi else None
    if op == "<=":
        return True if ahi <= blo else False if alo > bhi else None
    if op == ">":
        return True if alo > bhi else False if ahi <= blo else None
    if op == ">=":
        return True if alo >= bhi else False if ahi < blo else None
    if op == "==":
        return True if alo == ahi == blo == bhi else False if ahi < blo or bhi < alo else None
    return False if alo == ahi == blo == bhi else True if ahi < blo or bhi < alo else None


def fold_provable(node, ctx: ThreadContext):
    return _FoldProvable(ctx.var_bounds).visit(node)
