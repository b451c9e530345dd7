"""The CUDA lowering of each tile op, in one table: node class -> lower(op, ctx, kernel).

lower_tile_ops looks an op up here after rewriting its operands' index expressions; `ctx` is
the ThreadContext the op runs in (the block's, or one warpgroup's for ops on a warpgroup's own
fragments) and `kernel` the kernel's lowering (lower_tile_ops._KernelLowering), for what an op
needs of the whole kernel: the block's context, its thread count, its rasterization, running a
statement on one thread. A lowering returns the thread-level statement, or None for ops that
leave no code. Where one op has several instruction choices (a copy: TMA, cp.async, vector
accesses), the choice infer_instructions recorded on the node is read here.

What an op means target-neutrally (its text, interpreter rule, cost) is its contract in
tilecraft/ops; tests/unit/test_tile_op_contracts.py checks every node class has both.
"""
from __future__ import annotations

from ....errors import TileError, warn_at
from ....ir import tileop as top
from ....ir.buffer import BufferRegion
from ....ir.annotations import INSTRUCTION, TMA_BARRIER, TMA_UNFIT
from ....layout.derive import same_layout
from ....passes.infer_layouts import tma_tile_layout
from ....passes.parallel_nests import is_twin_copy
from .cache_hints import warn_unhinted
from .copy import lower_copy, lower_twin_copy
from .cumsum import lower_cumsum
from .fill_atomic import lower_atomic_tile, lower_fill
from .gemm import lower_gemm
from .reduce import lower_reduce
from .tma import as_copy, is_tma_store, lower_tma_copy, lower_tma_store
from .wgmma import WARPGROUP


def lower_copy_op(op: top.Copy, ctx, kernel):
    """A copy between a warpgroup's fragment and its block-wide twin moves registers; a copy
    infer_instructions gave a TMA barrier is a TMA load; a store of a shared tile laid out as
    TMA boxes read is a TMA store; everything else is per-thread accesses."""
    if is_twin_copy(op, kernel.local):
        return lower_twin_copy(op, kernel.ctx, kernel.kernel.num_threads, WARPGROUP)
    if TMA_BARRIER in op.annotations:
        return warn_unhinted(op, lower_tma_copy(op, ctx))
    if is_tma_store(op) and same_layout(ctx.layouts.buffer(op.src.buffer),
                                        tma_tile_layout(op.src.buffer)):
        return warn_unhinted(op, lower_tma_store(op, ctx))
    return warn_unhinted(op, lower_copy(op, ctx))


def lower_atomic_op(op: top.Atomic, ctx, kernel):
    """The scalar form is one atomic instruction on one thread; the tile form see
    lower_atomic_tile_op."""
    if isinstance(op.value, BufferRegion):
        return lower_atomic_tile_op(op, ctx)
    return kernel.on_one_thread(kernel.scalar_rewriter().visit(op))


def lower_atomic_tile_op(op: top.Atomic, ctx):
    """A tile-form atomic: TMA stores that add where infer_instructions chose them (and
    the tile has the layout TMA boxes read), element-wise atomics otherwise; use_tma=True
    left unhonored is said at the user's line."""
    if not op.annotations.get("use_tma"):
        return lower_atomic_tile(op, ctx)
    reason = op.annotations.get(TMA_UNFIT)
    if op.annotations.get(INSTRUCTION) == "tma":
        if same_layout(ctx.layouts.buffer(op.value.buffer), tma_tile_layout(op.value.buffer)):
            return lower_tma_store(as_copy(op), ctx, adds=True)
        reason = f"the shared tile {op.value.buffer.name} does not have the layout TMA " \
                 "boxes read"
    warn_at(op.span, f"tilecraft: T.atomic_{op.kind} into {op.dst.buffer.name} runs as "
            f"element-wise atomics, not TMA (use_tma=True): {reason}")
    return lower_atomic_tile(op, ctx)


def lower_use_swizzle(op: top.UseSwizzle, ctx, kernel):
    """No code: the kernel's block order, which the code generator applies to the grid."""
    if op.enable:
        kernel.swizzle = (op.panel_size, op.order)
    return None


def no_code(op, ctx, kernel):
    """Layouts were inferred from it; nothing is left to run."""
    return None


def not_supported(op, ctx, kernel):
    raise TileError(f"T.{op.op_name} is not supported by the CUDA backend yet", op.span)


LOWERINGS = {
    top.Copy: lower_copy_op,
    top.Fill: lambda op, ctx, kernel: lower_fill(op, ctx),
    top.Gemm: lambda op, ctx, kernel: lower_gemm(op, ctx),
    top.Reduce: lambda op, ctx, kernel: lower_reduce(op, ctx),
    top.CumSum: lambda op, ctx, kernel: lower_cumsum(op, ctx),
    top.Atomic: lower_atomic_op,
    top.AnnotateLayout: no_code,
    top.UseSwizzle: lower_use_swizzle,
    top.Print: not_supported,
}
