"""reduce_through_fragments: T.reduce_* of a shared tile, or into one, goes through registers.

A reduction on the CUDA path is register work: each thread folds the elements its fragment
layout gives it, then warp shuffles and one exchange through shared memory combine the
threads (tileops/reduce.py). TileLang also lets a kernel reduce a shared tile, or reduce into
one (a row sum of a tile a gemm read from shared memory, say), so such a reduction is
rewritten here, before layouts are inferred, into the copies a kernel author would write:

    T.reduce_sum(S_shared, d)          ->  T.copy(S_shared, S_frag); T.reduce_sum(S_frag, d)
    T.reduce_max(s, D_shared, clear=F) ->  T.copy(D_shared, D_frag); T.reduce_max(s, D_frag,
                                           clear=F); T.copy(D_frag, D_shared)

The fragments take the region's shape and the buffer's dtype; layout inference gives them
the layouts that suit the reduction, and insert_barriers orders the copies against the
tile's other readers and writers. Regions whose extents are not known at compile time keep
the reduction's own error.
"""
from __future__ import annotations

import dataclasses

from ....ir.buffer import FRAGMENT, Buffer, is_shared
from ....ir.stmt import Allocate, Kernel, seq, stmts_of
from ....ir.tileop import Copy, Reduce
from ....ir.visitor import Mutator, map_kernels


class _Rewrite(Mutator):
    def __init__(self):
        self.allocs: list = []

    def _fragment_of(self, region, span):
        shape = region.static_extents()
        if shape is None:
            return None
        buf = region.buffer
        frag = Buffer(f"{buf.name}_frag{len(self.allocs)}", tuple(int(e) for e in shape),
                      buf.dtype, FRAGMENT, span)
        self.allocs.append(Allocate(frag, span))
        return frag.region()

    def visit_Reduce(self, op: Reduce):
        src_shared, dst_shared = is_shared(op.src.buffer.scope), is_shared(op.dst.buffer.scope)
        if not (src_shared or dst_shared):
            return op
        before, after = [], []
        src, dst = op.src, op.dst
        if src_shared:
            src = self._fragment_of(op.src, op.span)
            if src is None:
                return op
            before.append(Copy(op.src, src, span=op.span))
        if dst_shared:
            dst = self._fragment_of(op.dst, op.span)
            if dst is None:
                return op
            if not op.clear:
                before.append(Copy(op.dst, dst, span=op.span))
            after.append(Copy(dst, op.dst, span=op.span))
        return seq(before + [dataclasses.replace(op, src=src, dst=dst)] + after)


def _rewrite_kernel(k: Kernel) -> Kernel:
    rewrite = _Rewrite()
    body = rewrite.visit(k.body)
    if not rewrite.allocs:
        return k
    stmts = list(stmts_of(body))
    # Allocations stay together in front of the kernel's work, where later passes look.
    at = next((i for i, s in enumerate(stmts) if not isinstance(s, Allocate)), len(stmts))
    return dataclasses.replace(k, body=seq(stmts[:at] + rewrite.allocs + stmts[at:]))


def reduce_through_fragments(func):
    return map_kernels(func, _rewrite_kernel)
