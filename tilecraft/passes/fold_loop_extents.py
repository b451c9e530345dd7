"""fold_loop_extents: a loop whose trip count the launch decides becomes a constant loop.

A kernel written to run either one tile per block or several (a persistent loop: block bx
takes tiles bx, bx + grid, ... up to the last, T.ceildiv(tiles - bx, grid) of them) has a
loop extent that reads the block index. When the grid is as large as the tile count, that
extent is 1 for every block, and whenever the block index's range [0, grid) leaves one
quotient, the extent is a constant. Left symbolic, it costs what a dynamic trip count costs:
pipelining guards its prologue and every prefetch with a comparison against the trip count,
nothing is unrolled, and nvcc keeps the bound in a register. So each serial or pipelined
loop's start and extent are simplified with the ranges of the block indices and of the
enclosing loops with constant bounds, and kept only where they become constants (a
symbolic bound is left as the user wrote it).
"""
from __future__ import annotations

import dataclasses

from ..arith.bounds import simplify
from ..ir.expr import Const
from ..ir.linear import constant_value
from ..ir.stmt import For, Kernel
from ..ir.visitor import Mutator, map_kernels


class _Fold(Mutator):
    def __init__(self, var_bounds: dict):
        self.vb = var_bounds

    def _constant(self, e):
        if isinstance(e, Const):
            return e
        folded = simplify(e, self.vb)
        return folded if isinstance(folded, Const) else e

    def visit_For(self, s: For):
        if s.kind == "parallel":
            return s
        start, extent = self._constant(s.start), self._constant(s.extent)
        lo, n = constant_value(start), constant_value(extent)
        if lo is not None and n is not None and n > 0:
            self.vb[id(s.var)] = (lo, lo + n - 1)
        body = self.visit(s.body)
        if start is s.start and extent is s.extent and body is s.body:
            return s
        return dataclasses.replace(s, start=start, extent=extent, body=body)


def _fold_kernel(kernel: Kernel) -> Kernel:
    bounds = {}
    for v, g in zip(kernel.block_vars, kernel.grid):
        n = constant_value(g)
        if n is not None and n > 0:
            bounds[id(v)] = (0, n - 1)
    if not bounds:
        return kernel
    body = _Fold(bounds).visit(kernel.body)
    return kernel if body is kernel.body else dataclasses.replace(kernel, body=body)


def fold_loop_extents(func):
    """func with every loop bound that the launch grid makes constant replaced by it."""
    return map_kernels(func, _fold_kernel)
