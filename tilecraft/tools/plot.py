"""`plot_layout`, as TileLang's `tilelang.tools.plot_layout`: a layout or fragment drawn to files.

The grid is tilecraft.layout.render_fragment's (a Layout's cells show the physical index, a
Fragment's the owning thread and its local slot). "txt" writes it as text and needs nothing;
"png", "pdf" and "svg" draw it with matplotlib, which must then be installed.
"""
from __future__ import annotations

import os

from ..errors import TileError
from ..layout import render_fragment
from ..layout.layout import Layout
from ..layout.plot import layout_cells

_IMAGES = ("png", "pdf", "svg")


def plot_layout(layout, save_directory: str = "./tmp", name: str = "layout",
                formats="txt", verbose: bool = False) -> list:
    """Write `layout` (a Layout or Fragment) to save_directory/name.<format> for each of
    `formats` ("txt", "png", "pdf", "svg"; a list or a comma-separated string). Returns the
    paths written."""
    if not isinstance(layout, Layout):
        raise TileError(f"plot_layout takes a Layout or Fragment, got {type(layout).__name__}")
    wanted = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str)
                                          else formats)]
    unknown = [f for f in wanted if f not in ("txt",) + _IMAGES]
    if unknown or not wanted:
        raise TileError(f"plot_layout: formats {unknown or wanted} are not among txt, "
                        f"{', '.join(_IMAGES)}")
    os.makedirs(save_directory, exist_ok=True)
    paths = []
    for fmt in wanted:
        path = os.path.join(save_directory, f"{name}.{fmt}")
        if fmt == "txt":
            with open(path, "w") as f:
                f.write(render_fragment(layout, max_rows=1 << 30, max_cols=1 << 30) + "\n")
        else:
            _draw(layout, path, name)
        paths.append(path)
        if verbose:
            print(f"plot_layout: wrote {path}")
    return paths


def _draw(layout, path: str, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TileError(f"plot_layout: {os.path.basename(path)} needs matplotlib (pip install "
                        "matplotlib); formats='txt' writes the grid as text") from None
    cells = layout_cells(layout)
    cells = cells.reshape(-1, cells.shape[-1]) if cells.ndim > 1 else cells.reshape(1, -1)
    rows, cols = cells.shape
    fig, ax = plt.subplots(figsize=(max(4, cols * 0.5), max(2, rows * 0.35)))
    ax.set_axis_off()
    table = ax.table(cellText=[[str(c) for c in row] for row in cells], loc="center",
                     cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(6)
    ax.set_title(title)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
