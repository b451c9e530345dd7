"""T.Parallel on threads (paper algorithm 3): partition the iteration space by the loop's
layout, bind each thread's share, resolve fragment accesses to register indices.

The loop layout is a Fragment over the iteration space. Thread tx runs the iterations
logical_of(tx, l) for l in [0, locals_per_thread), in an unrolled loop. Every fragment the body
touches must hold the touched element in the same thread (checked by enumerating the layout at
compile time); its register index must not depend on the thread, or the register array would
spill to local memory, so when the symbolic form still names the thread the index is computed
by enumeration instead (and the loop unrolled here if no affine form exists).
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from ....ir.buffer import FRAGMENT
from ....ir.expr import BufferLoad, Call, Const, Var, const
from ....ir.stmt import BufferStore, For, IfThenElse, seq
from ....arith.bounds import simplify_int_ops
from ....ir.visitor import substitute, walk
from ....ir.annotations import ASYNC_COPY
from .relayout import ROWS_ADVICE, Relayout, misowned, where_chosen
from .uniform_select import unswitch_selects
from .vector_runs import stage_runs
from .lowering import (AccessRewriter, ThreadContext, coverage_guard, evaluate_table,
                       fold_provable, uses_var)


class _NeedsUnroll(Exception):
    pass


def parallel_nest(loop: For):
    """(vars, extents, body) of a nest of directly nested T.Parallel loops."""
    loops = [loop]
    while isinstance(loops[-1].body, For) and loops[-1].body.kind == "parallel":
        loops.append(loops[-1].body)
    return [l.var for l in loops], [l.extent for l in loops], loops[-1].body, [l.start for l in loops]


def lower_parallel(loop: For, ctx: ThreadContext) -> object:
    loop_vars, extents, body, starts = parallel_nest(loop)
    # The ranges of the loops inside an iteration, so that a register index walking a
    # fragment with their variables (x[t * 8 + e], infer_layouts.walked_in_registers)
    # simplifies to one that names no thread.
    for inner in walk(body):
        if isinstance(inner, For) and inner.kind != "parallel" and \
                isinstance(inner.start, Const) and isinstance(inner.extent, Const):
            ctx.var_bounds.setdefault(id(inner.var), (inner.start.value,
                                                      inner.start.value + inner.extent.value - 1))
    frag = ctx.layouts.loop(loop)
    n = frag.locals_per_thread
    l = ctx.fresh("l", n)
    logical_idx = [ctx.simplify(x) for x in frag.logical_of(ctx.tx, l)]
    mapping = {id(v): ctx.simplify(idx + s) for v, idx, s in zip(loop_vars, logical_idx, starts)}
    guard = coverage_guard(logical_idx, extents, ctx)
    own = [mapping[id(v)] for v in loop_vars] if all(
        isinstance(x, Const) and x.value == 0 for x in starts) else None

    relayout = Relayout(ctx, loop)

    def lower(body):
        sub = _simplify_ints(fold_provable(substitute(body, mapping), ctx), ctx)
        if frag.replicate > 1:
            sub = _first_replica_writes(sub, frag, ctx, l)
        check_ownership(sub, frag, ctx, l, loop, relayout)
        sub = relayout.redirect(sub)
        try:
            inner = AccessRewriter(ctx, _resolver(ctx, l, n, None, frag, own)).visit(sub)
            if guard is not None:
                inner = IfThenElse(guard, inner, None, loop.span)
            return stage_runs(For(l, const(0), const(n), "unroll", inner, {}, loop.span), frag,
                              ctx, asynchronous=bool(loop.annotations.get(ASYNC_COPY)))
        except _NeedsUnroll:
            parts = []
            for value in range(n):
                concrete = _simplify_ints(substitute(sub, {id(l): const(value)}), ctx)
                part = AccessRewriter(ctx, _resolver(ctx, l, n, value, frag, own)).visit(concrete)
                if guard is not None:
                    part = IfThenElse(substitute(guard, {id(l): const(value)}), part, None,
                                      loop.span)
                parts.append(part)
            return seq(parts)

    unswitched = unswitch_selects(loop_vars, extents, starts, body) if ctx.unswitch_masks \
        else None
    if unswitched is None:
        out = lower(body)
    else:
        whole, fast = unswitched
        whole = fold_provable(whole, ctx)
        if not isinstance(whole, Const):
            slow = lower(body)
            out = IfThenElse(whole, lower(fast), slow, loop.span)
        else:  # the ranges decide it: one body, without the mask where it always holds
            out = lower(fast if whole.value else body)
    return relayout.around(_thread_guard(out, frag, ctx, loop.span))


def _simplify_ints(node, ctx: ThreadContext):
    """Every integer expression of a lowered body simplified with the ranges of the thread and
    register indices (arith/bounds.simplify_int_ops); once the register index is a constant the
    loads of one element per register group become the same expression, which nvcc then loads
    once."""
    return simplify_int_ops(node, ctx.var_bounds)


def _first_replica_writes(body, frag, ctx: ThreadContext, l: Var):
    """In a loop laid out over a replicated fragment several threads run each iteration; only
    the first replica may write shared or global memory, or an in-place update
    (x[i] = x[i] * s) would be applied once per replica."""
    from ....ir.visitor import Mutator
    rep = ctx.simplify(frag.rep_of(ctx.tx, l))

    class Guard(Mutator):
        def visit_BufferStore(self, s):
            if s.buffer.scope == FRAGMENT or s.buffer.scope.startswith("local"):
                return s
            return IfThenElse(rep == 0, s, None, s.span)

        def visit_Atomic(self, s):
            return IfThenElse(rep == 0, s, None, s.span)

    return Guard().visit(body)


def _resolver(ctx: ThreadContext, l: Var, n: int, l_value, loop_layout=None, logical=None):
    from ....ir.linear import structural_key
    logical_key = structural_key(tuple(logical)) if logical is not None else None

    def local_index(frag_buffer, indices):
        layout = ctx.layouts.buffer(frag_buffer)
        if layout is loop_layout and logical_key is not None and \
                structural_key(tuple(indices)) == logical_key:
            # The loop runs over this very fragment: iteration l is register l.
            return l if l_value is None else const(l_value)
        e = ctx.simplify(layout.local_of(list(indices)))
        if not uses_var(e, ctx.tx):
            return e if l_value is None else ctx.simplify(substitute(e, {id(l): const(l_value)}))
        per_l = _per_local_values(e, ctx, l, n, frag_buffer)
        if per_l is None:
            # Each thread needs a different register (a replicated tile read at positions that
            # vary by thread): a run-time index, correct but kept in local memory.
            return e if l_value is None else ctx.simplify(substitute(e, {id(l): const(l_value)}))
        if l_value is not None:
            return const(int(per_l[l_value]))
        if n == 1:
            return const(int(per_l[0]))
        fitted = _blocked_affine(per_l, l)
        if fitted is not None:
            return ctx.simplify(fitted)
        raise _NeedsUnroll()
    return local_index


def _blocked_affine(per_l: np.ndarray, l: Var):
    """per_l[l] as l // c * a + l % c * b + base for a power of two c (c = 1: affine in l),
    or None: a tile read at one register per run of c iterations (a row's scale, a byte
    holding two nibbles) stays a loop instead of being unrolled."""
    n, base = len(per_l), int(per_l[0])
    idx = np.arange(n)
    c = 1
    while c <= n:
        b = int(per_l[1] - per_l[0]) if c > 1 else 0
        a = int(per_l[c] - per_l[0]) if c < n else 0
        if np.array_equal(idx // c * a + idx % c * b + base, per_l):
            if c == 1:
                return l * a + base
            return l // c * a + l % c * b + base
        c *= 2
    return None


def _per_local_values(e, ctx: ThreadContext, l: Var, n: int, buffer) -> np.ndarray:
    """The register index for each l, if it is the same in every thread; else None."""
    inner = list(walk(e))
    free = {id(v) for v in inner if isinstance(v, Var)} - {id(ctx.tx), id(l)}
    if free or any(isinstance(v, (BufferLoad, Call)) for v in inner):  # known only at run time
        return None
    table = evaluate_table(e, {id(ctx.tx): np.arange(ctx.num_threads)[:, None],
                               id(l): np.arange(n)[None, :]})
    table = np.broadcast_to(table, (ctx.num_threads, n))
    if not np.all(table == table[0]):
        return None
    return table[0].astype(np.int64)


def check_ownership(body, frag, ctx: ThreadContext, l: Var, loop: For, relayout: Relayout):
    """Every fragment element the body writes must live in the thread that runs it; a fragment
    read at elements other threads hold is read through shared memory (relayout). Indices that
    also use the variables of loops around the nest (`x[i, jj * 4 + j]` in a T.serial loop
    over jj) are checked at every value of those the loops' constant ranges give."""
    T, n = ctx.num_threads, frag.locals_per_thread
    env = {id(ctx.tx): np.arange(T)[:, None], id(l): np.arange(n)[None, :]}
    active = _active_table(frag, ctx, l)
    for node in walk(body):
        if not isinstance(node, (BufferLoad, BufferStore)) or node.buffer.scope != FRAGMENT:
            continue
        inner = [v for i in node.indices for v in walk(i)]
        free = {id(v): v for v in inner if isinstance(v, Var) and id(v) not in env}
        outer = _outer_values(free.values(), ctx)
        if outer is None or any(isinstance(v, (BufferLoad, Call)) for v in inner):
            # Indices that depend on loaded data, on variables of unknown range (or the
            # emulator's index checks, emulator/index_checks.py) are checked at run time only.
            continue
        for values in outer:
            _check_element_owners(node, {**env, **values}, frag, ctx, loop, relayout, active)


def _outer_values(variables, ctx: ThreadContext, limit: int = 4096):
    """Every assignment ({id(var): value}) of variables bound by enclosing loops of constant
    range, or None when one has no known range or there are more than `limit`."""
    out = [{}]
    for v in variables:
        lo, hi = ctx.var_bounds.get(id(v), (0, float("inf")))
        if hi == float("inf") or len(out) * (hi - lo + 1) > limit:
            return None
        out = [{**a, id(v): np.int64(x)} for a in out for x in range(int(lo), int(hi) + 1)]
    return out


def _check_element_owners(node, env, frag, ctx, loop, relayout, active):
    T, n = ctx.num_threads, frag.locals_per_thread
    layout = ctx.layouts.buffer(node.buffer)
    idx = [np.broadcast_to(evaluate_table(i, env), (T, n)) for i in node.indices]
    # The layout's thread expression evaluated on the index tables: the numbers
    # thread_of(indices) would give, without building and simplifying it symbolically.
    at = {id(v): i for v, i in zip(layout.in_vars, idx)}
    owned = np.zeros((T, n), bool)
    for rep in range(layout.replicate):
        holder = evaluate_table(layout.thread, {**at, id(layout.rep_var): np.int64(rep)})
        owned |= np.broadcast_to(holder, (T, n)) == np.arange(T)[:, None]
    slot = misowned(active, owned)
    if slot is None:
        return
    t, k = slot
    where = tuple(int(i[t, k]) for i in idx)
    if isinstance(node, BufferLoad):
        relayout.read_through_shared(node.buffer, node.span or loop.span, where, int(t))
        return
    raise TileError(
        f"T.Parallel: element {where} of fragment {node.buffer.name} is written by thread "
        f"{t}, but the layout {where_chosen(ctx, node.buffer)} chose for "
        f"{node.buffer.name} keeps it in another thread: a loop writes only the elements "
        f"its threads hold; write {node.buffer.name} in a T.Parallel loop of its own. "
        f"{ROWS_ADVICE}", node.span or loop.span)


def _active_table(frag, ctx: ThreadContext, l: Var) -> np.ndarray:
    """(thread, local) slots of the loop layout that hold an iteration."""
    T, n = ctx.num_threads, frag.locals_per_thread
    env = {id(ctx.tx): np.arange(T)[:, None], id(l): np.arange(n)[None, :]}
    active = np.zeros((T, n), bool)
    active[:frag.num_threads, :] = True
    for idx, extent in zip(frag.logical_of(ctx.tx, l)[:frag.ndim], frag.shape):
        values = np.broadcast_to(evaluate_table(idx, env), (T, n))
        active &= (values >= 0) & (values < extent)
    return active


def _thread_guard(stmt, frag, ctx: ThreadContext, span):
    if frag.num_threads < ctx.num_threads:
        return IfThenElse(ctx.tx < frag.num_threads, stmt, None, span)
    if frag.num_threads > ctx.num_threads:
        raise TileError(f"internal: a loop layout over {frag.num_threads} threads in a block of "
                        f"{ctx.num_threads}", span)
    return stmt
