"""TileLang's `tilelang.carver.roller` names scripts use: the rasterization plans of a hint."""
