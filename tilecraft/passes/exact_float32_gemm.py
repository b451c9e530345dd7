"""exact_float32_gemm: under the pass config tl.exact_float32_gemm, every T.gemm of float32
operands is pinned to scalar float32 multiply-adds (instruction "fma"), where by default it
multiplies as TF32 on the tensor cores, as TileLang's does (Gemm.multiply_dtype).

Target-neutral: the CUDA pipelines run it first thing in infer_instructions, and the
interpreter runs the pinned program too, so every target computes the same products.
Explicit tfloat32 tiles keep TF32 either way, and a gemm already pinned stays as it is."""
from __future__ import annotations

import dataclasses

from ..ir.tileop import Gemm
from ..ir.visitor import Mutator
from ..pass_config import PassConfigKey


class _Pin(Mutator):
    def visit_Gemm(self, op: Gemm):
        if op.instruction or not op.A.buffer.dtype.name == op.B.buffer.dtype.name == "float32":
            return op
        return dataclasses.replace(op, instruction="fma")


def exact_float32_gemm(func, configs: dict | None = None):
    """func with its float32 gemms pinned to "fma" where configs ask for exact products."""
    if not (configs or {}).get(PassConfigKey.TL_EXACT_FLOAT32_GEMM):
        return func
    return dataclasses.replace(func, body=_Pin().visit(func.body))
