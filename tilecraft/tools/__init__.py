"""TileLang's `tilelang.tools` names tilecraft has: `Analyzer` (FLOPs, global-memory bytes
and a predicted time of a specialized prim_func on a GPU)."""
from .analyzer import AnalysisResult, Analyzer

__all__ = ["Analyzer", "AnalysisResult"]
