"""TileLang's `tilelang.tvm`: not part of tilecraft (see not_included.py)."""
from .not_included import refuse

refuse("tvm")
