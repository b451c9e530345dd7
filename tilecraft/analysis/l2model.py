"""The L2 side of the HBM model in counts.py: which blocks run together and which tile origins
they share.

Blocks resident at the same time (one wave, in launch order after T.use_swizzle's
rasterization) that load the same tile origin share one fetch from HBM per iteration. Counting
the distinct origins per wave over grids of up to hundreds of thousands of blocks is the
model's hottest loop, so it is one sort of a packed integer key per load.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np


def rasterize(panel: int, order: str, gx: int, gy: int, bx, by):
    """T.use_swizzle's block -> tile map (backends/cuda/codegen/include/tilecraft/raster.h)."""
    lin = by * gx + bx
    if order == "row":
        p, o = np.divmod(lin, panel * gx)
        rows = np.minimum(panel, gy - p * panel)
        x, y = o // rows, p * panel + o % rows
        return np.where(p % 2 == 1, gx - 1 - x, x), y
    p, o = np.divmod(lin, panel * gy)
    cols = np.minimum(panel, gx - p * panel)
    y, x = o // cols, p * panel + o % cols
    return x, np.where(p % 2 == 1, gy - 1 - y, y)


@lru_cache(maxsize=64)
def grid_indices(dims: tuple, panel: int, order: str) -> tuple:
    """Block indices (x, y, z arrays, read-only) of every block in launch order. Candidates of
    one problem share a few grids, so these are kept."""
    n = int(np.prod(dims))
    lin = np.arange(n, dtype=np.int64)
    idx = [lin % dims[0], (lin // dims[0]) % dims[1], lin // (dims[0] * dims[1])]
    if panel > 0:
        idx[0], idx[1] = rasterize(panel, order, dims[0], dims[1], idx[0], idx[1])
    for a in idx:
        a.setflags(write=False)
    return tuple(idx)


def distinct_groups(columns) -> tuple[np.ndarray, np.ndarray]:
    """(sorted order, group start offsets in it) of the distinct rows of integer columns.

    The columns are packed into one int64 key (mixed radix over each column's value range)
    and sorted once; a key space too wide for int64 falls back to lexicographic sorting."""
    n = len(columns[0])
    key = np.zeros(n, dtype=np.int64)
    width = 1
    for col in columns:
        col = np.asarray(col, dtype=np.int64).reshape(-1)
        lo = int(col.min()) if n else 0
        span = (int(col.max()) - lo + 1) if n else 1
        if width * span >= 1 << 62:
            order = np.lexsort([np.asarray(c).reshape(-1) for c in reversed(columns)])
            stacked = np.stack([np.asarray(c).reshape(-1)[order] for c in columns])
            change = np.any(stacked[:, 1:] != stacked[:, :-1], axis=0)
            return order, np.flatnonzero(np.concatenate(([True], change)))
        key = key * span + (col - lo)
        width *= span
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_key[1:] != sorted_key[:-1])))
    return order, starts


def fetched_tiles(wave, starts, it, moves: bool) -> int:
    """Tile fetches from HBM of one load over the grid: blocks of one wave that load the same
    tile origin share one fetch per iteration (every iteration if the origin moves with the
    loop, else once); a group's iterations are those of its longest-running block."""
    if not len(it):
        return 0
    if np.all(it == it[0]):  # the common case: every block runs the same trip count
        order, heads = distinct_groups([wave] + starts)
        return int(it[0]) * len(heads) if moves else (len(heads) if it[0] > 0 else 0)
    order, heads = distinct_groups([wave] + starts)
    most = np.maximum.reduceat(it[order], heads)
    return int(most.sum()) if moves else int(np.count_nonzero(most))
