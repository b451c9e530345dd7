"""The CUDA backend's answers to the target-neutral passes' and the cost model's questions
(passes/instruction_rules.py): mma.sync and wgmma accumulator layouts, which gemms may pad their
shared operands, which reductions synchronize the block, the alignment of TMA tiles, each
gemm's instruction and warp split, and the registers of warp-specialized consumers."""
from __future__ import annotations

from ...passes.instruction_rules import InstructionRules
from .tileops.gemm import warp_partition
from .tileops.reduce import reduce_plan
from .tileops.tma import TMA_SMEM_ALIGN
from .schedule.infer_instructions import WGMMA_ARCHS
from .schedule.warp_specialize import consumer_registers
from .tileops.wgmma import WARPGROUP, accumulator_layout, wgmma_partition, wgmma_unfit_reason


def _pads_gemm_operands(op) -> bool:
    """wgmma's shared-memory descriptors know only the swizzle modes, not padded rows."""
    return op.instruction != "wgmma"


def _reduce_synchronizes(src, dst, dim: int, threads: int) -> bool:
    """A reduction whose reduced dimension spans several warps exchanges partials through
    shared memory between two block barriers (tileops/reduce.py)."""
    return bool(reduce_plan(src, dst, dim, threads)[2])


def _gemm_planner(threads: int, arch: str):
    """(instruction, split along M, split along N) of each gemm as the backend lowers it for
    `threads` consumer threads: the instruction infer_instructions recorded, or (on a tile
    program) the one it would choose, wgmma on sm_90a where the gemm fits; warpgroups for
    wgmma, warps for mma.sync."""
    def of(op, m, n):
        choice = op.instruction or ("wgmma" if arch in WGMMA_ARCHS and wgmma_unfit_reason(
            op, op.dims(), threads) is None else "mma")
        if choice == "wgmma":
            split = wgmma_partition(op, m, n, threads)
            if split is not None:
                return ("wgmma",) + tuple(split)
        return ("mma",) + tuple(warp_partition(op, m, n, threads))
    return of


CUDA_RULES = InstructionRules(gemm_accumulator=accumulator_layout,
                              pads_gemm_operands=_pads_gemm_operands,
                              reduce_synchronizes=_reduce_synchronizes,
                              warpgroup_threads=WARPGROUP, bulk_copy_align=TMA_SMEM_ALIGN,
                              gemm_planner=_gemm_planner, consumer_registers=consumer_registers)
