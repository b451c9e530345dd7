"""Autotuning of @tilecraft.jit factories (paper section 4.2): candidate configurations given
or proposed by the cost model, pruned to the predicted best, compiled in parallel processes,
checked, measured, and the results cached on disk per kernel, problem and GPU."""
from .api import AutoTuneImpl, autotune
from .builder import AutoTuner
from .capture import get_autotune_inputs, set_autotune_inputs
from .results import AutotuneResult, Trial

__all__ = ["autotune", "AutoTuner", "AutoTuneImpl", "AutotuneResult", "Trial",
           "set_autotune_inputs", "get_autotune_inputs"]
