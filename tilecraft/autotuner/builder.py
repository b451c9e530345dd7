"""AutoTuner: TileLang's class form of @autotune, for a plain function returning a prim_func.

    result = AutoTuner.from_kernel(kernel=matmul, configs=configs) \\
        .set_compile_args(out_idx=[-1], target="auto") \\
        .set_profile_args(ref_prog=ref_program, supply_type=TensorSupplyType.Integer) \\
        .run(warmup=3, rep=20)
    result.latency, result.config, result.ref_latency, result.kernel, result.func, result.libcode

It is the decorators underneath: run() wraps the function in @jit with the compile arguments
and @autotune with the profile arguments, and tunes the call with no arguments (the configs
give the parameters; the function's defaults the rest). run's warmup / rep / timeout are
autotune's (run counts, seconds of compilation per candidate).
"""
from __future__ import annotations

from ..errors import TileError, caller_span, raise_clean
from ..jit import JITImpl, jit
from ..jit_options import checked_configs, checked_reporting
from .api import autotune, check_tilelang_only
from .results import AutotuneResult


class AutoTuner:
    def __init__(self, fn, configs):
        if isinstance(fn, JITImpl):
            fn = fn.factory   # its compile arguments are set here, by set_compile_args
        if not callable(fn):
            raise TileError(f"AutoTuner: kernel must be a function returning a @T.prim_func, "
                            f"got {type(fn).__name__}")
        self.fn = fn
        self.configs = configs
        self.compile_args: dict = {}
        self.profile_args: dict = {}

    @classmethod
    def from_kernel(cls, kernel, configs) -> "AutoTuner":
        try:
            return cls(kernel, configs)
        except TileError as e:
            raise_clean(e)

    def set_compile_args(self, out_idx=None, target="auto", execution_backend="auto",
                         target_host=None, verbose: bool = False, pass_configs=None,
                         compile_flags=None) -> "AutoTuner":
        """What each candidate is compiled with (tilecraft.jit's arguments, checked here)."""
        try:
            checked_reporting(execution_backend, target_host, verbose)
            checked_configs(pass_configs, compile_flags)
        except TileError as e:
            raise_clean(e)
        self.compile_args = dict(out_idx=out_idx, target=target,
                                 execution_backend=execution_backend, target_host=target_host,
                                 verbose=verbose, pass_configs=pass_configs,
                                 compile_flags=compile_flags)
        return self

    def set_profile_args(self, warmup: int = 25, rep: int = 100, timeout: float = 30,
                         supply_type=None, ref_prog=None, supply_prog=None, rtol: float = 1e-2,
                         atol: float = 1e-2, max_mismatched_ratio: float = 0.01,
                         skip_check: bool = False, manual_check_prog=None,
                         cache_input_tensors: bool = False) -> "AutoTuner":
        """How candidates are checked and timed (@autotune's arguments)."""
        try:
            check_tilelang_only(manual_check_prog, cache_input_tensors, caller_span())
        except TileError as e:
            raise_clean(e)
        self.profile_args = dict(warmup=warmup, rep=rep, timeout=timeout,
                                 supply_type=supply_type, ref_prog=ref_prog,
                                 supply_prog=supply_prog, rtol=rtol, atol=atol,
                                 max_mismatched_ratio=max_mismatched_ratio,
                                 skip_check=skip_check)
        return self

    def run(self, warmup: int = 25, rep: int = 100, timeout: float = 30,
            early_stop: bool = False, early_stop_factor: float = 2.0) -> AutotuneResult:
        """Tune: the fastest correct configuration, its kernel and times."""
        profile = {**self.profile_args, "warmup": warmup, "rep": rep, "timeout": timeout,
                   "early_stop": early_stop, "early_stop_factor": early_stop_factor}
        tuned = autotune(configs=self.configs, **profile)(jit(**self.compile_args)(self.fn))
        return tuned.tune()
