"""The contracts of the ops that compute: T.gemm, T.reduce_*, T.cumsum.

Each op's text, its meaning on the reference interpreter and its cost-model charges (see
ir/tileop.py's TileOpContract). The interpreter accumulates in float32 (float64 for float64
data), as the tensor cores and CUDA cores do, and rounds the result to the output's dtype.
A gemm that multiplies in TF32 (tfloat32 operands, or float32 ones: Gemm.multiply_dtype) has
its operands rounded to TF32 first, as mma.sync's operands are (cvt.rna).
"""
from __future__ import annotations

import numpy as np

from ..analysis.counts import MMA_DTYPES, WGMMA_M, region_elems
from ..interp.values import compute_dtype, to_dtype, widen
from ..ir.buffer import BufferRegion, is_shared
from ..ir.tileop import CumSum, Gemm, GemmWarpPolicy, Reduce, TileOpContract, register_contract


# --- T.gemm ---------------------------------------------------------------------------------
def gemm_text(p, s: Gemm) -> str:
    opts = {}
    for key in ("transpose_A", "transpose_B", "clear_accum"):
        if getattr(s, key):
            opts[key] = True
    if s.policy != GemmWarpPolicy.Square:
        opts["policy"] = f"T.GemmWarpPolicy.{s.policy.name}"
    if s.k_pack != 1:
        opts["k_pack"] = s.k_pack
    if s.instruction:
        opts["instruction"] = repr(s.instruction)
    return (f"T.gemm({p.region(s.A)}, {p.region(s.B)}, {p.region(s.C)}"
            f"{p.kwargs(opts, raw=True)})")


def _matrix(m, r: BufferRegion, transpose: bool, span):
    """A gemm operand as a 2-d array: the region without its unit dimensions (or its last
    two, for a single row or column)."""
    values = m.read_region(r, span)
    _, extents = m.region_box(r)
    shape = [e for e in extents if e != 1]
    if len(shape) < 2:
        shape = extents[-2:]
    values = values.reshape(shape)
    return values.T if transpose else values


def rounded_to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32's 10 mantissa bits, to nearest with ties away from zero
    (cvt.rna.tf32.f32); infinities and NaNs are kept."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), rounded, x)


def interpret_gemm(m, s: Gemm, mask):
    a = _matrix(m, s.A, s.transpose_A, s.span)
    b = _matrix(m, s.B, s.transpose_B, s.span)
    if s.multiply_dtype() == "tfloat32":
        a, b = rounded_to_tf32(a), rounded_to_tf32(b)
    acc = compute_dtype(s.C.buffer.dtype)
    if acc.kind == "f" and acc.itemsize < 8:
        acc = np.dtype(np.float32)
    product = widen(a).astype(acc) @ widen(b).astype(acc)
    if not s.clear_accum:
        c = widen(m.read_region(s.C, s.span)).astype(acc).reshape(product.shape)
        product = c + product
    _, c_extents = m.region_box(s.C)
    m.write_region(s.C, to_dtype(product.reshape(c_extents), s.C.buffer.dtype), s.span)


def charge_gemm(s: Gemm, c, gemm_plan):
    """fp16 / bf16 operands, and those multiplied as TF32 (Gemm.multiply_dtype), run on
    tensor cores (2*M*N*K FLOPs), others on CUDA cores (M*N*K FMAs). Shared operands are read
    as the instruction reads them, per the warp split."""
    m, n, k = s.dims()
    multiply = s.multiply_dtype()
    if multiply == "tfloat32" or (s.A.buffer.dtype.name in MMA_DTYPES and
                                  s.B.buffer.dtype.name in MMA_DTYPES):
        c.tensor_flops = 2 * m * n * k
    else:
        c.cuda_ops = m * n * k
    instruction, sm, sn = gemm_plan(s, m, n)
    c.instruction, c.dtype = instruction, multiply
    a_bytes, b_bytes = s.A.buffer.dtype.bytes, s.B.buffer.dtype.bytes
    if instruction == "wgmma":
        # Each m64nNk16 instruction reads its A rows (64 x 16) and its whole B slice
        # (16 x N of its warpgroup) from shared memory: A once per warpgroup column, B
        # once per 64 rows of the tile, whatever the split.
        if is_shared(s.A.buffer.scope):
            c.smem += m * k * a_bytes * sn
        c.smem += (m // WGMMA_M) * k * n * b_bytes
    else:
        # ldmatrix: every warp loads its A rows and B columns, so A is read once per
        # warp column and B once per warp row.
        if is_shared(s.A.buffer.scope):
            c.smem += m * k * a_bytes * sn
        if is_shared(s.B.buffer.scope):
            c.smem += k * n * b_bytes * sm


# --- T.reduce_max / min / sum / abssum / absmax -----------------------------------------------
_REDUCE = {"max": np.max, "min": np.min, "sum": np.sum,
           "abssum": lambda x, axis: np.sum(np.abs(x), axis=axis),
           "absmax": lambda x, axis: np.max(np.abs(x), axis=axis)}
_COMBINE = {"max": np.maximum, "min": np.minimum, "sum": np.add, "abssum": np.add,
            "absmax": np.maximum}


def reduce_text(p, s: Reduce) -> str:
    clear = "" if s.clear else ", clear=False"
    trailing = "" if s.trailing_barrier else ", trailing_barrier=False"
    return (f"T.reduce_{s.kind}({p.region(s.src)}, {p.region(s.dst)}, "
            f"dim={s.dim}{clear}{trailing})")


def interpret_reduce(m, s: Reduce, mask):
    src = widen(m.read_region(s.src, s.span))
    cd = compute_dtype(s.dst.buffer.dtype)
    result = _REDUCE[s.kind](src.astype(cd), axis=s.dim)
    _, dst_extents = m.region_box(s.dst)
    result = result.reshape(dst_extents)
    if not s.clear:
        old = widen(m.read_region(s.dst, s.span)).astype(cd)
        result = _COMBINE[s.kind](old, result)
    m.write_region(s.dst, to_dtype(result, s.dst.buffer.dtype), s.span)


def _charge_scan(src: BufferRegion, c, ops_per_element: int):
    """One op per source element (two for the abs variants of a reduction); a shared source
    is read once."""
    elems = region_elems(src, clip=False)
    c.cuda_ops = elems * ops_per_element
    if is_shared(src.buffer.scope):
        c.smem += elems * src.buffer.dtype.bytes


def charge_reduce(s: Reduce, c, gemm_plan):
    _charge_scan(s.src, c, 2 if s.kind.startswith("abs") else 1)


# --- T.cumsum -------------------------------------------------------------------------------
def cumsum_text(p, s: CumSum) -> str:
    rev = ", reverse=True" if s.reverse else ""
    return f"T.cumsum({p.region(s.src)}, {p.region(s.dst)}, dim={s.dim}{rev})"


def interpret_cumsum(m, s: CumSum, mask):
    src = widen(m.read_region(s.src, s.span)).astype(compute_dtype(s.dst.buffer.dtype))
    if s.reverse:
        result = np.flip(np.cumsum(np.flip(src, s.dim), axis=s.dim), s.dim)
    else:
        result = np.cumsum(src, axis=s.dim)
    m.write_region(s.dst, to_dtype(result, s.dst.buffer.dtype), s.span)


def charge_cumsum(s: CumSum, c, gemm_plan):
    _charge_scan(s.src, c, 1)


register_contract(Gemm, TileOpContract(gemm_text, interpret_gemm, charge_gemm))
register_contract(Reduce, TileOpContract(reduce_text, interpret_reduce, charge_reduce))
register_contract(CumSum, TileOpContract(cumsum_text, interpret_cumsum, charge_cumsum))
