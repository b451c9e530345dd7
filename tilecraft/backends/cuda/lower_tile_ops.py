"""lower_tile_ops: tile-level kernels -> code for one thread (paper algorithm 3).

Per kernel: infer the layouts, then replace each tile op and T.Parallel nest by its thread-level
code (the op's entry in the table of tileops/dispatch.py; tileops/parallel.py for nests),
fragments by register arrays and shared tiles by flat arrays. What stays tile-level in form
(serial loops, block-uniform ifs, scalar statements) runs on every thread, except that a scalar
statement's effects happen once: see _KernelLowering.scalar.
"""
from __future__ import annotations

import dataclasses

from ...arith.bounds import bounds_under
from ...ir.linear import constant_value
from ...errors import TileError, span_scope
from ...ir import tileop as top
from ...ir.buffer import FRAGMENT, GLOBAL, BufferRegion, is_shared
from ...ir.expr import Expr, Var
from ...ir.thread_varying import ThreadVarying, is_local, is_per_thread_op, thread_indices
from ...ir.visitor import map_kernels, substitute, walk
from .thread_ops import header_calls
from .tileops.per_thread import per_thread_loops
from ...ir.stmt import (PERSISTENT_TILES, Allocate, BufferStore, Evaluate, For, IfThenElse,
                       Kernel, SeqStmt, seq)
from .tileops.dispatch import LOWERINGS
from .tileops.fragment_elements import broadcast_reads, element_writer, guard_for_holders
from .tileops.wgmma import WARPGROUP
from ...pass_config import PassConfigKey
from .tileops.lowering import AccessRewriter, ThreadContext
from .tileops.parallel import lower_parallel
from .tileops.tma_im2col import lower_tma_im2col
from ...passes.infer_layouts import infer_layouts
from ...passes.parallel_nests import on_warpgroup_fragments
from ...passes.plan_shared_memory import footprint
from ...ir.annotations import (LAYOUTS, OPERAND_AHEAD, SMEM_ARENA, SMEM_BYTES, SMEM_OFFSETS, SOFTWARE_PIPELINED,
                               MANUAL_WARPGROUPS, TENSOR_MAPS, TMA_BARRIER, USE_SWIZZLE,
                               UNROLL_FACTOR, WARPGROUP_FRAGMENTS, WARPGROUP_THREAD, WARP_SPECIALIZED,
                               is_warpgroup_branch)
from .rules import CUDA_RULES


class _KernelLowering:
    def __init__(self, kernel: Kernel, unswitch_masks: bool = True):
        tx = Var("tx")
        layouts = kernel.attrs.get(LAYOUTS) or infer_layouts(kernel, CUDA_RULES)
        # Per-thread code: what differs between threads runs on every thread (scalar,
        # tile_op); the thread indices it reads are terms of tx from here on.
        self.varying = ThreadVarying(kernel)
        self.varying.indices.add(id(tx))
        self.every_thread = False   # the statement being lowered runs on every thread
        self.divergent = False      # ... under a condition that differs between threads
        if kernel.thread_bindings:
            kernel = dataclasses.replace(kernel, thread_bindings=(), body=substitute(
                kernel.body, thread_indices(kernel, tx)))
        self.kernel = kernel
        self.ctx = ThreadContext(tx, kernel.num_threads, layouts, unswitch_masks=unswitch_masks)
        self.ctx.var_bounds[id(tx)] = (0, kernel.num_threads - 1)
        for v, g in zip(kernel.block_vars, kernel.grid):
            n = constant_value(g)
            self.ctx.var_bounds[id(v)] = (0, (n - 1) if n is not None else float("inf"))
        self.swizzle = None
        self.in_warpgroup_branch = False   # lowering the body of one warpgroup's own branch
        self.ctx.fragment_registers = sum(
            layouts.buffer(n.buffer).locals_per_thread * max(1, n.buffer.dtype.bits // 32)
            for n in walk(kernel.body)
            if isinstance(n, Allocate) and n.buffer.scope == FRAGMENT)
        # Ops on one warpgroup's fragments (seesaw_warpgroups) run as if in a block of its
        # 128 threads, numbered wtx = tx % 128; they share everything else with the kernel.
        self.local = set(kernel.attrs.get(WARPGROUP_FRAGMENTS, ()))
        # A kernel of T.ws regions (manual_warpgroups): every op of a region runs on its
        # warpgroup's threads, whether or not it touches one of its fragments.
        self.manual = bool(kernel.attrs.get(MANUAL_WARPGROUPS))
        self.wg_ctx = None
        if self.local or self.manual:
            c = self.ctx
            wtx = Var("wtx")
            self.wg_ctx = ThreadContext(
                wtx, WARPGROUP, layouts, var_bounds=c.var_bounds, registers=c.registers,
                flat_shared=c.flat_shared, allocations=c.allocations,
                tensor_maps=c.tensor_maps, unswitch_masks=unswitch_masks,
                private_scratch=c.private_scratch, fragment_registers=c.fragment_registers)
            c.var_bounds[id(wtx)] = (0, WARPGROUP - 1)

    def context(self, op) -> ThreadContext:
        if self.wg_ctx is not None and (on_warpgroup_fragments(op, self.local) or
                                        self.manual and self.in_warpgroup_branch):
            return self.wg_ctx
        return self.ctx

    def run(self) -> Kernel:
        body = self.stmt(self.kernel.body)
        body = header_calls(body, self.varying.per_thread)
        attrs = dict(self.kernel.attrs)
        if self.wg_ctx is not None:
            attrs[WARPGROUP_THREAD] = self.wg_ctx.tx
        if self.swizzle is not None:
            attrs[USE_SWIZZLE] = self.swizzle
        if self.ctx.tensor_maps:
            attrs[TENSOR_MAPS] = list(self.ctx.tensor_maps.values())
        return dataclasses.replace(self.kernel, body=body, thread_var=self.ctx.tx, attrs=attrs)

    def scalar_rewriter(self):
        def local_index(buffer, indices):
            return self.ctx.simplify(self.ctx.layouts.buffer(buffer).local_of(list(indices)))
        return AccessRewriter(self.ctx, local_index)

    def lowered_scalars(self, exprs) -> tuple[list, list]:
        """Scalar expressions of a statement's header (a condition, a loop's bounds) as thread
        code reads them: the statements that broadcast the fragment elements they read, and
        the expressions with tiles read through their lowered layouts."""
        prefix, out = [], []
        for e in exprs:
            before, e = broadcast_reads(self.ctx, e, lowering=self)
            prefix += before
            out.append(self.scalar_rewriter().visit(e))
        return prefix, out

    def stmt(self, s):
        # Expressions built while lowering s take s's span from the scope: without one, each
        # asks for its caller by walking the stack (tens of thousands of walks a kernel).
        with span_scope(getattr(s, "span", None)):
            return self._stmt(s)

    def _stmt(self, s):
        ctx = self.ctx
        if isinstance(s, SeqStmt):
            return seq([self.stmt(x) for x in s.stmts], s.span)
        if isinstance(s, (For, IfThenElse)) and self.varying.condition(s) and \
                not self.divergent:
            self.divergent = True
            try:
                return self._stmt(s)
            finally:
                self.divergent = False
        if isinstance(s, For):
            if s.kind == "parallel":
                if TMA_BARRIER in s.annotations:   # T.c2d_im2col's nest in a TMA producer
                    return lower_tma_im2col(s, self.ctx)
                return lower_parallel(s, self.context(s))
            n = constant_value(s.extent)
            lo = constant_value(s.start)
            if n is not None and lo is not None:
                ctx.var_bounds[id(s.var)] = (lo, lo + n - 1)
            else:
                ctx.var_bounds[id(s.var)] = (0, float("inf"))
            kind = "serial" if s.kind == "pipelined" else s.kind
            # Tile-level annotations are spent here; which loop is a warp-specialized consumer
            # (overlap_wgmma, also whether it computes an operand ahead), a cp.async pipeline
            # (rotate_mma_loop) or a persistent kernel's loop over tiles (the code generator), and a
            # T.unroll's factor, stay known to thread-level code.
            kept = {k: v for k, v in s.annotations.items()
                    if k in (WARP_SPECIALIZED, OPERAND_AHEAD, SOFTWARE_PIPELINED,
                             PERSISTENT_TILES, UNROLL_FACTOR)}
            # Bounds that read tiles (a count a prefix sum left in shared memory) read them
            # as every other scalar expression does: through the tile's lowered layout.
            prefix, (start, extent) = [], (s.start, s.extent)
            if n is None or lo is None:
                prefix, (start, extent) = self.lowered_scalars((s.start, s.extent))
            loop = dataclasses.replace(s, start=start, extent=extent, body=self.stmt(s.body),
                                       kind=kind, annotations=kept)
            return seq(prefix + [loop], s.span) if prefix else loop
        if isinstance(s, IfThenElse):
            prefix, (cond,) = self.lowered_scalars((s.cond,))
            # What the guard says of loop variables holds in its body: a pipelined loop's
            # copies under `k + 2 < n` need no bounds check on tiles the guard keeps in range.
            narrowed = bounds_under(s.cond, ctx.var_bounds)
            outer = {v: ctx.var_bounds[v] for v in narrowed}
            ctx.var_bounds.update(narrowed)
            enclosing, self.in_warpgroup_branch = (self.in_warpgroup_branch,
                                                   self.in_warpgroup_branch or
                                                   is_warpgroup_branch(s))
            then_body = self.stmt(s.then_body)
            ctx.var_bounds.update(outer)
            else_body = None if s.else_body is None else self.stmt(s.else_body)
            self.in_warpgroup_branch = enclosing
            return seq(prefix + [dataclasses.replace(s, cond=cond, then_body=then_body,
                                                     else_body=else_body)], s.span)
        if isinstance(s, Allocate):
            return self.allocate(s)
        if isinstance(s, (BufferStore, Evaluate)):
            return self.scalar(s)
        if isinstance(s, top.TileOp):
            return self.tile_op(s)
        raise TileError(f"internal: cannot lower {type(s).__name__}", getattr(s, "span", None))

    def scalar(self, s):
        """A statement outside T.Parallel, which the language runs once for the block: a
        store into global or shared memory, or an atomic, runs on one thread; a fragment
        element is written by the threads that hold it, and one read that not every thread
        holds is broadcast first (tileops/fragment_elements); the rest (local variables, the
        calls of header functions) runs on every thread."""
        writer = element_writer(self.ctx, s, self) if isinstance(s, BufferStore) else None
        self.every_thread = self.divergent or self.varying.statement(s)
        prefix, s = broadcast_reads(self.ctx, s, writer, self)
        lowered = self.scalar_rewriter().visit(s)
        if writer is not None:
            lowered = guard_for_holders(self.ctx, writer, lowered)
        elif isinstance(s, BufferStore) and (s.buffer.scope == GLOBAL or
                                             is_shared(s.buffer.scope)):
            lowered = self.on_one_thread(lowered)
        return seq(prefix + [lowered], s.span)

    def on_one_thread(self, lowered):
        """lowered, run by the first thread of those running its statement (of the block, or
        of the warpgroup whose own branch holds it); in per-thread code, by every thread
        where the statement's values differ between threads or only some threads reach it."""
        if self.every_thread:
            return lowered
        tx = self.wg_ctx.tx if self.in_warpgroup_branch and self.wg_ctx is not None \
            else self.ctx.tx
        return IfThenElse(tx == 0, lowered, None, lowered.span)

    def refuse_warpgroup_fragment(self, buffer, span):
        if buffer.name in self.local or self.in_warpgroup_branch:
            raise TileError(f"fragment {buffer.name} is read or written one element at a time "
                            "in a loop whose turns alternate between warpgroups; access it in "
                            "a T.Parallel loop instead", span)

    def allocate(self, s: Allocate):
        b = s.buffer
        if b.scope == FRAGMENT:
            return Allocate(self.ctx.register_array(b), s.span)
        if is_shared(b.scope):
            return Allocate(self.ctx.flat(b), s.span)
        return s   # a global workspace (T.alloc_global) is a kernel parameter of the launch

    def operands_read(self, op, prefix: list):
        """op with the index expressions of its operands (and a scalar value) rewritten to the
        lowered storage: `K[tile_list[idx] * 64, 0]` reads tile_list from shared memory. The
        broadcasts of fragment elements they read (fragment_elements) go to `prefix`."""
        rewriter = self.scalar_rewriter()

        def rewrite(e):
            before, e = broadcast_reads(self.ctx, e, lowering=self)
            prefix.extend(before)
            return rewriter.visit(e)
        changes = {}
        for f in dataclasses.fields(op):
            v = getattr(op, f.name)
            if isinstance(v, BufferRegion):
                ranges = tuple((rewrite(a), rewrite(b)) for a, b in v.ranges)
                changes[f.name] = dataclasses.replace(v, ranges=ranges)
            elif f.name == "value" and isinstance(v, Expr):
                changes[f.name] = rewrite(v)
        if not changes:
            return op
        new = dataclasses.replace(op, **changes)
        warps = self.ctx.layouts.gemm_warps
        if id(op) in warps:
            warps[id(new)] = warps[id(op)]
        return new

    def tile_op(self, op):
        self.every_thread = self.divergent or self.varying.statement(op)
        if is_per_thread_op(op) and (is_local(op.dst.buffer) or self.every_thread):
            prefix, loops = broadcast_reads(self.ctx, per_thread_loops(op), None, self)
            return seq(prefix + [self.scalar_rewriter().visit(loops)], op.span)
        prefix = []
        op = self.operands_read(op, prefix)
        lowering = LOWERINGS.get(type(op))
        if lowering is None:
            raise TileError(f"T.{op.op_name} is not supported by the CUDA backend yet", op.span)
        lowered = lowering(op, self.context(op), self)
        return seq(prefix + [lowered], op.span) if prefix else lowered


def lower_tile_ops(func, configs: dict | None = None):
    """Return func with every kernel lowered to thread-level code."""
    unswitch = not (configs or {}).get(PassConfigKey.TL_DISABLE_UNIFORM_MASKS)
    arena = {}
    planned = func.attrs.get(SMEM_OFFSETS, {})

    def lower_kernel(k):
        lowering = _KernelLowering(k, unswitch)
        kernel = lowering.run()
        top = kernel.attrs.get(SMEM_BYTES, 0)
        for key, flat in lowering.ctx.flat_shared.items():
            if key in planned:
                arena[id(flat)] = planned[key][0]
        # Shared scratch the lowering itself added (cross-warp reduction slots, scan and
        # staging tiles) goes above the planned tiles. Each reduction that keeps no
        # barrier after its reads (insert_barriers) gets bytes of its own; the rest share
        # one offset above those: each such user ends with a barrier after its last
        # read, so the next one may take the bytes.
        base = (top + 15) // 16 * 16
        scratch = [n.buffer for n in walk(kernel.body) if isinstance(n, Allocate) and
                   is_shared(n.buffer.scope) and id(n.buffer) not in arena]
        private = lowering.ctx.private_scratch
        if kernel.attrs.get(MANUAL_WARPGROUPS):
            # warpgroups of a kernel specialized by hand run their regions at once: a barrier
            # of one region orders nothing of another's use of shared bytes
            private = {id(b) for b in scratch}
        for b in [b for b in scratch if id(b) in private]:
            arena[id(b)] = base
            base = (base + footprint(b) + 15) // 16 * 16
        top = max(top, base)
        for b in [b for b in scratch if id(b) not in private]:
            arena[id(b)] = base
            top = max(top, base + footprint(b))
        return dataclasses.replace(kernel, attrs={**kernel.attrs, SMEM_BYTES: top})

    lowered = map_kernels(func, lower_kernel)
    return dataclasses.replace(lowered, attrs={**lowered.attrs, SMEM_ARENA: arena})
