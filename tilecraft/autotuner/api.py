"""@tilecraft.autotune: TileLang's decorator, stacked above @tilecraft.jit.

    @tilecraft.autotune(configs=[{"block_M": 64, "block_N": 64}, ...], warmup=25, rep=100)
    @tilecraft.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128, block_N=128, ...): ...

    kernel = matmul(4096, 4096, 4096)   # tuned once per problem, then the best kernel

Calling the decorated factory with the problem's arguments tunes the parameters the configs
set and returns the fastest correct JITKernel, which carries `.config`, `.latency`,
`.ref_latency` and `.autotune_result`; the decorated object keeps the last run as `.result`
(`.best_config`, `.results`, `.table()`). Passing every tunable parameter explicitly skips
tuning, as in TileLang; passing some of them pins those and tunes the rest.
"""
from __future__ import annotations

import copy
import dataclasses

from ..errors import TileError, caller_span, raise_clean
from ..eager import EagerJIT
from ..jit import JITImpl, JITKernel
from . import capture, space, tuner
from .eager_tuning import EagerTuning
from .results import AutotuneResult


class AutoTuneImpl:
    """What @autotune returns: call it like the factory to get the tuned kernel."""

    def __init__(self, jit_impl, settings: tuner.Settings, declared_at=None):
        if isinstance(jit_impl, (AutoTuneImpl, EagerTuning)):
            raise TileError("@autotune is applied twice to the same factory", declared_at)
        if not isinstance(jit_impl, JITImpl):
            what = getattr(jit_impl, "__name__", type(jit_impl).__name__)
            raise TileError(f"@autotune must be stacked above @tilecraft.jit(...), which "
                            f"compiles the candidates; {what} is not a jit factory (write "
                            "@tilecraft.autotune(...) on the line above @tilecraft.jit(...))",
                            declared_at)
        self.jit_impl = jit_impl
        self.factory = jit_impl.factory   # the plain function, as carver's underlying() expects
        self.settings = settings
        self.declared_at = declared_at    # the @autotune line: configuration errors point there
        self.result: AutotuneResult | None = None
        self._memory: dict = {}
        self.__name__ = getattr(self.factory, "__name__", "factory")
        self.__qualname__ = getattr(self.factory, "__qualname__", self.__name__)
        self.__module__ = getattr(self.factory, "__module__", None)
        self.__doc__ = getattr(self.factory, "__doc__", None)
        self.__wrapped__ = jit_impl       # inspect.signature shows the factory's parameters
        configs = settings.configs
        self._configs = None
        if configs is None:
            self._tunables = space.recommended_tunables(self.factory)
            if not self._tunables:
                raise TileError(f"autotune: configs=None asks the cost model for candidates, but "
                                f"{self.__name__} takes none of the parameters it tunes "
                                "(block_M, block_N, block_K, block_H, num_stages, threads); "
                                "give configs=", declared_at)
        elif not callable(configs):
            self._configs = space.normalize_configs(configs, self.factory, declared_at,
                                                    self.__name__)
            self._tunables = {k for c in self._configs for k in c}

    # --- calling --------------------------------------------------------------------
    def __call__(self, *args, **kwargs) -> JITKernel:
        try:
            found = self._run(args, kwargs)
        except TileError as e:
            raise_clean(e)
        return found if isinstance(found, JITKernel) else found.kernel

    def tune(self, *args, **kwargs) -> AutotuneResult:
        """Like calling, but the whole AutotuneResult (an error when every tunable is given,
        since then nothing is tuned)."""
        try:
            found = self._run(args, kwargs)
            if isinstance(found, JITKernel):
                raise TileError(f"autotune {self.__name__}: every tunable parameter is given, "
                                "so there is nothing to tune")
        except TileError as e:
            raise_clean(e)
        return found

    def _run(self, args, kwargs):
        configs, tunables = self._search(args, kwargs)
        problem = space.split_call(self.factory, tunables, args, kwargs, None, self.__name__)
        if tunables and set(problem.pinned) >= tunables:
            return self.jit_impl(*args, **kwargs)
        captured = capture.get_autotune_inputs()
        memo = space.canonical([problem.bound, problem.pinned, captured is not None and
                                capture.describe(captured)])
        result = self._memory.get(memo)
        if result is None:
            if configs is not None:
                configs = space.with_pins(configs, problem.pinned)
            result = tuner.run(self._with_inputs(captured), problem, configs)
            self._memory[memo] = result
        self.result = result
        return result

    def _with_inputs(self, captured):
        """self, or a copy whose candidates run on set_autotune_inputs' tensors."""
        if captured is None:
            return self
        if self.settings.supply_prog is not None:
            raise TileError(f"autotune {self.__name__}: both supply_prog and "
                            "set_autotune_inputs give the inputs; use one", self.declared_at)
        tuned = copy.copy(self)
        tuned.settings = dataclasses.replace(
            self.settings, supply_prog=capture.supply_of(captured, self.__name__))
        return tuned

    def _search(self, args, kwargs):
        """(configs or None for recommended, tunable names) for this call."""
        configs = self.settings.configs
        if configs is None or not callable(configs):
            return self._configs, self._tunables
        # TileLang calls a configs function with the call's arguments.
        produced = configs(*args, **kwargs)
        normalized = space.normalize_configs(produced, self.factory, self.declared_at,
                                             self.__name__)
        return normalized, {k for c in normalized for k in c}

    # --- the last run ---------------------------------------------------------------
    @property
    def best_config(self) -> dict | None:
        return self.result.config if self.result is not None else None

    @property
    def results(self) -> list:
        return self.result.trials if self.result is not None else []

    @property
    def latency(self) -> float | None:
        return self.result.latency if self.result is not None else None

    def __repr__(self) -> str:
        return f"<autotuned {self.__qualname__}>"


def check_tilelang_only(manual_check_prog, cache_input_tensors, span) -> None:
    """TileLang's profile arguments tilecraft's tuner has no setting for."""
    if manual_check_prog is not None:
        raise TileError("autotune: manual_check_prog is not supported yet; give ref_prog (its "
                        "outputs are compared with rtol / atol / max_mismatched_ratio)", span)
    if not isinstance(cache_input_tensors, bool):
        raise TileError(f"autotune: cache_input_tensors takes True or False, got "
                        f"{cache_input_tensors!r}", span)


def _check_settings(s: tuner.Settings, span) -> None:
    def bad(message):
        raise TileError(f"autotune: {message}", span)

    for name, least in (("warmup", 0), ("rep", 1)):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            bad(f"{name} must be an int >= {least}, got {value!r}")
    if s.timeout is not None and (isinstance(s.timeout, bool) or
                                  not isinstance(s.timeout, (int, float)) or s.timeout <= 0):
        bad(f"timeout must be a positive number of seconds or None, got {s.timeout!r}")
    if s.top_fraction is not None and (isinstance(s.top_fraction, bool) or
                                       not isinstance(s.top_fraction, (int, float)) or
                                       not 0 < s.top_fraction <= 1):
        bad(f"top_fraction must be in (0, 1], got {s.top_fraction!r}")
    for name in ("ref_prog", "supply_prog", "measure"):
        value = getattr(s, name)
        if value is not None and not callable(value):
            bad(f"{name} must be callable, got {type(value).__name__}")
    if isinstance(s.early_stop_factor, bool) or not isinstance(s.early_stop_factor, (int, float)) \
            or s.early_stop_factor < 1:
        bad(f"early_stop_factor must be a number >= 1, got {s.early_stop_factor!r}")
    if s.max_workers is not None and (not isinstance(s.max_workers, int) or s.max_workers < 1):
        bad(f"max_workers must be a positive int, got {s.max_workers!r}")
    if s.gpus is not None and not (
            (isinstance(s.gpus, int) and not isinstance(s.gpus, bool) and s.gpus >= 1) or
            (isinstance(s.gpus, tuple) and s.gpus and len(set(s.gpus)) == len(s.gpus) and
             all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in s.gpus))):
        bad(f"gpus must be a number of GPUs (1 or more) or a list of distinct device ordinals, "
            f"got {s.gpus!r}")
    if s.cost_target is not None:
        from ..target import get_target
        try:
            get_target(s.cost_target)
        except ValueError as e:
            bad(f"cost_target: {e}")


def autotune(func=None, *, configs=None, warmup: int = 25, rep: int = 100,
             timeout: float | None = 100.0, top_fraction: float | None = None, ref_prog=None,
             supply_prog=None, supply_type=None, rtol: float = 1e-2, atol: float = 1e-2,
             max_mismatched_ratio: float = 0.01, skip_check: bool = False, cache: bool = True,
             measure=None, max_workers: int | None = None, cost_target: str | None = None,
             verbose: bool = True, manual_check_prog=None, cache_input_tensors: bool = False,
             early_stop: bool = False, early_stop_factor: float = 2.0, gpus=None):
    """Tune a @tilecraft.jit factory's parameters by measuring candidate configurations.

    configs: a list of dicts {parameter: value}, a dict {parameter: [values]} (every
      combination), a callable taking the call's arguments and returning either, or None to
      let the cost model propose legal tile configurations (tilecraft.carver).
    warmup, rep: untimed and timed runs of each timing that decides (run counts). With the
      default timer every candidate is first screened with at most 2 and 10 runs; the four
      fastest are then timed with warmup / rep in three alternating rounds, and judged by
      their median. A custom measure= times each candidate once with warmup / rep.
    timeout: seconds each candidate's compilation may take (None: no limit).
    top_fraction: measure only this fraction of the candidates, those the cost model predicts
      fastest (at least one). Default: all given configs; 5% of recommended ones.
    ref_prog: a function of the inputs returning the expected outputs; candidates whose
      outputs differ (rtol, atol, max_mismatched_ratio) are skipped. skip_check ignores it.
    supply_prog(params) -> inputs, supply_type (a TensorSupplyType): the inputs, otherwise
      random values of each input's shape and dtype.
    cache: keep results on disk (per kernel, problem, dtypes and GPU); TILECRAFT_DISABLE_CACHE
      also turns it off.
    measure(kernel, inputs, *, warmup, rep, config) -> milliseconds replaces the timer.
    max_workers: compile processes (default: one per CPU). cost_target: the cost model's GPU
      ("h100", "a100", ...; default: the one tuned on). verbose: progress bar and final table.
    cache_input_tensors: every candidate runs on the same inputs here, whichever is given.
    early_stop, early_stop_factor: candidates the screening finds more than early_stop_factor
      times slower than the fastest are not timed in full (TileLang's early stop).
    gpus: the GPUs that measure: every one of the tuned GPU's model (None, the default;
      TILECRAFT_AUTOTUNE_GPUS caps how many), a count, or a list of device ordinals.
    manual_check_prog (TileLang's custom comparison) is not supported yet: an error.
    """
    span = caller_span()
    try:
        check_tilelang_only(manual_check_prog, cache_input_tensors, span)
    except TileError as e:
        raise_clean(e)
    settings = tuner.Settings(configs, warmup, rep, timeout, top_fraction, ref_prog, supply_prog,
                              supply_type, rtol, atol, max_mismatched_ratio, skip_check, cache,
                              measure, max_workers, cost_target, verbose, bool(early_stop),
                              early_stop_factor, tuple(gpus) if isinstance(gpus, list) else gpus)
    try:
        _check_settings(settings, span)
        if configs is not None and not callable(configs) and not isinstance(
                configs, (list, tuple, dict)):
            raise TileError("autotune: configs must be a list of dicts {parameter: value}, a dict "
                            "{parameter: [values]} or a callable returning one; got "
                            f"{type(configs).__name__}", span)
    except TileError as e:
        raise_clean(e)

    def wrap(target):
        try:
            if isinstance(target, EagerJIT):
                if configs is not None and not callable(configs):   # checked where written
                    space.normalize_configs(configs, target.func, span, target.__name__)
                return EagerTuning(target, settings, span, AutoTuneImpl)
            return AutoTuneImpl(target, settings, span)
        except TileError as e:
            raise_clean(e)

    return wrap(func) if func is not None else wrap
