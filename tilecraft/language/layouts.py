"""T.Layout and T.Fragment: user-defined layouts, with TileLang's constructors.

`T.Layout(shape, forward_fn)` maps a logical index to physical indices (a shared tile's place,
or a global tensor's order: T.annotate_layout); `T.Fragment(shape, forward_fn=None,
forward_thread_fn=None, replicate=1, forward_index_fn=None)` maps it to the thread that holds
it and the register index in that thread, `forward_fn(*idx[, rep]) -> (thread, index)` or the
two functions apart. They are the compiler's own Layout and Fragment (tilecraft.layout), so
they compose with everything inference derives; the shapes may be a buffer's `.shape`.
"""
from __future__ import annotations

from .. import layout as lay
from ..arith.bounds import bound_of
from ..layout.bit_inverse import bit_permutation_inverse
from ..errors import TileError, current_span
from ..ir.expr import Expr, convert
from ..ir.linear import constant_value


def _static_shape(what: str, shape) -> tuple:
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    out = []
    for n in dims:
        v = constant_value(convert(n)) if isinstance(n, (int, Expr)) and not isinstance(n, bool) \
            else None
        if v is None or v <= 0:
            raise TileError(f"{what}: the shape must be positive sizes known when compiling, got "
                            f"{tuple(shape) if isinstance(shape, (tuple, list)) else shape}",
                            current_span())
        out.append(int(v))
    return tuple(out)


def _one_index(what: str, index, in_vars, shape):
    """A register index given as one expression or a list of them: a list is flattened
    row-major over the box its entries range over."""
    if isinstance(index, (list, tuple)):
        parts = [convert(x) for x in index]
        if len(parts) == 1:
            return parts[0]
        bounds = {id(v): (0, n - 1) for v, n in zip(in_vars, shape)}
        box = []
        for k, p in enumerate(parts):
            lo, hi = bound_of(p, bounds)
            if lo < 0 or hi == float("inf"):
                raise TileError(f"{what}: index entry {k} ranges over [{lo}, {hi}]",
                                current_span())
            box.append(int(hi) + 1)
        return lay.flatten_index(parts, box)
    return index


class Layout(lay.Layout):
    """TileLang's `T.Layout(shape, forward_fn)`: logical index -> physical indices."""

    def __init__(self, shape, forward_fn, inverse_fn=None):
        what = "T.Layout"
        if not callable(forward_fn):
            raise TileError(f"{what}: forward_fn must be a function of the indices, got "
                            f"{type(forward_fn).__name__}", current_span())
        try:
            super().__init__(_static_shape(what, shape), forward_fn, inverse_fn)
        except lay.LayoutError as e:
            raise TileError(f"{what}: {e.message}", current_span()) from None

    def _derived_kind(self) -> type:
        return lay.Layout


class Fragment(lay.Fragment):
    """TileLang's `T.Fragment(shape, forward_fn=None, forward_thread_fn=None, replicate=1,
    forward_index_fn=None)`: logical index -> (thread, register index)."""

    def __init__(self, shape, forward_fn=None, forward_thread_fn=None, replicate=1,
                 forward_index_fn=None, *, threads=None):
        what = "T.Fragment"
        shape = _static_shape(what, shape)
        if not isinstance(replicate, int) or isinstance(replicate, bool) or replicate < 1:
            raise TileError(f"{what}: replicate must be a positive int, got {replicate!r}",
                            current_span())
        if forward_fn is not None:
            def pair(*args):
                got = forward_fn(*args)
                if not isinstance(got, (tuple, list)) or len(got) != 2:
                    raise TileError(f"{what}: forward_fn returns (thread, index), got {got!r}",
                                    current_span())
                return got[0], _one_index(what, got[1], args, shape)
            kwargs = dict(forward_fn=pair)
        elif forward_thread_fn is not None and forward_index_fn is not None:
            kwargs = dict(thread_fn=forward_thread_fn, local_fn=lambda *idx: _one_index(
                what, forward_index_fn(*idx), idx, shape))
        else:
            raise TileError(f"{what} needs forward_fn, or forward_thread_fn and "
                            "forward_index_fn", current_span())
        try:
            super().__init__(shape, replicate=replicate, threads=threads, **kwargs)
        except lay.LayoutError as e:
            raise TileError(f"{what}: {e.message}", current_span()) from None
        # TileLang derives the way back (thread, index) -> logical index itself
        extents = list(shape) + [replicate]
        self._inverse_fn = bit_permutation_inverse(
            self.table().reshape(*extents, 2), extents, self.thread_offset)

    def _derived_kind(self) -> type:
        return lay.Fragment

