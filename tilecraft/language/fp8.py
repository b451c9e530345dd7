"""TileLang's `tilelang.language.fp8`: the fp8 dtype of a format name on this platform."""
from __future__ import annotations

from ..errors import TileError
from ..ir import dtypes as dt


def determine_fp8_type(fp8_type: str = "e4m3"):
    """The dtype of fp8 format "e4m3" or "e5m2" (NVIDIA's e4m3fn and e5m2; the fnuz formats
    are AMD's)."""
    names = {"e4m3": "float8_e4m3", "e5m2": "float8_e5m2"}
    if fp8_type not in names:
        raise TileError(f"determine_fp8_type: fp8_type must be 'e4m3' or 'e5m2', got "
                        f"{fp8_type!r}")
    return dt.dtype(names[fp8_type])
