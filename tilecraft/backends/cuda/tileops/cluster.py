"""Thread block clusters for warp-specialized loops: which tiles neighbouring blocks share.

Two blocks that differ only in their index along one grid axis, running the same pipelined loop
(same trip count), load the same tile at every iteration when the tile's global coordinates do
not depend on that index: a GEMM's B tile (coordinates k and bx) is the same for the blocks
(bx, 2j) and (bx, 2j + 1). Launched as a cluster of those two blocks, each block loads half of
the tile's TMA boxes and multicasts them into both blocks' shared memory: the tile crosses from
L2 once instead of twice, which is what bounds a large GEMM on an H100 once the tensor cores are
fed (about 48 KB per k-step of a 128x256 tile from L2 per block, a third of it saved).

The axis taken is the one whose shared tiles carry the most bytes per stage; it needs a constant,
even grid extent (every block must have its partner: a block without one would wait forever for
the half of a tile nobody loads) and a loop whose trip count does not depend on it (causal
attention's loop length varies per query block, so its blocks cannot share).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ....arith.bounds import simplify
from ....ir.linear import constant_value
from ....ir.expr import Var
from ....ir.tileop import Copy
from ....ir.visitor import substitute
from .lowering import uses_var

CLUSTER_SIZE = 2


@dataclass
class ClusterPlan:
    axis: int                  # grid axis the cluster spans (0 = x, 1 = y)
    size: int                  # blocks per cluster
    shared: set = field(default_factory=set)  # indices of loop statements loaded by multicast
    bytes: int = 0             # bytes per stage that each block no longer loads alone

    @property
    def dims(self) -> tuple:
        dims = [1, 1, 1]
        dims[self.axis] = self.size
        return tuple(dims)


def _same_in_pair(expr, var, extent: int) -> bool:
    """Whether expr takes the same value for var = 2j and var = 2j + 1 (any j): written with
    var = 2 * j + r, r in [0, 1], it must simplify to something free of r (`by // 2`, the KV
    head of MLA's two head blocks, does; `by * 64` does not)."""
    if not uses_var(expr, var):
        return True
    pair, rank = Var("cluster_pair", var.dtype), Var("cluster_rank", var.dtype)
    bounds = {id(pair): (0, extent // CLUSTER_SIZE - 1), id(rank): (0, CLUSTER_SIZE - 1)}
    split = substitute(expr, {id(var): pair * CLUSTER_SIZE + rank})
    return not uses_var(simplify(split, bounds), rank)


def cluster_plan(kernel, loop, ahead: dict) -> ClusterPlan | None:
    """The cluster for a warp-specialized loop of `kernel` whose statements `ahead` (index ->
    TmaPlan) are its TMA copies, or None when no pair of blocks shares a tile."""
    from ....ir.stmt import stmts_of
    body = list(stmts_of(loop.body))
    best = None
    for axis, (var, extent) in enumerate(list(zip(kernel.block_vars, kernel.grid))[:2]):
        n = constant_value(extent) if not isinstance(extent, int) else extent
        if n is None or n < CLUSTER_SIZE or n % CLUSTER_SIZE or \
                not _same_in_pair(loop.extent, var, n) or not _same_in_pair(loop.start, var, n):
            continue
        # (T.c2d_im2col's TMA loads are not multicast: only tile copies are shared.)
        shared = {i for i in ahead if isinstance(body[i], Copy) and
                  all(_same_in_pair(e, var, n) for e in body[i].src.starts)}
        total = sum(ahead[i].bytes for i in shared)
        if shared and (best is None or total > best.bytes):
            best = ClusterPlan(axis, CLUSTER_SIZE, shared, total)
    return best
