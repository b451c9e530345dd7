"""The passes each target runs, in order. Each pass is a function PrimFunc -> PrimFunc; with
TILECRAFT_DUMP_IR=dir the IR after every pass (and the generated source) is written there."""
from __future__ import annotations

import os

from .. import knobs
from ..ir.verify import verify
from .alternate_k_direction import alternate_k_direction
from .choose_rasterization import choose_rasterization
from .finalize_barriers import finalize_barriers
from .infer_instructions import infer_instructions
from .infer_layouts import infer_layouts
from .infer_pipeline import infer_pipeline
from .insert_barriers import insert_barriers
from .pipeline_loops import pipeline_loops
from .lower_tile_ops import lower_tile_ops
from .merge_wgmma_batches import merge_wgmma_batches
from .overlap_wgmma import overlap_wgmma
from .plan_shared_memory import plan_shared_memory
from .pingpong_warpgroups import pingpong_warpgroups
from .rotate_mma_loop import rotate_mma_loop
from .rotate_wgmma_loop import rotate_wgmma_loop
from .seesaw_warpgroups import seesaw_warpgroups
from .stage_epilogue import stage_epilogue
from .warp_specialize import warp_specialize


def _dump(func, index: int, name: str, text: str | None = None):
    directory = knobs.dump_ir_dir()
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{func.name}.{index:02d}.{name}.txt")
    with open(path, "w") as f:
        f.write(text if text is not None else func.script())


def cuda(func, arch: str = "sm_80", smem_limit: int | None = None, configs: dict | None = None):
    """Layouts, shared arena, barriers, lowering. On sm_90a gemms that fit run on wgmma; older
    GPUs (and the rest) take the mma.sync path."""
    verify(func)
    _dump(func, 0, "input")
    steps = [("choose_rasterization", lambda f: choose_rasterization(f, arch, configs)),
             ("stage_epilogue", lambda f: stage_epilogue(f, arch, configs, smem_limit)),
             ("infer_instructions", lambda f: infer_instructions(f, arch, configs)),
             ("infer_pipeline", infer_pipeline),
             ("warp_specialize", lambda f: warp_specialize(f, arch, configs)),
             ("alternate_k_direction", lambda f: alternate_k_direction(f, configs)),
             ("seesaw_warpgroups", lambda f: seesaw_warpgroups(f, arch, configs)),
             ("pipeline_loops", pipeline_loops),
             ("infer_layouts", infer_layouts),
             ("plan_shared_memory", lambda f: plan_shared_memory(f, smem_limit)),
             ("insert_barriers", insert_barriers),
             ("lower_tile_ops", lambda f: lower_tile_ops(f, configs)),
             ("merge_wgmma_batches", lambda f: merge_wgmma_batches(f, configs)),
             ("overlap_wgmma", overlap_wgmma),
             ("rotate_wgmma_loop", lambda f: rotate_wgmma_loop(f, configs)),
             ("pingpong_warpgroups", lambda f: pingpong_warpgroups(f, configs)),
             ("rotate_mma_loop", lambda f: rotate_mma_loop(f, configs)),
             ("finalize_barriers", finalize_barriers)]
    for i, (name, run) in enumerate(steps, start=1):
        func = run(func)
        _dump(func, i, name)
    return func


def cuda_sm80(func, smem_limit: int | None = None):
    """The mma.sync path (Ampere and later)."""
    return cuda(func, "sm_80", smem_limit)


def dump_source(func, source: str):
    _dump(func, 99, "cuda", source)
