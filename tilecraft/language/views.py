"""T.reshape / T.view: TileLang's views of a buffer's storage under another shape or dtype.

Their arguments are checked as TileLang checks them (the view must cover exactly the bits of
the buffer: elements x bits per element equal). A view in another shape with the same dtype
is a second name for the buffer: its element idx is the buffer's element at the same
row-major offset, and every access to it is made to the buffer when the prim_func is built
(frontend/remap_accesses.py), so the buffer keeps one layout, one allocation and one meaning
in every layer. A view in another dtype reinterprets bytes, which a buffer whose layout the
compiler chooses (a fragment's registers, a swizzled shared tile) does not keep in one order;
it is refused: pass a global tensor reinterpreted from the host (`x.view(torch.int8)`), or
allocate the tile in the dtype it is used in.
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..ir import dtypes as dt
from ..ir.buffer import GLOBAL, Buffer, BufferRegion
from ..frontend import builder as bld
from ..ir.expr import Const, Expr, convert
from ..ir.linear import equal


def _bits(shape, d: dt.DType):
    total = convert(d.bits)
    for s in shape:
        total = total * s
    return total


def _shape(what: str, shape) -> tuple:
    if isinstance(shape, (int, Expr)) and not isinstance(shape, bool):
        return (shape,)
    if not isinstance(shape, (tuple, list)) or not shape or not all(
            isinstance(s, (int, Expr)) and not isinstance(s, bool) for s in shape):
        raise TileError(f"{what}: shape must be an int or a tuple of sizes, got {shape!r}",
                        current_span())
    return tuple(shape)


def _checked(what: str, src, shape, dtype) -> Buffer:
    if isinstance(src, BufferRegion):
        src = src.buffer
    if not isinstance(src, Buffer):
        raise TileError(f"{what} takes a buffer, got {type(src).__name__}", current_span())
    shape = src.shape if shape is None else _shape(what, shape)
    try:
        d = src.dtype if dtype is None else dt.dtype(dtype)
    except (ValueError, TypeError) as e:
        raise TileError(f"{what}: {e}", current_span()) from None
    if not equal(_bits(shape, d), _bits(src.shape, src.dtype)):
        raise TileError(f"{what}({src.name}): the view {tuple(shape)} of {d} does not cover the "
                        f"buffer's bits: {src.name} is {tuple(src.shape)} of {src.dtype}",
                        current_span())
    return src


def _not_supported(what: str, src: Buffer, dtype):
    return TileError(f"{what}({src.name}) in another dtype ({dt.dtype(dtype)} over "
                     f"{src.dtype}) is not supported yet: it reinterprets bytes, which a buffer "
                     "whose layout the compiler chooses does not keep in one order; pass a "
                     "global tensor reinterpreted from the host (x.view(torch.int8)), or "
                     "allocate the tile in the dtype it is used in", current_span())


def _view(what: str, src: Buffer, shape) -> Buffer:
    b = bld.active(what, need_kernel=src.scope != GLOBAL)
    if any(not isinstance(convert(n), Const) for n in shape) or \
            any(not isinstance(convert(n), Const) for n in src.shape):
        raise TileError(f"{what}({src.name}): a view needs its shape and {src.name}'s known when "
                        "compiling", current_span())
    while src in b.views:   # a view of a view is a view of the first buffer
        src = b.views[src]
    # named, as an allocation is, by the assignment that binds it
    view = Buffer("__unnamed", tuple(int(convert(n).value) for n in shape), src.dtype,
                  src.scope, current_span())
    b.views[view] = src
    return view


def reshape(src, shape):
    """src's storage seen in another shape (element idx: src's element at the same row-major
    offset)."""
    src = _checked("T.reshape", src, shape, None)
    return _view("T.reshape", src, _shape("T.reshape", shape))


def view(src, shape=None, dtype=None):
    """src's storage in another shape; another dtype is not supported yet."""
    checked = _checked("T.view", src, shape, dtype)
    if dtype is not None and dt.dtype(dtype) is not checked.dtype:
        raise _not_supported("T.view", checked, dtype)
    return _view("T.view", checked, checked.shape if shape is None else _shape("T.view", shape))
