"""T.reshape / T.view: TileLang's views of a buffer's storage under another shape or dtype.

Their arguments are checked as TileLang checks them (the view must cover exactly the bits of
the buffer: elements x bits per element equal); then they are refused as not supported yet:
tilecraft's buffers each own their storage (layouts, the shared arena, barriers and the
emulator's checks all reason per buffer), so a second name for the same bytes has no place in
its IR. Where TileLang scripts use them, a global tensor can be passed reshaped or
reinterpreted from the host (`x.view(...)`, `x.view(torch.int8)`), and a tile allocated in
the shape it is indexed with.
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..ir import dtypes as dt
from ..ir.buffer import Buffer, BufferRegion
from ..ir.expr import Expr, convert
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


def _not_supported(what: str, src: Buffer):
    return TileError(f"{what}({src.name}) is not supported yet: a view shares {src.name}'s "
                     "storage, and tilecraft's buffers each own theirs; pass a global tensor "
                     "reshaped or reinterpreted from the host, or allocate a tile in the shape "
                     "it is used with", current_span())


def reshape(src, shape):
    """A view of src's storage in another shape (not supported yet: see the module's text)."""
    raise _not_supported("T.reshape", _checked("T.reshape", src, shape, None))


def view(src, shape=None, dtype=None):
    """A view of src's storage in another shape and/or dtype (not supported yet)."""
    raise _not_supported("T.view", _checked("T.view", src, shape, dtype))
