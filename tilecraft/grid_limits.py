"""CUDA's limits on a launch grid: at most 2^31 - 1 blocks along x and 65535 along y and z.

A grid over them does not launch (cudaErrorInvalidConfiguration, far from the kernel that
asked for it). A T.Kernel whose extents are known when it is written is checked there; one
whose extents depend on symbolic sizes or scalar arguments is checked at each call, once the
arguments bind them, before anything runs. Every target checks, so a program that runs on
the interpreter also launches on the GPU.
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


def check_static_grid(grid, span):
    """The T.Kernel extents known when it is written (Consts) must fit."""
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
