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
    over jj) are checked at every value of those variables; where their range is not known
    (or too large to check) nothing proves the thread holds what it reads, so the read goes
    through shared memory and a write is refused."""
    T, n = ctx.num_threads, frag.locals_per_thread
    env = {id(ctx.tx): np.arange(T)[:, None, None], id(l): np.arange(n)[None, :, None]}
    active = _active_table(frag, ctx, l)
    for node in walk(body):
        if not isinstance(node, (BufferLoad, BufferStore)) or node.buffer.scope != FRAGMENT:
            continue
        inner = [v for i in node.indices for v in walk(i)]
        if any(isinstance(v, (BufferLoad, Call)) for v in inner):
            # Indices computed from loaded data (or the emulator's index checks) are left to
            # the layout, which keeps such a fragment whole in every thread (infer_layouts).
            continue
        layout = ctx.layouts.buffer(node.buffer)
        if layout.is_fully_replicated() and isinstance(node, BufferLoad):
            continue    # every thread holds every element
        free = {id(v): v for v in inner if isinstance(v, Var) and id(v) not in env}
        chunks = _outer_values(free.values(), ctx, T * n)
        if chunks is None:
            _unproven(node, free.values(), ctx, loop, relayout)
            continue
        for values in chunks:
            if _check_element_owners(node, {**env, **values}, layout, ctx, loop, relayout,
                                     active):
                break


_OUTER_LIMIT = 1 << 16      # assignments of surrounding loop variables checked at most
_TABLE_CELLS = 1 << 21      # (thread, local, assignment) cells evaluated at once


def _outer_values(variables, ctx: ThreadContext, cells: int):
    """The assignments of variables bound by surrounding loops of constant range, as chunks of
    {id(var): values along a third axis} of at most _TABLE_CELLS / cells values each ([{}] for
    no variable); None where one has no known range or there are more than _OUTER_LIMIT."""
    ranges = []
    for v in variables:
        lo, hi = ctx.var_bounds.get(id(v), (0, float("inf")))
        if hi == float("inf") or lo == float("-inf"):
            return None
        ranges.append((id(v), np.arange(int(lo), int(hi) + 1, dtype=np.int64)))
    if not ranges:
        return [{}]
    count = int(np.prod([len(r) for _, r in ranges], dtype=np.int64))
    if count > _OUTER_LIMIT:
        return None
    grids = np.meshgrid(*[r for _, r in ranges], indexing="ij")
    flat = [(key, g.reshape(-1)) for (key, _), g in zip(ranges, grids)]
    step = max(1, _TABLE_CELLS // max(1, cells))
    return [{key: values[None, None, start:start + step] for key, values in flat}
            for start in range(0, count, step)]


def _every_copy_written(node, idx, holders, active, loop):
    """A fragment kept in several threads (replicated) stays one value only if a loop that
    writes an element writes it in every thread that holds it: the loop's threads for each
    element (at each assignment of the surrounding variables) must include all its holders
    (`holders`: each replica's holding thread, on the (thread, local, assignment) table of
    the element indices `idx`)."""
    shape = holders[0].shape
    T = shape[0]
    dims = [int(x) for x in node.buffer.static_shape()]
    element = np.zeros(shape, np.int64)
    for i, extent in zip(idx, dims):
        element = element * extent + i
    E = int(np.prod(dims, dtype=np.int64))
    key = np.arange(shape[2])[None, None, :] * E + element    # (assignment, element)
    live = np.broadcast_to(active[:, :, None], shape)
    written = np.unique((key * T + np.arange(T)[:, None, None])[live])
    for holder in holders:
        missing = ~np.isin((key * T + holder)[live], written)
        if missing.any():
            cell = tuple(np.argwhere(live)[int(np.argmax(missing))])
            where = tuple(int(i[cell]) for i in idx)
            raise TileError(
                f"T.Parallel: element {where} of fragment {node.buffer.name} is kept in "
                f"several threads (thread {int(holder[cell])} among them), but this loop "
                f"writes it only in thread {int(cell[0])}: the other copies would keep the old "
                f"value. Write {node.buffer.name} in a T.Parallel loop indexed by its own "
                f"variables (x[i, j]), or keep it in a shared tile.", node.span or loop.span)


def _unproven(node, variables, ctx: ThreadContext, loop: For, relayout: Relayout):
    names = ", ".join(sorted(v.name for v in variables))
    if isinstance(node, BufferLoad):
        relayout.read_through_shared(node.buffer, node.span or loop.span,
                                     tuple(str(i) for i in node.indices), 0)
        return
    raise TileError(
        f"T.Parallel: fragment {node.buffer.name} is written at indices that depend on "
        f"{names}, whose range is not known where the loop is compiled (or has too many "
        f"values to check): nothing shows the element lives in the thread that writes it. "
        f"Index the fragment by the loop's own variables, or give the surrounding loop a "
        f"constant extent.", node.span or loop.span)


def _check_element_owners(node, env, layout, ctx, loop, relayout, active) -> bool:
    """Check one chunk of assignments; True when a read was sent through shared memory (the
    other chunks need not be looked at)."""
    T, n = ctx.num_threads, active.shape[1]
    idx = [evaluate_table(i, env) for i in node.indices]
    shape = np.broadcast_shapes((T, n, 1), *(np.shape(i) for i in idx))
    idx = [np.broadcast_to(i, shape) for i in idx]
    # The layout's thread expression evaluated on the index tables: the numbers
    # thread_of(indices) would give, without building and simplifying it symbolically.
    at = {id(v): i for v, i in zip(layout.in_vars, idx)}
    holders = [np.broadcast_to(evaluate_table(layout.thread,
                                              {**at, id(layout.rep_var): np.int64(rep)}), shape)
               for rep in range(layout.replicate)]
    owned = np.zeros(shape, bool)
    for holder in holders:
        owned |= holder == np.arange(T)[:, None, None]
    slot = misowned(active, owned.all(axis=2))
    if slot is None:
        if isinstance(node, BufferStore) and len(holders) > 1:
            _every_copy_written(node, idx, holders, active, loop)
        return False
    t, k = slot
    v = int(np.argmin(owned[t, k]))
    where = tuple(int(i[t, k, v]) for i in idx)
    if isinstance(node, BufferLoad):
        relayout.read_through_shared(node.buffer, node.span or loop.span, where, int(t))
        return True
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
