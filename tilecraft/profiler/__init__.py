"""Checking and timing kernels (TileLang's `tilelang.profiler`): `do_bench(fn, ...)` times any
function, a kernel's `get_profiler()` checks it against a reference and times it, and the
input supply draws random inputs per TensorSupplyType."""
from .bench import cuda_median_ms, do_bench
from .compare import compare
from .kernel_profiler import Profiler
from .supply import TensorSupplyType, TorchRandom, make_input

__all__ = ["do_bench", "cuda_median_ms", "compare", "Profiler", "TensorSupplyType",
           "TorchRandom", "make_input"]
