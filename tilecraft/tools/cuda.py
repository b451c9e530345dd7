"""TileLang's `tilelang.tools.cuda`: not part of tilecraft (see not_included.py)."""
from ..not_included import refuse

refuse("tools.cuda")
