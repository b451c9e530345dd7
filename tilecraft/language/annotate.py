"""Layout and scheduling annotations: annotate_layout, use_swizzle.

A layout given to T.annotate_layout is checked against its buffer where it is written: the
index function's arity, the layout's shape, its kind (a Fragment for a fragment, a plain
Layout for a shared tile), its element width and its thread count, and that no two elements
share a place. Inference and lowering take annotated layouts as given, so a wrong one would
otherwise surface far away (or not at all, as wrong results).
"""
from __future__ import annotations

import inspect
import math

import numpy as np

from .. import layout as lay
from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir import tileop as top
from ..frontend.remap_accesses import box_of
from ..ir.buffer import FRAGMENT, GLOBAL, Buffer, is_shared


# A global tensor's layout with up to this many elements is checked one-to-one by enumerating
# it; a larger one only for the size of its output box (its index space is too large to list).
ENUMERATED_GLOBAL_LAYOUT = 1 << 22


def annotate_layout(layouts: dict):
    """Pin the layouts of some buffers: {buffer: Layout | Fragment | lambda *idx: ...}. A
    global tensor's Layout permutes where its elements are stored, for this kernel's accesses
    (frontend/remap_accesses.py); a shared tile's places its elements, a fragment's spreads
    them over the threads."""
    what = "T.annotate_layout"
    b = bld.active(what)
    if not isinstance(layouts, dict):
        raise TileError(f"{what} takes a dict {{buffer: layout}}", current_span())
    threads = int(np.prod(b.kernel.threads))
    checked = {}
    for buf, layout in layouts.items():
        if not isinstance(buf, Buffer):
            raise TileError(f"{what}: keys must be buffers, got {type(buf).__name__}",
                            current_span())
        if buf.scope not in (FRAGMENT, GLOBAL) and not is_shared(buf.scope):
            raise TileError(f"{what}: {buf.name} is a {buf.scope} buffer; only global, shared "
                            "and fragment buffers take layouts", current_span())
        if layout is None:
            raise TileError(f"{what}: no layout given for {buf.name}", current_span())
        checked[buf] = _checked(buf, layout, threads)
    bld.emit(top.AnnotateLayout(checked, current_span()), what)


def _checked(buf: Buffer, given, threads: int):
    """given as a layout object that fits buf, or a TileError saying what does not."""
    what = f"T.annotate_layout: the layout of {buf.name}"
    shape = buf.static_shape()
    if shape is None:
        raise TileError(f"{what}: {buf.name} has a symbolic shape {tuple(buf.shape)}; a layout "
                        "needs the shape known when compiling", current_span())
    if not isinstance(given, lay.Layout):
        if not callable(given):
            raise TileError(f"{what} is a {type(given).__name__}, not a Layout, a Fragment "
                            "nor a function of the indices", current_span())
        given = _from_function(buf, given, shape, what)
    if tuple(given.shape) != tuple(shape):
        raise TileError(f"{what} has shape {tuple(given.shape)} but {buf.name} has shape "
                        f"{tuple(shape)}", current_span())
    if buf.scope == FRAGMENT:
        return _checked_fragment(buf, given, threads, what)
    if isinstance(given, lay.Fragment):
        raise TileError(f"{what} is a Fragment (registers of threads), but {buf.name} is a "
                        f"{'global tensor' if buf.scope == GLOBAL else 'shared tile'}: give it "
                        "a Layout of element offsets", current_span())
    if buf.scope == GLOBAL:   # the accesses are rewritten when the prim_func is built
        box_of(buf, given, current_span())
        if math.prod(shape) <= ENUMERATED_GLOBAL_LAYOUT:
            _one_to_one(given, given.table().reshape(-1, len(given.outputs)), what, "place")
        return given
    bits = getattr(given, "element_bits", None)
    if bits is not None and bits != buf.dtype.bits:
        raise TileError(f"{what} is made for {bits}-bit elements, but {buf.name} holds "
                        f"{buf.dtype} ({buf.dtype.bits}-bit)", current_span())
    points = given.table().reshape(-1, len(given.outputs))
    if points.min() < 0:
        raise TileError(f"{what} maps an element to a negative offset", current_span())
    _one_to_one(given, points, what, "offset")
    return given


def _from_function(buf: Buffer, fn, shape, what: str) -> lay.Layout:
    """A layout from an index function, which must take one index per dimension."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind == p.VAR_POSITIONAL for p in params):
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is p.empty]
        if not len(required) <= len(shape) <= len(positional):
            raise TileError(f"{what}: the function takes {len(required)} index(es) but "
                            f"{buf.name} has {len(shape)} dimension(s) {tuple(shape)}",
                            current_span())
    try:
        return lay.Layout(shape, lambda *idx: list(_as_list(fn(*idx))))
    except TileError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's function failed on symbolic indices
        raise TileError(f"{what}: the function raised {type(e).__name__}: {e}",
                        current_span()) from None


def _checked_fragment(buf: Buffer, given, threads: int, what: str):
    if not isinstance(given, lay.Fragment):
        raise TileError(f"{what} is a {type(given).__name__} of offsets, but {buf.name} is a "
                        "fragment: give it a Fragment (which thread holds each element, in "
                        "which register)", current_span())
    if given.num_threads + given.thread_offset > threads:
        raise TileError(f"{what} spreads it over {given.num_threads} threads, but the block "
                        f"has {threads}", current_span())
    try:
        given.check()
    except lay.LayoutError as e:
        raise TileError(f"{what} is not a valid register layout: {e.message}",
                        current_span()) from None
    return given


def _one_to_one(layout, points, what: str, place: str):
    unique, counts = np.unique(points, axis=0, return_counts=True)
    if len(unique) == len(points):
        return
    dup = unique[np.argmax(counts > 1)]
    hits = np.nonzero((points == dup).all(axis=1))[0][:2]
    first, second = (tuple(int(x) for x in np.unravel_index(h, layout.shape)) for h in hits)
    raise TileError(f"{what} is not one-to-one: elements {first} and {second} share the "
                    f"{place} {[int(x) for x in dup]}", current_span())


def _as_list(x):
    return x if isinstance(x, (list, tuple)) else [x]


def use_swizzle(panel_size: int = 8, order: str = "row", enable: bool = True):
    """Rasterize thread blocks in panels of panel_size for better L2 reuse."""
    what = "T.use_swizzle"
    if not isinstance(panel_size, int) or isinstance(panel_size, bool) or panel_size < 1:
        raise TileError(f"{what}: panel_size must be a positive int, got {panel_size!r}",
                        current_span())
    if order not in ("row", "column"):
        raise TileError(f"{what}: order must be 'row' or 'column', got {order!r}",
                        current_span())
    bld.emit(top.UseSwizzle(panel_size, order, bool(enable), current_span()), what)
