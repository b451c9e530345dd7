"""show_layouts: TileLang's layout visualization (tl.layout_visualization_enable): after layout
inference, the layout chosen for each fragment of each kernel is printed as its description
and grid (tilecraft.layout.render_fragment: the owning thread and register of every element),
and with tl.layout_visualization_formats also drawn to ./tmp (layout/plot.write_layout, as
tilecraft.tools.plot_layout draws).
It runs where layouts are inferred, when a program is compiled for a GPU target (the emulator
included); a program the disk cache returns was not compiled and prints nothing.
"""
from __future__ import annotations

from ..ir.annotations import LAYOUTS
from ..ir.buffer import FRAGMENT
from ..layout import render_fragment
from ..layout.plot import write_layout
from ..pass_config import PassConfigKey
from .parallel_nests import allocated

ALL_FORMATS = "txt,png,pdf,svg"
SAVE_DIRECTORY = "./tmp"


def show_layouts(func, configs: dict | None):
    configs = configs or {}
    if not configs.get(PassConfigKey.TL_LAYOUT_VISUALIZATION_ENABLE):
        return func
    formats = configs.get(PassConfigKey.TL_LAYOUT_VISUALIZATION_FORMATS) or ""
    formats = ALL_FORMATS if formats.strip().lower() == "all" else formats
    kernels = func.kernels()
    for n, kernel in enumerate(kernels):
        layouts = kernel.attrs.get(LAYOUTS)
        if layouts is None:
            continue
        for b in allocated(kernel.body):
            if b.scope != FRAGMENT or not layouts.has(b):
                continue
            layout = layouts.buffer(b)
            print(f"{b.name} inferenced layout:\n{render_fragment(layout)}\n", flush=True)
            if formats:
                where = f"{func.name}_{n}_{b.name}" if len(kernels) > 1 else \
                    f"{func.name}_{b.name}"
                write_layout(layout, SAVE_DIRECTORY, where, formats)
    return func
