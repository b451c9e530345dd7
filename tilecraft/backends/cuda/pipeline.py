"""The CUDA backend's pass pipelines, one per GPU generation, as lists of named steps.

`sm80()` is the mma.sync path (Ampere, Ada, and anything that is not sm_90a): the tile
prefix (instructions, software pipelines, layouts, the shared arena, barriers), the lowering
to thread code, and the rotation of mma fragment loads. `sm90a()` is Hopper's: the same prefix
with epilogue staging and warp specialization (TMA producers, persistent tiles) and the split
into warpgroups where an accumulator is too large for one, then the lowering, then the wgmma
transformations that shape the issued code (batches, overlap, rotation, ping-pong). Each step
is a (name, PrimFunc -> PrimFunc) pair; `run` runs a list, or a named prefix of it (the cost
model's plan), and with TILECRAFT_DUMP_IR=dir writes the IR after every step (and the
generated source) there."""
from __future__ import annotations

import os

from ... import knobs
from ...pass_config import PassConfigKey
from ...ir.verify import verify
from ...target import arch_of, smem_limit
from .rules import CUDA_RULES
from .transforms.alternate_k_direction import alternate_k_direction
from .schedule.choose_rasterization import choose_rasterization
from .schedule.finalize_barriers import finalize_barriers
from .schedule.infer_instructions import infer_instructions
from ...passes.infer_layouts import infer_layouts
from ...passes.show_layouts import show_layouts
from ...passes.infer_pipeline import infer_pipeline
from ...passes.split_loop_tiles import split_loop_tiles
from ...passes.fold_loop_extents import fold_loop_extents
from ...passes.insert_barriers import insert_barriers
from .schedule.pipeline_loops import pipeline_loops
from .schedule.operand_ahead import operand_ahead
from .schedule.stage_tile_operands import stage_tile_operands
from .schedule.manual_warpgroups import manual_warpgroups
from .schedule.widen_tma_rows import widen_tma_rows
from .schedule.prefetch_fragments import prefetch_fragments
from .lower_tile_ops import lower_tile_ops
from .transforms.merge_wgmma_batches import merge_wgmma_batches
from .transforms.overlap_wgmma import overlap_wgmma
from ...passes.plan_shared_memory import plan_shared_memory
from .transforms.pingpong_warpgroups import pingpong_warpgroups
from .transforms.rotate_mma_loop import rotate_mma_loop
from .transforms.prefetch_loop_scalars import prefetch_loop_scalars
from .transforms.batch_shared_loads import batch_shared_loads
from .transforms.rotate_wgmma_loop import rotate_wgmma_loop
from .transforms.seesaw_warpgroups import seesaw_warpgroups
from .schedule.stage_epilogue import stage_epilogue
from .schedule.warp_specialize import warp_specialize

RULES = CUDA_RULES   # what the compiler hands the cost model


def _dump(func, index: int, name: str, text: str | None = None, directory: str | None = None):
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{func.name}.{index:02d}.{name}.txt")
    with open(path, "w") as f:
        f.write(text if text is not None else func.script())


def _tile_prefix(target, configs, smem_limit, hopper: bool) -> list:
    """From the tile program to the planned tile program: instructions, pipelines, layouts and
    the shared arena. On sm_90a also epilogue staging, warp specialization, the direction of
    k in persistent GEMMs and warpgroup splitting."""
    arch = arch_of(target)
    steps = [("manual_warpgroups", lambda f: manual_warpgroups(f, target)),
             ("fold_loop_extents", fold_loop_extents),
             ("split_loop_tiles", split_loop_tiles),
             ("stage_tile_operands", stage_tile_operands),
             ("choose_rasterization", lambda f: choose_rasterization(f, target, configs))]
    if hopper:
        steps += [("stage_epilogue", lambda f: stage_epilogue(f, target, configs, smem_limit)),
                  ("widen_tma_rows", lambda f: widen_tma_rows(f, target, configs))]
    steps += [("infer_instructions", lambda f: infer_instructions(f, arch, configs)),
              ("infer_pipeline", infer_pipeline)]
    if hopper:
        steps += [("warp_specialize", lambda f: warp_specialize(f, target, configs)),
                  ("alternate_k_direction", lambda f: alternate_k_direction(f, configs)),
                  ("seesaw_warpgroups", lambda f: seesaw_warpgroups(f, arch, configs)),
                  ("operand_ahead", lambda f: operand_ahead(f, configs, smem_limit))]
    steps += [("pipeline_loops", pipeline_loops),
              ("infer_layouts", lambda f: show_layouts(infer_layouts(f, CUDA_RULES), configs)),
              ("prefetch_fragments", prefetch_fragments),
              ("plan_shared_memory", lambda f: plan_shared_memory(
                  f, CUDA_RULES, smem_limit,
                  reuse=not (configs or {}).get(PassConfigKey.TL_DISABLE_SHARED_MEMORY_REUSE))),
              ("insert_barriers", lambda f: insert_barriers(f, CUDA_RULES, configs)),
              ("lower_tile_ops", lambda f: lower_tile_ops(f, configs))]
    return steps


def sm80(target="sm_80", configs: dict | None = None, smem_limit: int | None = None) -> list:
    """The mma.sync path (Ampere and later)."""
    return _tile_prefix(target, configs, smem_limit, hopper=False) + [
        ("rotate_mma_loop", lambda f: rotate_mma_loop(f, configs)),
        ("prefetch_loop_scalars", prefetch_loop_scalars),
        ("batch_shared_loads", lambda f: batch_shared_loads(f, configs)),
        ("finalize_barriers", finalize_barriers)]


def sm90a(target="sm_90a", configs: dict | None = None, smem_limit: int | None = None) -> list:
    """Hopper: wgmma, TMA, warp specialization; gemms that do not fit wgmma take mma.sync."""
    return _tile_prefix(target, configs, smem_limit, hopper=True) + [
        ("merge_wgmma_batches", lambda f: merge_wgmma_batches(f, configs)),
        ("overlap_wgmma", overlap_wgmma),
        ("rotate_wgmma_loop", lambda f: rotate_wgmma_loop(f, configs)),
        ("pingpong_warpgroups", lambda f: pingpong_warpgroups(f, configs)),
        ("rotate_mma_loop", lambda f: rotate_mma_loop(f, configs)),
        ("prefetch_loop_scalars", prefetch_loop_scalars),
        ("batch_shared_loads", lambda f: batch_shared_loads(f, configs)),
        ("finalize_barriers", finalize_barriers)]


def steps(target, configs: dict | None = None, smem_limit: int | None = None) -> list:
    """The pipeline of target's generation."""
    generation = sm90a if arch_of(target) == "sm_90a" else sm80
    return generation(target, configs, smem_limit)


def run(func, steps: list, *, stop_after: str | None = None, keep: tuple = (),
        dump_to: str | None = None):
    """func through the steps (up to and including `stop_after`). With `keep`, a dict of the
    kept steps' outputs and the last one under "result". The IR after each step is written
    into `dump_to` (default: TILECRAFT_DUMP_IR), if any."""
    dump_to = dump_to or knobs.dump_ir_dir()
    names = [name for name, _ in steps]
    if stop_after is not None and stop_after not in names:
        raise ValueError(f"no pass {stop_after!r} in this pipeline: {', '.join(names)}")
    verify(func)
    _dump(func, 0, "input", directory=dump_to)
    kept = {}
    for i, (name, step) in enumerate(steps, start=1):
        func = step(func)
        _dump(func, i, name, directory=dump_to)
        if name in keep:
            kept[name] = func
        if name == stop_after:
            break
    if keep:
        kept["result"] = func
        return kept
    return func


def lower(func, target="sm_80", configs: dict | None = None, *, smem_bytes: int | None = None,
          stop_after: str | None = None, keep: tuple = ()):
    """func lowered for target (compiler.lower's backend half; the runtime and the emulator of
    this backend call it directly). `smem_bytes` defaults to the arch's limit."""
    limit = smem_bytes if smem_bytes is not None else smem_limit(arch_of(target))
    from ...pass_config import dump_dir
    return run(func, steps(target, configs, limit), stop_after=stop_after, keep=keep,
               dump_to=dump_dir(configs))


def cuda(func, target="sm_80", smem_limit: int | None = None, configs: dict | None = None):
    """func lowered by the pipeline of target (a Target or an arch name)."""
    return run(func, steps(target, configs, smem_limit))


def cuda_sm80(func, smem_limit: int | None = None):
    """The mma.sync path (Ampere and later)."""
    return cuda(func, "sm_80", smem_limit)


def dump_source(func, source: str, directory: str | None = None):
    _dump(func, 99, "cuda", source, directory or knobs.dump_ir_dir())
