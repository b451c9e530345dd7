"""What each tile op means on the reference interpreter."""
from __future__ import annotations

import numpy as np

from ..errors import TileError
from ..ir.buffer import Buffer, BufferRegion, GLOBAL
from .values import compute_dtype, in_bounds, to_dtype


def _tile_shape(extents) -> list:
    return [e for e in extents if e != 1]


def copy(m, s, mask):
    values = m.read_region(s.src, s.span)
    _, dst_extents = m.region_box(s.dst)
    values = values.reshape(dst_extents)
    m.write_region(s.dst, to_dtype(_widen(values), s.dst.buffer.dtype), s.span)


def _widen(values: np.ndarray) -> np.ndarray:
    # ml_dtypes narrow floats convert best through float32.
    if values.dtype.kind == "V" or values.dtype.name in ("bfloat16", "float8_e4m3fn",
                                                         "float8_e5m2"):
        return values.astype(np.float32)
    return values


def _matrix(m, r: BufferRegion, transpose: bool, span):
    values = m.read_region(r, span)
    _, extents = m.region_box(r)
    shape = _tile_shape(extents)
    if len(shape) < 2:
        shape = extents[-2:]
    values = values.reshape(shape)
    return values.T if transpose else values


def gemm(m, s, mask):
    a = _matrix(m, s.A, s.transpose_A, s.span)
    b = _matrix(m, s.B, s.transpose_B, s.span)
    acc = compute_dtype(s.C.buffer.dtype)
    if acc.kind == "f" and acc.itemsize < 8:
        acc = np.dtype(np.float32)
    product = _widen(a).astype(acc) @ _widen(b).astype(acc)
    if not s.clear_accum:
        c = _widen(m.read_region(s.C, s.span)).astype(acc).reshape(product.shape)
        product = c + product
    _, c_extents = m.region_box(s.C)
    m.write_region(s.C, to_dtype(product.reshape(c_extents), s.C.buffer.dtype), s.span)


_REDUCE = {"max": np.max, "min": np.min, "sum": np.sum,
           "abssum": lambda x, axis: np.sum(np.abs(x), axis=axis),
           "absmax": lambda x, axis: np.max(np.abs(x), axis=axis)}
_COMBINE = {"max": np.maximum, "min": np.minimum, "sum": np.add, "abssum": np.add,
            "absmax": np.maximum}


def reduce(m, s, mask):
    src = _widen(m.read_region(s.src, s.span))
    cd = compute_dtype(s.dst.buffer.dtype)
    result = _REDUCE[s.kind](src.astype(cd), axis=s.dim)
    _, dst_extents = m.region_box(s.dst)
    result = result.reshape(dst_extents)
    if not s.clear:
        old = _widen(m.read_region(s.dst, s.span)).astype(cd)
        result = _COMBINE[s.kind](old, result)
    m.write_region(s.dst, to_dtype(result, s.dst.buffer.dtype), s.span)


def cumsum(m, s, mask):
    src = _widen(m.read_region(s.src, s.span)).astype(compute_dtype(s.dst.buffer.dtype))
    if s.reverse:
        result = np.flip(np.cumsum(np.flip(src, s.dim), axis=s.dim), s.dim)
    else:
        result = np.cumsum(src, axis=s.dim)
    m.write_region(s.dst, to_dtype(result, s.dst.buffer.dtype), s.span)


def fill(m, s, mask):
    value = to_dtype(m.ev.eval(s.value), s.dst.buffer.dtype)
    if np.ndim(value) != 0:
        raise TileError("T.fill needs one value for the whole tile", s.span)
    _, extents = m.region_box(s.dst)
    m.write_region(s.dst, np.full(extents, value, dtype=s.dst.buffer.dtype.numpy), s.span)


_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum}


def atomic(m, s, mask):
    combine = _ATOMIC[s.kind]
    d = s.dst.buffer.dtype
    if isinstance(s.value, BufferRegion):
        values = _widen(m.read_region(s.value, s.span))
        _, extents = m.region_box(s.dst)
        cd = compute_dtype(d)
        m.write_region(s.dst, values.reshape(extents).astype(cd), s.span,
                       combine=lambda old, new: combine(_widen(old).astype(cd), new))
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
    work = _widen(array).astype(cd)
    combine.at(work, sel, vals.astype(cd))
    array[...] = to_dtype(work, d)


def print_(m, s, mask):
    block = tuple(int(m.env[id(v)]) for k in [m.current_kernel] if k for v in k.block_vars)
    where = f" block {block}" if block else ""
    value = m.array_of(s.value) if isinstance(s.value, Buffer) else m.ev.eval(s.value)
    print(f"{s.msg}{where}: {value}" if s.msg else f"{where.strip()}: {value}")


def no_effect(m, s, mask):
    """Layout and scheduling annotations do not change what a program computes."""


TILE_OPS = {"Copy": copy, "Gemm": gemm, "Reduce": reduce, "CumSum": cumsum, "Fill": fill,
            "Atomic": atomic, "Print": print_, "AnnotateLayout": no_effect,
            "UseSwizzle": no_effect}
