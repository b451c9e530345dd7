"""Text pictures of layouts, for IR dumps, error messages and debugging at a terminal.

A fragment is drawn as its logical tile with "T<thread>:<local>" in each cell, which is how the
PTX ISA draws mma fragments, so a layout can be compared with the manual by eye. No plotting
library is needed for text; write_layout (behind tools.plot_layout and the layout
visualization pass config) draws png / pdf / svg with matplotlib where it is installed.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import TileError

from .fragment import Fragment
from .layout import Layout


def layout_cells(layout: Layout) -> np.ndarray:
    """The tile's cells as render_fragment and tools.plot_layout show them: a Fragment's
    owning thread and local slot, a Layout's physical index."""
    tab = layout.table()
    if isinstance(layout, Fragment):
        threads, locals_ = tab[..., 0], tab[..., 0, 1]
        out = np.empty(layout.shape, dtype=object)
        for idx in np.ndindex(*layout.shape):
            ts = threads[idx]
            who = f"T{ts[0]}" if len(ts) == 1 else f"T{ts[0]}+{len(ts) - 1}"
            out[idx] = f"{who}:{locals_[idx]}"
        return out
    out = np.empty(layout.shape, dtype=object)
    for idx in np.ndindex(*layout.shape):
        out[idx] = ",".join(str(v) for v in tab[idx])
    return out


def render_fragment(layout: Layout, max_rows: int = 64, max_cols: int = 32) -> str:
    """The tile as a grid: for a Fragment each cell is "T<thread>:<local>" ("T<first>+<more>"
    when replicated), for a Layout the physical index. 1-d tiles print as one row; tiles with
    more than 2 dims print their last two dims for each leading index."""
    cells = layout_cells(layout)
    if cells.ndim == 1:
        cells = cells.reshape(1, -1)
    blocks = []
    leading = cells.shape[:-2]
    for lead in np.ndindex(*leading) if leading else [()]:
        grid = cells[lead]
        rows, cols = grid.shape
        shown = grid[:max_rows, :max_cols]
        width = max(len(str(c)) for c in shown.reshape(-1))
        header = " " * 5 + " ".join(f"{j:>{width}}" for j in range(shown.shape[1]))
        lines = [f"[{', '.join(map(str, lead))}]" if lead else "", header]
        for i, row in enumerate(shown):
            more = " ..." if cols > max_cols else ""
            lines.append(f"{i:>4} " + " ".join(f"{c:>{width}}" for c in row) + more)
        if rows > max_rows:
            lines.append(f"  ... {rows - max_rows} more rows")
        blocks.append("\n".join(line for line in lines if line != ""))
    return layout.describe() + "\n" + "\n".join(blocks)


_IMAGES = ("png", "pdf", "svg")


def write_layout(layout, save_directory: str = "./tmp", name: str = "layout",
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
