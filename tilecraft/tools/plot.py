"""`plot_layout`, as TileLang's `tilelang.tools.plot_layout`: a layout or fragment drawn to files.

The grid is tilecraft.layout.render_fragment's (a Layout's cells show the physical index, a
Fragment's the owning thread and its local slot). "txt" writes it as text and needs nothing;
"png", "pdf" and "svg" draw it with matplotlib, which must then be installed.
"""
from __future__ import annotations

from ..layout.plot import write_layout


def plot_layout(layout, save_directory: str = "./tmp", name: str = "layout",
                formats="txt", verbose: bool = False) -> list:
    """Write `layout` (a Layout or Fragment) to save_directory/name.<format> for each of
    `formats` ("txt", "png", "pdf", "svg"; a list or a comma-separated string). Returns the
    paths written."""
    return write_layout(layout, save_directory, name, formats, verbose)
