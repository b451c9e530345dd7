"""What the target-neutral passes need to know of a backend's instructions, as one value the
backend's pipeline hands to them (they never import a backend).

- Layout inference lays out a gemm's accumulator the way the instruction the backend chose for
  that gemm (op.instruction) leaves it in registers, over the warps the backend splits the gemm
  into; whether the gemm's shared operands may be padded against bank conflicts depends on how
  the instruction reads them (descriptors that know only swizzle modes cannot skip padding).
- Fragments that one warpgroup owns are laid out over `warpgroup_threads` threads.
- Barrier placement needs to know which reductions already synchronize the block (the backend
  exchanges their partials through shared memory between two barriers of its own).
- The shared-memory plan aligns tiles that bulk copies read or write to `bulk_copy_align`.
- The cost model charges each gemm for the instruction and warp split the backend will use
  (`gemm_planner`) and sizes a warp-specialized block's registers as the backend will
  (`consumer_registers`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class InstructionRules:
    # (gemm, m, n, threads) -> (warps along m, warps along n, accumulator Fragment)
    gemm_accumulator: Callable
    # gemm -> whether its shared operands may be padded
    pads_gemm_operands: Callable
    # (src Fragment, dst Fragment, dim, threads) -> whether the reduction synchronizes the block;
    # TileError where the backend cannot lower it (its lowering reports that)
    reduce_synchronizes: Callable
    warpgroup_threads: int
    bulk_copy_align: int
    # (consumer threads, arch) -> ((gemm, m, n) -> (instruction, split along m, split along n))
    gemm_planner: Callable
    # consumer threads -> the registers per thread a warp-specialized kernel's consumers may
    # grow to, or None where the roles share the register file evenly
    consumer_registers: Callable
