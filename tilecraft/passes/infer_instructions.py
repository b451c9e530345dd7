"""infer_instructions: the tensor-core instruction of each T.gemm for the target.

On sm_90a a gemm whose operands WGMMA can read (float16 / bfloat16 into float32, B in a
swizzled shared tile, A shared or in registers, whole warpgroups, m64nNk16 instructions that
tile the block) is lowered to wgmma; everything else, and every gemm on older GPUs, to
mma.sync. The choice is recorded on the op (`instruction=` in the dumped IR). The pass config
tl.disable_wgmma keeps a kernel on mma.sync; T.gemm's instruction can also be pinned by hand in
a transformed IR (a pinned "wgmma" that does not fit is an error naming the reason).
"""
from __future__ import annotations

import dataclasses

from ..errors import TileError
from ..ir.stmt import Kernel, SeqStmt, seq
from ..ir.tileop import Gemm
from ..ir.visitor import Mutator
from ..pass_config import PassConfigKey
from ..tileops.wgmma import wgmma_unfit_reason
from .infer_layouts import _gemm_dims

WGMMA_ARCHS = ("sm_90a",)


class _Choose(Mutator):
    def __init__(self, threads: int, wgmma: bool):
        self.threads = threads
        self.wgmma = wgmma

    def visit_Gemm(self, op: Gemm):
        reason = wgmma_unfit_reason(op, _gemm_dims(op), self.threads)
        if op.instruction == "wgmma" and reason is not None:
            raise TileError(f"T.gemm is pinned to wgmma but cannot use it: {reason}", op.span)
        if op.instruction:
            return op
        choice = "wgmma" if self.wgmma and reason is None else "mma"
        return dataclasses.replace(op, instruction=choice)


def infer_instructions(func, arch: str | None = None, configs: dict | None = None):
    configs = configs or {}
    wgmma = arch in WGMMA_ARCHS and not configs.get(PassConfigKey.TL_DISABLE_WGMMA)

    def rebuild(s):
        if isinstance(s, Kernel):
            return dataclasses.replace(s, body=_Choose(s.num_threads, wgmma).visit(s.body))
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s
    return dataclasses.replace(func, body=rebuild(func.body))
