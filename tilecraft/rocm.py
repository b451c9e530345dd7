"""TileLang's `tilelang.rocm`: not part of tilecraft (see not_included.py)."""
from .not_included import refuse

refuse("rocm")
