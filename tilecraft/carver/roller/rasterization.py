"""The rasterization plan a recommended hint carries. tilecraft's compiler chooses the order
of blocks for L2 reuse itself (schedule/choose_rasterization.py), so a hint asks for none."""
from __future__ import annotations


class Rasterization:
    """A block order; `panel_width` blocks per panel where it has panels."""
    panel_width: int | None = None


class NoRasterization(Rasterization):
    def __repr__(self) -> str:
        return "NoRasterization"


class Rasterization2DRow(Rasterization):
    def __init__(self, panel_width: int = 4):
        self.panel_width = panel_width

    def __repr__(self) -> str:
        return f"Rasterization2DRow({self.panel_width})"


class Rasterization2DColumn(Rasterization):
    def __init__(self, panel_width: int = 4):
        self.panel_width = panel_width

    def __repr__(self) -> str:
        return f"Rasterization2DColumn({self.panel_width})"
