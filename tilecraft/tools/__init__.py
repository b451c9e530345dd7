"""TileLang's `tilelang.tools` names tilecraft has: `Analyzer` (FLOPs, global-memory bytes
and a predicted time of a specialized prim_func on a GPU) and `plot_layout`. Its `cuda`
(iket) is not part of tilecraft: naming it is a clear error (not_included.py)."""
from ..not_included import module_getattr
from .analyzer import AnalysisResult, Analyzer
from .plot import plot_layout

__all__ = ["Analyzer", "AnalysisResult", "plot_layout"]
__getattr__ = module_getattr(__name__, "tools.")
