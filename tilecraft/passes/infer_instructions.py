"""infer_instructions: the tensor-core instruction of each T.gemm, and how copies out of
registers and shared memory run, for the target.

On sm_90a a gemm whose operands WGMMA can read (float16 / bfloat16 into float32, B in a
swizzled shared tile, A shared or in registers, whole warpgroups, m64nNk16 instructions that
tile the block) is lowered to wgmma; everything else, and every gemm on older GPUs, to
mma.sync. The choice is recorded on the op (`instruction=` in the dumped IR). The pass config
tl.disable_wgmma keeps a kernel on mma.sync; T.gemm's instruction can also be pinned by hand in
a transformed IR (a pinned "wgmma" that does not fit is an error naming the reason).

Copies on sm_90a (recorded as `instruction=` among the copy's annotations):
- shared -> global copies that TMA can do (tileops/tma.py) become TMA stores ("tma"): one
  thread issues the whole tile, and the hardware drops what falls outside the tensor. Kept
  off by tl.disable_tma_lower, tl.disable_tma_store, or T.copy(..., disable_tma=True).
- register -> shared copies into 16-bit tiles ("stmatrix"): the lowering stores each warp's
  8x8 blocks of the fragment with stmatrix.x4 where the fragment is made of such blocks
  (every mma / wgmma accumulator is), four registers per instruction instead of one.
- tile-form T.atomic_add(..., use_tma=True) of a shared tile into global memory becomes TMA
  stores that add ("tma") where TMA can do it (tileops/tma.tma_add_unfit_reason); otherwise the
  reason is recorded (`unfit=`) and the lowering warns and runs element-wise atomics.
(TMA loads are chosen by warp_specialize, for the copies a pipelined loop runs ahead.)
"""
from __future__ import annotations

import dataclasses

from ..errors import TileError
from ..ir.stmt import Kernel, SeqStmt, seq
from ..ir.buffer import FRAGMENT, GLOBAL, is_shared
from ..ir.tileop import Atomic, Copy, Gemm
from ..ir.visitor import Mutator
from ..pass_config import PassConfigKey
from ..tileops.tma import tma_add_unfit_reason, tma_plan
from ..tileops.atomic_support import atomic_unsupported
from ..tileops.wgmma import wgmma_unfit_reason

WGMMA_ARCHS = ("sm_90a",)


class _Choose(Mutator):
    def __init__(self, arch: str, threads: int, wgmma: bool, tma_store: bool = False,
                 stmatrix: bool = False):
        self.arch = arch
        self.threads = threads
        self.wgmma = wgmma
        self.tma_store = tma_store
        self.stmatrix = stmatrix

    def visit_Copy(self, op: Copy):
        if "instruction" in op.annotations:
            return op
        src, dst = op.src.buffer, op.dst.buffer
        choice = None
        if self.tma_store and is_shared(src.scope) and dst.scope == GLOBAL and \
                tma_plan(op) is not None:
            choice = "tma"
        elif self.stmatrix and src.scope == FRAGMENT and is_shared(dst.scope) and \
                dst.dtype.bits == 16:
            choice = "stmatrix"
        if choice is None:
            return op
        return dataclasses.replace(op, annotations={**op.annotations, "instruction": choice})

    def visit_Atomic(self, op: Atomic):
        reason = atomic_unsupported(op.kind, op.dst.buffer.dtype.name, self.arch)
        if reason is not None:
            raise TileError(f"T.atomic_{op.kind} into {op.dst.buffer.name}: {reason}", op.span)
        if not op.annotations.get("use_tma") or "instruction" in op.annotations:
            return op
        reason = tma_add_unfit_reason(op, self.tma_store)
        notes = {"instruction": "tma"} if reason is None else {"unfit": reason}
        return dataclasses.replace(op, annotations={**op.annotations, **notes})

    def visit_Gemm(self, op: Gemm):
        b = op.B.buffer
        if not is_shared(b.scope):
            # mma.sync loads B by ldmatrix and wgmma reads it by descriptor: from shared
            # memory only (A alone may come from registers).
            held = "a fragment" if b.scope == FRAGMENT else f"in {b.scope} memory"
            raise TileError(f"T.gemm: operand B ({b.name}) is {held}; on {self.arch} the "
                            "tensor cores read B from shared memory: T.copy it into a "
                            "T.alloc_shared tile first", op.span)
        reason = wgmma_unfit_reason(op, op.dims(), self.threads)
        if op.instruction == "wgmma" and reason is not None:
            raise TileError(f"T.gemm is pinned to wgmma but cannot use it: {reason}", op.span)
        if op.instruction:
            return op
        choice = "wgmma" if self.wgmma and reason is None else "mma"
        return dataclasses.replace(op, instruction=choice)


def infer_instructions(func, arch: str | None = None, configs: dict | None = None):
    configs = configs or {}
    arch = arch or "sm_80"
    hopper = arch in WGMMA_ARCHS
    wgmma = hopper and not configs.get(PassConfigKey.TL_DISABLE_WGMMA)
    tma_store = hopper and not configs.get(PassConfigKey.TL_DISABLE_TMA_LOWER) and \
        not configs.get(PassConfigKey.TL_DISABLE_TMA_STORE)

    def rebuild(s):
        if isinstance(s, Kernel):
            choose = _Choose(arch, s.num_threads, wgmma, tma_store, stmatrix=hopper)
            return dataclasses.replace(s, body=choose.visit(s.body))
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s
    return dataclasses.replace(func, body=rebuild(func.body))
