"""choose_rasterization: a T.use_swizzle for the kernels that did not ask for one, where the L2
model says it saves HBM traffic.

Blocks launch in linear order, x fastest. A GEMM's grid (tiles of N along x, of M along y) then
runs each wave over whole rows of output tiles: at 8192 x 28672 with 128x256 tiles a wave of 132
blocks covers one row and a bit of the next, reading all of B, and the next wave reads it again.
The paper's short GEMM leaves T.use_swizzle out; on the H100 it ran far below cuBLAS at that
shape without a raster and level with it with the one this pass picks (bench/gemm.md).

For a kernel with no T.use_swizzle (not even a disabled one), a static grid of two dimensions
or more and more blocks than the target has SMs, this pass asks the carver's L2 model
(analysis/counts.py, l2model.py) for the HBM bytes read with no raster and with panels of 4, 8
and 16 rows or columns, and adds the best panel when it reads at most four fifths of what no
raster reads. Panels of rows win unless a panel of columns reads less than COLUMN_MARGIN of the
best row panel: the model counts the two alike, but on the H100 the 128x256 GEMM's column panels
moved more through L2 and from HBM than it says, and ran slower than row panels where the model
had put them ahead (bench/gemm.md). Attention's grid (query blocks along x,
heads along y) already runs the blocks that share K and V together: the model finds every
panel worse, and the kernel keeps its order.
Turned off with tl.disable_auto_rasterization.
"""
from __future__ import annotations

import dataclasses

from ....ir.linear import constant_value
from ....analysis.counts import tile_counts, with_hbm_reads
from ....target import model_of
from ....ir.ftg import FTG
from ....ir.stmt import Kernel, seq, stmts_of
from ....ir.tileop import UseSwizzle
from ....ir.visitor import Mutator, walk
from ....pass_config import PassConfigKey
from ..rules import CUDA_RULES

PANELS = (4, 8, 16)
ORDERS = ("row", "column")
WORTH = 0.8  # a raster is added when it reads at most this share of no raster's HBM bytes
COLUMN_MARGIN = 0.85  # a column panel is taken only below this share of the best row panel


def _with_raster(kernel: Kernel, panel: int, order: str) -> Kernel:
    body = seq([UseSwizzle(panel, order, True, kernel.span)] + list(stmts_of(kernel.body)))
    return dataclasses.replace(kernel, body=body)


def _hbm_read(kernel: Kernel, target) -> float:
    counts = tile_counts(kernel, FTG(kernel), CUDA_RULES.gemm_planner(kernel.num_threads, target.arch))
    return with_hbm_reads(counts, target.num_sms, target.l2_bytes).hbm_read


def best_raster(kernel: Kernel, target) -> tuple | None:
    """(panel, order) of the raster the L2 model prefers for `kernel`, or None: no raster (one
    wave, a dynamic or one-dimensional grid, or no panel worth it)."""
    if any(isinstance(n, UseSwizzle) for n in walk(kernel.body)) or len(kernel.grid) < 2:
        return None
    extents = [constant_value(g) for g in kernel.grid]
    if any(e is None for e in extents) or extents[0] < 2 or extents[1] < 2:
        return None
    blocks = 1
    for e in extents:
        blocks *= e
    if blocks <= target.num_sms:
        return None
    try:
        plain = _hbm_read(kernel, target)
        reads = {(p, o): _hbm_read(_with_raster(kernel, p, o), target)
                 for p in PANELS for o in ORDERS}
    except Exception:  # noqa: BLE001 -- the model only advises: a kernel it cannot count
        return None    # (dynamic tiles, loop bounds read from memory) keeps its order
    row = min((c for c in reads if c[1] == "row"), key=reads.get)
    column = min((c for c in reads if c[1] == "column"), key=reads.get)
    choice = column if reads[column] < COLUMN_MARGIN * reads[row] else row
    return choice if reads[choice] <= WORTH * plain else None


class _Rasterize(Mutator):
    def __init__(self, target):
        self.target = target

    def visit_Kernel(self, k: Kernel):
        choice = best_raster(k, self.target)
        return k if choice is None else _with_raster(k, *choice)


def choose_rasterization(func, target, configs: dict | None = None):
    """`target`: the Target the runtime plans for, or an arch (the table's GPU for it)."""
    if (configs or {}).get(PassConfigKey.TL_DISABLE_AUTO_RASTERIZATION):
        return func
    model = model_of(target)
    if model is None:
        return func
    return dataclasses.replace(func, body=_Rasterize(model).visit(func.body))
