"""stage_tile_operands: tile-op operands moved into the memory the CUDA lowering reads them from.

Two tile operators are lowered from one kind of memory only, where TileLang accepts others:

- a reduction is register work: each thread folds the elements its fragment layout gives it,
  then warp shuffles and one exchange through shared memory combine the threads
  (tileops/reduce.py). TileLang also reduces a shared tile, or into one (a row sum of a tile a
  gemm read from shared memory, say);
- the tensor cores read a gemm's B operand from shared memory (ldmatrix for mma.sync, a
  descriptor for wgmma); TileLang also takes B from a fragment.

Such an operand is rewritten here, before instructions and layouts are inferred, into the
copies a kernel author would write:

    T.reduce_sum(S_shared, d)          ->  T.copy(S_shared, S_frag); T.reduce_sum(S_frag, d)
    T.reduce_max(s, D_shared, clear=F) ->  T.copy(D_shared, D_frag); T.reduce_max(s, D_frag,
                                           clear=F); T.copy(D_frag, D_shared)
    T.gemm(a, B_frag, c)               ->  T.copy(B_frag, B_shared); T.gemm(a, B_shared, c)

The staged buffers take the region's shape and the operand's dtype; layout inference lays the
fragments out for the reduction and the shared tiles out for the tensor cores, and
insert_barriers orders the copies against the other readers and writers. A region whose
extents are not known at compile time is left alone (the operator's lowering refuses it).
"""
from __future__ import annotations

import dataclasses

from ....ir.buffer import FRAGMENT, SHARED, Buffer, is_shared
from ....ir.stmt import Allocate, Kernel, seq, stmts_of
from ....ir.tileop import Copy, Gemm, Reduce
from ....ir.visitor import Mutator, map_kernels



class _Rewrite(Mutator):
    def __init__(self):
        self.allocs: list = []

    def _staged(self, region, scope, span):
        """A new buffer in scope of region's shape and dtype (its whole region), or None when
        the extents are not constants."""
        shape = region.static_extents()
        if shape is None:
            return None
        buf = region.buffer
        kind = "frag" if scope == FRAGMENT else "shared"
        staged = Buffer(f"{buf.name}_{kind}{len(self.allocs)}", tuple(int(e) for e in shape),
                        buf.dtype, scope, span)
        self.allocs.append(Allocate(staged, span))
        return staged.region()

    def visit_Reduce(self, op: Reduce):
        src_shared, dst_shared = is_shared(op.src.buffer.scope), is_shared(op.dst.buffer.scope)
        if not (src_shared or dst_shared):
            return op
        before, after = [], []
        src, dst = op.src, op.dst
        if src_shared:
            src = self._staged(op.src, FRAGMENT, op.span)
            if src is None:
                return op
            before.append(Copy(op.src, src, span=op.span))
        if dst_shared:
            dst = self._staged(op.dst, FRAGMENT, op.span)
            if dst is None:
                return op
            if not op.clear:
                before.append(Copy(op.dst, dst, span=op.span))
            after.append(Copy(dst, op.dst, span=op.span))
        return seq(before + [dataclasses.replace(op, src=src, dst=dst)] + after)

    def visit_Gemm(self, op: Gemm):
        if op.B.buffer.scope != FRAGMENT:
            return op
        b = self._staged(op.B, SHARED, op.span)
        if b is None:
            return op
        return seq([Copy(op.B, b, span=op.span), dataclasses.replace(op, B=b)])


def _rewrite_kernel(k: Kernel) -> Kernel:
    rewrite = _Rewrite()
    body = rewrite.visit(k.body)
    if not rewrite.allocs:
        return k
    stmts = list(stmts_of(body))
    # Allocations stay together in front of the kernel's work, where later passes look.
    at = next((i for i, s in enumerate(stmts) if not isinstance(s, Allocate)), len(stmts))
    return dataclasses.replace(k, body=seq(stmts[:at] + rewrite.allocs + stmts[at:]))


def stage_tile_operands(func):
    return map_kernels(func, _rewrite_kernel)
