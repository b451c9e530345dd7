"""TileLang's `tilelang.language.dtypes`: not part of tilecraft (see not_included.py)."""
from ..not_included import refuse

refuse("language.dtypes")
