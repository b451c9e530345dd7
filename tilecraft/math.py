"""Host-side integer helpers, as TileLang's `tilelang.math` has them (also `tilecraft.cdiv` and
`tilecraft.next_power_of_2`): for the Python that computes grid and tile sizes around a kernel.
cdiv is T.ceildiv: Python ints give an int, symbolic sizes (T.symbolic) an expression."""
from __future__ import annotations

import operator

from .errors import TileError
from .language.math import ceildiv as cdiv


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1): next_power_of_2(48) == 64."""
    if isinstance(x, bool):
        raise TileError(f"next_power_of_2 takes an integer, got {x!r}")
    try:
        n = operator.index(x)  # ints and numpy integers, never floats
    except TypeError:
        raise TileError(f"next_power_of_2 takes an integer, got {type(x).__name__} "
                        f"{x!r}") from None
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


__all__ = ["cdiv", "next_power_of_2"]
