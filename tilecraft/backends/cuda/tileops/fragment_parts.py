"""Parts of a fragment: which registers hold a rectangle of it (a band of an accumulator's
columns), so T.copy can store just that part, e.g. an epilogue staged one column band at a
time through a tile of the band's size."""
from __future__ import annotations

import numpy as np

from ....ir.linear import constant_value


def locals_of_part(op, layout) -> list | None:
    """[(first, end)]: the runs of local registers that hold exactly the part of the fragment
    op.src names, the same runs in every thread; None where the part starts at non-constant
    indices or shares a register slot with the rest of the fragment in some thread."""
    starts = [constant_value(s) for s in op.src.starts]
    extents = op.src.static_extents()
    if None in starts or extents is None or len(starts) != len(layout.shape) or \
            getattr(layout, "replicate", 1) != 1:
        return None
    table = layout.table()[..., 0, :]
    grids = np.indices(tuple(layout.shape))
    inside = np.ones(tuple(layout.shape), bool)
    for axis, (s, e) in enumerate(zip(starts, extents)):
        inside &= (grids[axis] >= s) & (grids[axis] < s + e)
    locals_in = np.unique(table[inside][:, 1])
    if not len(locals_in) or np.intersect1d(locals_in, table[~inside][:, 1]).size:
        return None
    breaks = np.flatnonzero(np.diff(locals_in) != 1) + 1
    return [(int(run[0]), int(run[-1]) + 1) for run in np.split(locals_in, breaks)]


def aligned(runs, n: int) -> bool:
    return all(first % n == 0 and end % n == 0 for first, end in runs)


def part_coords(op, coords) -> list:
    """Fragment indices made relative to the copied part's first element."""
    return [c - s for c, s in zip(coords, op.src.starts)]
