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
            early_stop: bool = False, early_stop_factor: float = 2.0,
            use_pipeline: bool = False, enable_grouped_compile: bool = False,
            group_compile_size: int = 1, benchmark_multi_gpu: bool | None = None,
            benchmark_devices: list | None = None) -> AutotuneResult:
        """Tune: the fastest correct configuration, its kernel and times.

        benchmark_multi_gpu: False measures on the current GPU alone, True (or None,
        tilecraft's default) on every GPU of its model; benchmark_devices: the device ordinals
        to measure on instead (autotune's gpus=). use_pipeline, enable_grouped_compile and
        group_compile_size are TileLang's ways of overlapping compilation with measuring and
        of batching compiles; tilecraft does both anyway (every candidate is compiled in a
        pool of worker processes, and on several GPUs screened as soon as it is built), so
        they are checked and change nothing."""
        try:
            gpus = _gpus(benchmark_multi_gpu, benchmark_devices)
            for name, value in (("use_pipeline", use_pipeline),
                                ("enable_grouped_compile", enable_grouped_compile)):
                if not isinstance(value, bool):
                    raise TileError(f"AutoTuner.run: {name} must be True or False, got "
                                    f"{value!r}", caller_span())
            if isinstance(group_compile_size, bool) or not isinstance(group_compile_size, int) \
                    or group_compile_size < 1:
                raise TileError(f"AutoTuner.run: group_compile_size must be an int >= 1, got "
                                f"{group_compile_size!r}", caller_span())
        except TileError as e:
            raise_clean(e)
        profile = {**self.profile_args, "warmup": warmup, "rep": rep, "timeout": timeout,
                   "early_stop": early_stop, "early_stop_factor": early_stop_factor,
                   "gpus": gpus}
        tuned = autotune(configs=self.configs, **profile)(jit(**self.compile_args)(self.fn))
        return tuned.tune()


def _gpus(multi_gpu, devices):
    """autotune's gpus= for TileLang's benchmark_multi_gpu / benchmark_devices."""
    if devices is not None:
        if multi_gpu is False:
            raise TileError("AutoTuner.run: benchmark_devices lists GPUs to measure on, but "
                            "benchmark_multi_gpu=False asks for one", caller_span())
        return list(devices)
    if multi_gpu is None or multi_gpu is True:
        return None
    if multi_gpu is False:
        return 1
    raise TileError(f"AutoTuner.run: benchmark_multi_gpu must be True or False, got "
                    f"{multi_gpu!r}", caller_span())
