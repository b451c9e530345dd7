"""The contracts of the ops that move or set values: T.copy, T.fill / T.clear, T.atomic_*.

Each op's text, its meaning on the reference interpreter and its cost-model charges (see
ir/tileop.py's TileOpContract). A copy is the one op whose cost includes global loads that the
L2 model later follows (analysis/counts.py reads its source region).
"""
from __future__ import annotations

import numpy as np

from ..analysis.counts import region_elems
from ..errors import TileError
from ..interp.values import compute_dtype, in_bounds, to_dtype, widen
from ..ir.buffer import GLOBAL, BufferRegion, is_shared
from ..ir.expr import Const
from ..ir.tileop import Atomic, Copy, Fill, TileOpContract, register_contract


# --- T.copy ---------------------------------------------------------------------------------
def copy_text(p, s: Copy) -> str:
    return f"T.copy({p.region(s.src)}, {p.region(s.dst)}{p.kwargs(s.annotations)})"


def interpret_copy(m, s: Copy, mask):
    values = m.read_region(s.src, s.span)
    _, dst_extents = m.region_box(s.dst)
    values = values.reshape(dst_extents)
    m.write_region(s.dst, to_dtype(widen(values), s.dst.buffer.dtype), s.span)


def charge_copy(s: Copy, c, gemm_plan):
    """A load from (store to) global memory moves the region's elements clipped to the
    tensor; the part of a loaded tile past the tensor is zero-filled in shared memory."""
    src, dst = s.src.buffer, s.dst.buffer
    elems = region_elems(s.src if src.scope == GLOBAL else s.dst, clip=True)
    if src.scope == GLOBAL:
        c.gmem_load, c.buffer = elems * src.dtype.bytes, src
        if is_shared(dst.scope):
            c.zero_fill = (region_elems(s.src, clip=False) - elems) * src.dtype.bytes
    if dst.scope == GLOBAL:
        c.gmem_store = elems * dst.dtype.bytes
    if is_shared(src.scope):
        c.smem += elems * src.dtype.bytes
    if is_shared(dst.scope):
        c.smem += elems * dst.dtype.bytes
    if src.dtype is not dst.dtype:
        c.cuda_ops = elems


# --- T.fill / T.clear -----------------------------------------------------------------------
def fill_text(p, s: Fill) -> str:
    if isinstance(s.value, Const) and s.value.value == 0:
        return f"T.clear({p.region(s.dst)})"
    return f"T.fill({p.region(s.dst)}, {p.expr(s.value)})"


def interpret_fill(m, s: Fill, mask):
    value = to_dtype(m.ev.eval(s.value), s.dst.buffer.dtype)
    if np.ndim(value) != 0:
        raise TileError("T.fill needs one value for the whole tile", s.span)
    _, extents = m.region_box(s.dst)
    m.write_region(s.dst, np.full(extents, value, dtype=s.dst.buffer.dtype.numpy), s.span)


def charge_fill(s: Fill, c, gemm_plan):
    b = s.dst.buffer
    elems = region_elems(s.dst, clip=b.scope == GLOBAL)
    if is_shared(b.scope):
        c.smem = elems * b.dtype.bytes
    elif b.scope == GLOBAL:
        c.gmem_store = elems * b.dtype.bytes


# --- T.atomic_add / max / min ---------------------------------------------------------------
_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum}


def atomic_text(p, s: Atomic) -> str:
    value = p.region(s.value) if isinstance(s.value, BufferRegion) else p.expr(s.value)
    notes = "".join(f", {k}={v!r}" for k, v in s.annotations.items())
    return f"T.atomic_{s.kind}({p.region(s.dst)}, {value}{notes})"


def interpret_atomic(m, s: Atomic, mask):
    combine = _ATOMIC[s.kind]
    d = s.dst.buffer.dtype
    if isinstance(s.value, BufferRegion):
        values = widen(m.read_region(s.value, s.span))
        _, extents = m.region_box(s.dst)
        cd = compute_dtype(d)
        m.write_region(s.dst, values.reshape(extents).astype(cd), s.span,
                       combine=lambda old, new: combine(widen(old).astype(cd), new))
        return
    # Scalar form, possibly inside T.Parallel: np.<op>.at applies repeated indices in turn,
    # which is what a sequence of atomics does.
    array = m.array_of(s.dst.buffer)
    idx = [np.asarray(m.ev.eval(x, mask)).astype(np.int64) for x in s.dst.starts]
    value = to_dtype(m.ev.eval(s.value, mask), d)
    shape = np.broadcast(*idx, value, *([mask] if mask is not None else [])).shape
    live = np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape).copy()
    inside = in_bounds([np.broadcast_to(i, shape) for i in idx], array.shape)
    if inside is not True:
        if s.dst.buffer.scope != GLOBAL and np.any(live & ~inside):
            raise TileError(f"out-of-bounds atomic on {s.dst.buffer.name}", s.span)
        live &= inside
    sel = tuple(np.broadcast_to(i, shape)[live] for i in idx)
    vals = np.broadcast_to(value, shape)[live]
    cd = compute_dtype(d)
    work = widen(array).astype(cd)
    combine.at(work, sel, vals.astype(cd))
    array[...] = to_dtype(work, d)


def charge_atomic(s: Atomic, c, gemm_plan):
    """An atomic into global memory reads and writes each element once and combines it."""
    dst = s.dst.buffer
    if dst.scope == GLOBAL:
        elems = region_elems(s.dst, clip=True)
        c.gmem_load = c.gmem_store = elems * dst.dtype.bytes
        c.cuda_ops = elems


register_contract(Copy, TileOpContract(copy_text, interpret_copy, charge_copy))
register_contract(Fill, TileOpContract(fill_text, interpret_fill, charge_fill))
register_contract(Atomic, TileOpContract(atomic_text, interpret_atomic, charge_atomic))
