"""CUDA's limits on a launch grid: at most 2^31 - 1 blocks along x and 65535 along y and z.

A grid over them does not launch (cudaErrorInvalidConfiguration, far from the kernel that
asked for it). A T.Kernel whose extents are all known when it is written may go over 65535
along y or z: it is launched folded, all its blocks along x (at most 2^31 - 1 of them), each
block's coordinates derived from blockIdx.x in the order the hardware numbers blocks (x
fastest), so the blocks run in the order an unfolded grid would. One whose extents depend on
symbolic sizes or scalar arguments is checked at each call, once the arguments bind them,
before anything runs. Every target checks, so a program that runs on the interpreter also
launches on the GPU.
"""
from __future__ import annotations

import numpy as np

from .errors import TileError
from .ir.expr import Const

GRID_LIMITS = (2 ** 31 - 1, 65535, 65535)
AXES = "xyz"


def over_limit(axis: int, blocks: int) -> str | None:
    """Why `blocks` blocks along grid axis `axis` cannot launch, or None."""
    limit = GRID_LIMITS[axis]
    if blocks <= limit:
        return None
    return (f"grid dimension {AXES[axis]} is {blocks} blocks, over CUDA's limit of {limit} "
            f"along {AXES[axis]}")


def folded(grid) -> bool:
    """Whether a grid is launched folded into x (module docstring): every extent is known and
    one along y or z is over 65535."""
    return all(isinstance(g, Const) for g in grid) and any(
        int(g.value) > GRID_LIMITS[axis] for axis, g in enumerate(grid) if axis > 0)


def folded_extents(grid) -> tuple:
    """(x, y, z) extents of a folded grid, 1 where it has fewer dimensions."""
    return tuple(int(g.value) for g in grid) + (1,) * (3 - len(grid))


def check_static_grid(grid, span):
    """The T.Kernel extents known when it is written (Consts) must fit, or fold (module
    docstring)."""
    if folded(grid):
        total = int(np.prod([int(g.value) for g in grid], dtype=np.int64))
        if total > GRID_LIMITS[0]:
            raise TileError(f"T.Kernel: the grid has {total} blocks; a launch takes at most "
                            "2^31 - 1", span)
        return
    for axis, extent in enumerate(grid):
        if isinstance(extent, Const):
            reason = over_limit(axis, int(extent.value))
            if reason is not None:
                raise TileError(f"T.Kernel: {reason} (put the larger extent first: x takes "
                                "up to 2^31 - 1)", span)


def symbolic_extents(func) -> list:
    """(launch index, kernel, axis, extent) of every grid extent known only at a call."""
    return [(n, k, axis, g) for n, k in enumerate(func.kernels())
            for axis, g in enumerate(k.grid) if not isinstance(g, Const)]


def check_launch_grids(func, extents: list, bindings: dict):
    """At a call: each symbolic extent, evaluated with the sizes and scalars bound by the
    arguments (id(var) -> value), must fit; the error points at the call, with a note at the
    T.Kernel."""
    from .interp.values import evaluate
    env = {k: np.int64(v) for k, v in bindings.items()}
    for n, kernel, axis, extent in extents:
        reason = over_limit(axis, int(evaluate(extent, env)))
        if reason is not None:
            launch = f"launch {n} of {func.name}" if len(func.kernels()) > 1 else func.name
            raise TileError(f"kernel {launch}: with these arguments its {reason}",
                            notes=(("the grid is set by this T.Kernel", kernel.span),))
