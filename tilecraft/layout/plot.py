"""Text pictures of layouts, for IR dumps, error messages and debugging at a terminal.

A fragment is drawn as its logical tile with "T<thread>:<local>" in each cell, which is how the
PTX ISA draws mma fragments, so a layout can be compared with the manual by eye. No plotting
library is needed.
"""
from __future__ import annotations

import numpy as np

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
