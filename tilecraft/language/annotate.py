"""Layout and scheduling annotations: annotate_layout, use_swizzle."""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir import tileop as top
from ..ir.buffer import GLOBAL, Buffer


def annotate_layout(layouts: dict):
    """Pin the layouts of some buffers: {buffer: Layout | Fragment | lambda *idx: ...}."""
    what = "T.annotate_layout"
    if not isinstance(layouts, dict):
        raise TileError(f"{what} takes a dict {{buffer: layout}}", current_span())
    for buf, layout in layouts.items():
        if not isinstance(buf, Buffer):
            raise TileError(f"{what}: keys must be buffers, got {type(buf).__name__}",
                            current_span())
        if buf.scope == GLOBAL:
            raise TileError(f"{what}: {buf.name} is a global tensor; only shared and fragment "
                            "buffers take layouts", current_span())
        if layout is None:
            raise TileError(f"{what}: no layout given for {buf.name}", current_span())
    bld.emit(top.AnnotateLayout(dict(layouts), current_span()), what)


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
