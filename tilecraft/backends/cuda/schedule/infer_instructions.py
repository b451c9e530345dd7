"""infer_instructions: the tensor-core instruction of each T.gemm, and how copies out of
registers and shared memory run, for the target.

On sm_90a a gemm whose operands WGMMA can read (float16 / bfloat16 into float32, B in a
swizzled shared tile, A shared or in registers, whole warpgroups, m64nNk16 instructions that
tile the block; tf32 and fp8 ones K-major from shared memory) is lowered to wgmma; everything
else, and every gemm on older GPUs, to mma.sync. float32 operands multiply as tf32, as in
TileLang (Gemm.multiply_dtype); tl.exact_float32_gemm pins their gemms to "fma", scalar
float32 multiply-adds (passes/exact_float32_gemm.py). The choice is recorded on the op (`instruction=` in the dumped IR). The pass config
tl.disable_wgmma keeps a kernel on mma.sync; T.gemm's instruction can also be pinned by hand in
a transformed IR (a pinned "wgmma" that does not fit is an error naming the reason). Gemms
that accumulate into one fragment leave it in one register layout: where the instructions
chosen for them would not (wgmma's and mma.sync's layouts differ with the warp split), all
of them run on mma.sync.

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

What no instruction of the target can do is refused here, at the op's line, rather than in
nvcc: a gemm whose B operand is not in shared memory (ldmatrix and the wgmma descriptors read
B from there), and an atomic on an element type the target has no atomic for (ATOMIC_DTYPES).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ....errors import TileError
from ....ir.buffer import FRAGMENT, GLOBAL, is_shared
from ....ir.tileop import Atomic, Copy, Gemm
from ....ir.visitor import Mutator, map_kernels, walk
from ....target import parse_arch
from ....pass_config import PassConfigKey
from ....passes.exact_float32_gemm import exact_float32_gemm
from ..tileops.tma import tma_add_unfit_reason, tma_plan
from ..tileops.wgmma import WARPGROUP, accumulator_layout, wgmma_unfit_reason
from ....ir.annotations import INSTRUCTION, TMA_UNFIT, WARPGROUP_FRAGMENTS

WGMMA_ARCHS = ("sm_90a",)


# --- atomics --------------------------------------------------------------------------------
# T.atomic_add / atomic_max / atomic_min lower to tc::atomic_<kind> (codegen/include/tilecraft/
# math.h), whose overloads wrap CUDA's atomicAdd / atomicMax / atomicMin: a type without an
# overload (bool, 8- and 16-bit integers, fp8, a 16-bit float max, 64-bit adds) would only fail
# in nvcc. ATOMIC_DTYPES gives, per kind and element type, the oldest compute capability that
# has it (CUDA's own fallbacks included); a destination of any other type, or on an older GPU,
# is refused at the atomic's line.
ATOMIC_DTYPES = {
    "add": {"float32": 20, "float64": 60, "float16": 70, "bfloat16": 80, "int32": 20,
            "uint32": 20},
    # float32 / float64 max and min order the bit patterns with 32- and 64-bit integer atomics.
    "max": {"int32": 20, "uint32": 20, "int64": 35, "float32": 20, "float64": 35},
    "min": {"int32": 20, "uint32": 20, "int64": 35, "float32": 20, "float64": 35},
}

# What to do instead, for the types people reach for first.
_ADVICE = {"float16": "keep the values in a float32 tensor", "bfloat16": "keep the values in a "
           "float32 tensor", "int64": "use int32", "uint64": "use uint32"}


def compute_capability(arch: str) -> int:
    """80 for "sm_80", 90 for "sm_90a"."""
    return parse_arch(arch)[0]


def atomic_unsupported(kind: str, dtype: str, arch: str) -> str | None:
    """Why an atomic `kind` on `dtype` elements cannot run on arch, or None when it can."""
    table = ATOMIC_DTYPES[kind]
    cc = compute_capability(arch)
    oldest = table.get(dtype)
    if oldest is not None and oldest <= cc:
        return None
    here = ", ".join(d for d, c in table.items() if c <= cc)
    advice = _ADVICE.get(dtype, "accumulate into a tensor of one of those types")
    if oldest is not None:
        return (f"an atomic {kind} of {dtype} needs sm_{oldest} or newer, not {arch}; on {arch} "
                f"it takes {here}")
    return f"{arch} has no atomic {kind} of {dtype} (it takes {here}): {advice}"


class _Choose(Mutator):
    def __init__(self, arch: str, threads: int, wgmma: bool, tma_store: bool = False,
                 stmatrix: bool = False, local: frozenset = frozenset()):
        self.arch = arch
        self.threads = threads
        # Fragments of one warpgroup (a T.ws region's, manual_warpgroups): a gemm into one
        # runs on that warpgroup's 128 threads.
        self.local = local
        self.wgmma = wgmma
        self.tma_store = tma_store
        self.stmatrix = stmatrix

    def visit_Copy(self, op: Copy):
        if INSTRUCTION in op.annotations:
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
        return dataclasses.replace(op, annotations={**op.annotations, INSTRUCTION: choice})

    def visit_Atomic(self, op: Atomic):
        reason = atomic_unsupported(op.kind, op.dst.buffer.dtype.name, self.arch)
        if reason is not None:
            raise TileError(f"T.atomic_{op.kind} into {op.dst.buffer.name}: {reason}", op.span)
        if not op.annotations.get("use_tma") or INSTRUCTION in op.annotations:
            return op
        reason = tma_add_unfit_reason(op, self.tma_store)
        notes = {INSTRUCTION: "tma"} if reason is None else {TMA_UNFIT: reason}
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
        threads = WARPGROUP if op.C.buffer.name in self.local else self.threads
        reason = wgmma_unfit_reason(op, op.dims(), threads)
        if op.instruction == "wgmma" and reason is not None:
            raise TileError(f"T.gemm is pinned to wgmma but cannot use it: {reason}", op.span)
        if op.instruction:
            return op
        choice = "wgmma" if self.wgmma and reason is None else "mma"
        return dataclasses.replace(op, instruction=choice)


def _accumulator_table(op: Gemm, threads: int):
    """(thread, register) of each accumulator element as op's instruction leaves it."""
    m, n, _ = op.dims()
    return accumulator_layout(op, m, n, threads)[2].table()


def _one_instruction_per_accumulator(body, pinned: set, threads: int, local=frozenset()):
    """Gemms accumulating into one fragment must leave it in one register layout (over the
    threads of its warpgroup where it is one warpgroup's own). Where some
    of them run on wgmma and others on mma.sync (an operand wgmma cannot address, say) and the
    two leave the accumulator in different layouts, all of them use mma.sync; a gemm pinned by
    hand to wgmma among them is an error naming the other."""
    by_acc: dict = {}
    for node in walk(body):
        if isinstance(node, Gemm):
            by_acc.setdefault(id(node.C.buffer), []).append(node)
    mixed = set()
    for acc, ops in by_acc.items():
        if len({op.instruction for op in ops}) > 1:
            tables = [_accumulator_table(op, WARPGROUP if op.C.buffer.name in local else
                                         threads) for op in ops]
            if any(t.shape != tables[0].shape or not np.array_equal(t, tables[0])
                   for t in tables[1:]):
                mixed.add(acc)
    if not mixed:
        return body
    for acc in mixed:
        for op in by_acc[acc]:
            if id(op) in pinned and op.instruction == "wgmma":
                other = next(o for o in by_acc[acc] if o.instruction != "wgmma")
                raise TileError(f"T.gemm is pinned to wgmma, but the gemm at line "
                                f"{other.span.line if other.span else '?'} accumulating into "
                                f"{op.C.buffer.name} too runs on mma.sync, whose accumulator "
                                "layout differs", op.span)

    class _ToMma(Mutator):
        def visit_Gemm(self, op: Gemm):
            # (an "fma" gemm leaves mma.sync's accumulator layout and keeps its float32)
            return dataclasses.replace(op, instruction="mma") \
                if id(op.C.buffer) in mixed and op.instruction == "wgmma" else op
    return _ToMma().visit(body)


def infer_instructions(func, arch: str | None = None, configs: dict | None = None):
    configs = configs or {}
    arch = arch or "sm_80"
    hopper = arch in WGMMA_ARCHS
    wgmma = hopper and not configs.get(PassConfigKey.TL_DISABLE_WGMMA)
    tma_store = hopper and not configs.get(PassConfigKey.TL_DISABLE_TMA_LOWER) and \
        not configs.get(PassConfigKey.TL_DISABLE_TMA_STORE)

    def choose(k):
        local = frozenset(k.attrs.get(WARPGROUP_FRAGMENTS, ()))
        chooser = _Choose(arch, k.num_threads, wgmma, tma_store, stmatrix=hopper, local=local)
        pinned = {id(n) for n in walk(k.body) if isinstance(n, Gemm) and n.instruction}
        body = chooser.visit(k.body)
        # the pinned ones keep their identity through the chooser (it returns them as given)
        return dataclasses.replace(k, body=_one_instruction_per_accumulator(
            body, pinned, k.num_threads, local))
    return map_kernels(exact_float32_gemm(func, configs), choose)
