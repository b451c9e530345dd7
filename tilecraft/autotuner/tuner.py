"""One tuning run, from candidates to the best kernel:

    candidates (given, or proposed by the cost model) -> tuning cache? -> prune to the top
    fraction by predicted time -> compile (worker processes, a limit each) -> check against the
    reference and measure -> the fastest correct one (cached, shown in a table).

On a host with several GPUs of the tuned one's model, each candidate is checked and measured
on one of them as soon as it is built, in a process per GPU, and the fastest few are confirmed
on all of them (gpus.py); on one GPU, this process measures them once they are all built.

A candidate that fails to compile, runs out of time, raises when run or gives a wrong result
is logged in one line and skipped; only when every candidate fails is that an error.
"""
from __future__ import annotations

import sys
import time
from concurrent.futures import as_completed
from dataclasses import dataclass

from .. import knobs, placement
from ..errors import TileError
from . import gpus, space, store, workers
from . import measure as measuring
from .results import (OK, PRUNED, AutotuneResult, Progress, Trial, config_text, log_skip,
                      logger, one_line)


@dataclass(frozen=True)
class Settings:
    """The @autotune arguments (validated by autotune())."""
    configs: object = None
    warmup: int = 25
    rep: int = 100
    timeout: float | None = 100.0
    top_fraction: float | None = None
    ref_prog: object = None
    supply_prog: object = None
    supply_type: object = None
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    cache: bool = True
    measure: object = None
    max_workers: int | None = None
    cost_target: str | None = None
    verbose: bool = True
    early_stop: bool = False      # skip the full timing of clearly slower candidates
    early_stop_factor: float = 2.0
    gpus: object = None           # GPUs that measure: None (all of the model), a count, ordinals

    def key_options(self, jit_impl) -> dict:
        """What besides the kernel and the problem decides which candidate wins."""
        return {"out_idx": jit_impl.out_idx,
                "pass_configs": {str(k): v for k, v in jit_impl.options["pass_configs"].items()},
                "ref_prog": store.callable_name(self.ref_prog) if not self.skip_check else None,
                "supply_prog": store.callable_name(self.supply_prog),
                "supply_type": None if self.supply_type is None else int(self.supply_type),
                "measure": store.callable_name(self.measure), "warmup": self.warmup,
                "rep": self.rep, "tolerance": [self.rtol, self.atol, self.max_mismatched_ratio],
                "early_stop": self.early_stop_factor if self.early_stop else None}


def run(tuned, problem: space.Problem, configs: list | None) -> AutotuneResult:
    """Tune `tuned` (an AutoTuneImpl) for one problem over configs (None: recommended)."""
    s, fn, name, span = tuned.settings, tuned.factory, tuned.__name__, tuned.declared_at
    backend, arch = placement.resolve(tuned.jit_impl.target)
    device = measuring.device_name(backend)
    if backend == "cuda" and s.measure is None:
        here = measuring.device_arch()
        if here != arch:
            where = f"this GPU is {here}" if here else "there is no GPU here"
            raise TileError(f"autotune {name}: measuring candidates compiled for {arch} needs "
                            f"such a GPU, and {where}; tune with target='interp' to exercise "
                            "tuning on the CPU, or pass measure=", span)
    cost_target = s.cost_target or placement.machine_target(tuned.jit_impl.target)
    if configs is None:
        fraction = s.top_fraction if s.top_fraction is not None else space.RECOMMENDED_FRACTION
        grid = space.recommended_space(fn, problem)
        search = {"recommended": grid, "cost_target": cost_target}
        candidates = space.with_pins(space.grid(grid), problem.pinned)
    else:
        fraction = s.top_fraction if s.top_fraction is not None else 1.0
        search = candidates = configs

    key = parts = None
    if store.enabled(s.cache):
        parts = store.key_parts(fn, problem, search, fraction, device, backend, arch,
                                _probe(fn, problem, candidates), s.key_options(tuned.jit_impl))
        key = store.make_key(parts)
        cached = _from_cache(tuned, problem, key, candidates, device)
        if cached is not None:
            return cached

    phases, clock = {}, time.perf_counter()
    address = workers.address_of(fn)
    target = arch if backend == "cuda" else backend  # what workers compile for
    with workers.Workers(s.max_workers) as pool, \
            gpus.pool_for(tuned, problem, backend, target, device, address) as on_gpus:
        if backend == "cuda" and address is not None and not knobs.cache_disabled():
            pool.warm(address)  # the workers start while this process predicts
        trials = _candidates(tuned, problem, candidates, configs is None, fraction, cost_target,
                             pool)
        phases["predict"], clock = time.perf_counter() - clock, time.perf_counter()
        kept = [t for t in trials if not t.status]
        found = _on_gpus(tuned, problem, kept, target, pool, on_gpus, phases) \
            if on_gpus is not None else None
        if found is None:
            clock = time.perf_counter()
            kernels = _compile(tuned, problem, kept, backend, arch, pool)
    if found is None:  # measured here, on this process's GPU
        phases["compile"], clock = time.perf_counter() - clock, time.perf_counter()
        inputs = _measure(tuned, [(t, kernels[id(t)]) for t in kept if id(t) in kernels])
        measuring.confirm([t for t in trials if t.ok], s, lambda pairs, rounds: [
            measuring.confirm_round([(kernels[id(t)], t.config) for t in pairs], inputs, s)
            for _ in range(rounds)])
        phases["measure"] = time.perf_counter() - clock
    best, kernel, ref_latency, on = _winner(tuned, problem, trials, found,
                                            None if found else (kernels, inputs))
    result = AutotuneResult(name, problem.describe(), device, best.config, best.latency_ms,
                            trials, kernel, key, False, ref_latency, phases, on)
    if key is not None:
        store.save(key, parts, result)
    return _finish(tuned, result)


def _winner(tuned, problem, trials, found, here) -> tuple:
    """(the fastest correct trial, its kernel, the reference's time or None, GPUs measured on).
    found: _on_gpus's answer, or None when `here` = (kernels, inputs) were measured here."""
    s, name, span = tuned.settings, tuned.__name__, tuned.declared_at
    ok = [t for t in trials if t.ok]
    if not ok:
        raise TileError(_all_failed(name, problem, trials), span)
    best = min(ok, key=lambda t: t.latency_ms)  # ties: the earlier (better predicted) one
    if found is not None:
        kernel, outcome = workers.compile_here(tuned.jit_impl, problem, best.config, s.timeout)
        if kernel is None:
            raise TileError(f"autotune {name}: the best configuration "
                            f"({config_text(best.config)}), built by a compile worker, does "
                            f"not build here: {outcome.message}", span)
        return best, kernel, found[1], found[0]
    kernels, inputs = here
    kernel, ref_latency = kernels[id(best)], None
    if s.ref_prog is not None and s.measure is None:
        ref_latency = measuring.time_reference(kernel, s.ref_prog, inputs, s.warmup, s.rep)
    return best, kernel, ref_latency, 1


def _probe(fn, problem, configs):
    """The prim_func of the first configuration that builds (for the cache key), or None."""
    from ..ir.stmt import PrimFunc
    for config in configs:
        try:
            func = fn(*problem.args, **problem.call_kwargs(config))
        except Exception:  # noqa: BLE001 - a candidate that does not build is not the probe
            continue
        if isinstance(func, PrimFunc):
            return func
    return None


def _from_cache(tuned, problem, key, configs, device):
    record = store.load(key)
    if record is None:
        return None
    trials = store.restore_trials(record, configs)
    best = next((t for t in trials or () if t.ok and space.canonical(t.config) == record["best"]),
                None)
    if best is None:
        return None
    kernel, outcome = workers.compile_here(tuned.jit_impl, problem, best.config,
                                           tuned.settings.timeout)
    if kernel is None:
        logger.warning("autotune %s: the cached best configuration no longer compiles (%s); "
                       "tuning again", tuned.__name__, outcome.message)
        return None
    result = AutotuneResult(tuned.__name__, problem.describe(), device, best.config,
                            record.get("latency_ms", best.latency_ms), trials, kernel, key, True,
                            record.get("ref_latency_ms"))
    return _finish(tuned, result)


def _finish(tuned, result: AutotuneResult) -> AutotuneResult:
    # TileLang's tuned kernels carry these; callers read the winner off the kernel.
    kernel = result.kernel
    kernel.config = dict(result.config)
    kernel.latency = result.latency
    kernel.ref_latency = result.ref_latency
    kernel.autotune_result = result
    if tuned.settings.verbose:
        print(result.table(), file=sys.stderr)
    return result


def _candidates(tuned, problem, configs, recommended, fraction, cost_target, pool) -> list:
    """Every candidate as a Trial, the ones to measure first (fastest predicted first), the
    pruned ones after them marked PRUNED. The model is asked only when pruning needs it; of
    a recommended search only the configurations it finds legal are candidates."""
    name, span = tuned.__name__, tuned.declared_at
    trials = [Trial(c) for c in configs]
    if not recommended and fraction >= 1.0:
        return trials
    if recommended and fraction < 1.0 and pool.size < PARALLEL_PREDICTION_CPUS:
        # Only the best fraction is measured: plan just what can reach it (carver.search).
        with Progress(len(configs), f"predict {name}", tuned.settings.verbose) as bar:
            predictions = space.predict_best(tuned.factory, problem, configs, cost_target,
                                             fraction)
            bar.update(len(configs))
    else:
        predictions = _predict(tuned, problem, configs, cost_target, pool)
    for trial, p in zip(trials, predictions):
        trial.predicted_s = p.time
        if p.reason:
            trial.message = f"model: {p.reason}"
    if recommended:
        order = space.rank_legal(predictions, cost_target, name, problem, span)
        trials = [trials[i] for i in order]
    keep = space.prune([t.predicted_s for t in trials], fraction)
    kept = set(keep)
    rest = sorted((i for i in range(len(trials)) if i not in kept),
                  key=lambda i: (trials[i].predicted_s, i))
    for i in keep:
        trials[i].message = ""  # the compiler, not the model, decides about the kept ones
    for i in rest:
        trials[i].status = PRUNED
    if rest:
        logger.info("autotune %s: measuring the %d of %d candidates the cost model (%s) "
                    "predicts fastest", name, len(keep), len(trials), cost_target)
    return [trials[i] for i in keep + rest]


# From this many configurations prediction goes to the worker processes: starting them costs
# about as much as predicting a few dozen configurations here.
PARALLEL_PREDICTION_MIN = 64
# With this many workers a recommended search predicts every configuration exactly in them
# rather than pruning by bounds in this process: on a 16-core host 650 GEMM configurations
# take 3.7 s here (beside the workers' own start) and well under a second spread over them.
PARALLEL_PREDICTION_CPUS = 8


def _predict(tuned, problem, configs, cost_target, pool) -> list:
    s, fn = tuned.settings, tuned.factory
    address = workers.address_of(fn)
    with Progress(len(configs), f"predict {tuned.__name__}", s.verbose) as bar:
        if address is not None and len(configs) >= PARALLEL_PREDICTION_MIN:
            found = pool.predict(address, store.source_hash(fn), problem, configs, cost_target,
                                 s.timeout, on_done=bar.update)
            if found is not None:
                return found
        out = []
        for config in configs:
            out.append(space.predict_one(fn, problem.args, problem.kwargs, config, cost_target,
                                         s.timeout))
            bar.update()
        return out


def _compile_tasks(tuned, problem, trials, arch) -> list:
    """A worker's CompileTask for each trial (the factory must have an address)."""
    s, fn, impl = tuned.settings, tuned.factory, tuned.jit_impl
    address, code_hash = workers.address_of(fn), store.source_hash(fn)
    pass_configs = dict(impl.options["pass_configs"])
    return [workers.CompileTask(i, address[0], address[1], code_hash, problem.args,
                                problem.kwargs, t.config, impl.out_idx, arch, pass_configs,
                                s.timeout)
            for i, t in enumerate(trials)]


def _compile(tuned, problem, trials, backend, arch, pool) -> dict:
    """Compile the trials; {id(trial): kernel} for those that compiled, the others marked."""
    s, fn, impl = tuned.settings, tuned.factory, tuned.jit_impl
    outcomes = [None] * len(trials)
    address = workers.address_of(fn)
    # Workers pay off only where a compile is expensive and its result survives the process:
    # nvcc builds land in the disk cache. The interpreter's "compile" is a check in memory.
    parallel = (backend == "cuda" and len(trials) > 1 and address is not None
                and not knobs.cache_disabled() and not knobs.dump_ir_dir())
    kernels = {}
    with Progress(len(trials), f"compile {tuned.__name__}", s.verbose) as bar:
        if parallel:
            outcomes = pool.compile(_compile_tasks(tuned, problem, trials, arch),
                                    lambda o: bar.update())
            away = [o.message for o in outcomes if o.status == workers.UNAVAILABLE]
            if away:
                logger.info("autotune %s: compiling %d candidate(s) in this process: %s",
                            tuned.__name__, len(away), away[0])
        for trial, outcome in zip(trials, outcomes):
            if outcome is not None and outcome.status not in (OK, workers.UNAVAILABLE):
                trial.status, trial.message = outcome.status, outcome.message
                trial.compile_s = outcome.seconds
                log_skip(tuned.__name__, trial)
                continue
            # After a worker's success this is a load from the disk cache.
            kernel, here = workers.compile_here(impl, problem, trial.config, s.timeout)
            if outcome is None:
                bar.update()
            if outcome is None or outcome.status == workers.UNAVAILABLE:
                outcome = here
            trial.compile_s = outcome.seconds
            if kernel is None:
                trial.status, trial.message = here.status, here.message
                log_skip(tuned.__name__, trial)
            else:
                kernels[id(trial)] = kernel
    return kernels


def _measure(tuned, pairs) -> list | None:
    """Check (when a reference is given) and time each compiled trial; the inputs used."""
    s, name = tuned.settings, tuned.__name__
    inputs = want = None
    with Progress(len(pairs), f"measure {name}", s.verbose) as bar:
        for trial, kernel in pairs:
            if inputs is None:
                inputs, want = measuring.prepare(kernel, s)
            trial.status, trial.latency_ms, trial.message = measuring.screen(
                kernel, inputs, want, s, trial.config)
            if not trial.ok:
                log_skip(name, trial)
            bar.update()
    return inputs


def _on_gpus(tuned, problem, trials, arch, pool, on_gpus, phases) -> tuple | None:
    """Compile the trials in the workers and screen each on the GPUs as soon as it is built,
    then confirm the fastest few there (gpus.py): (GPUs used, the reference's time or None).
    None, with the trials as they were, when the GPUs could not measure them all: the caller
    then compiles and measures here."""
    s, name, clock = tuned.settings, tuned.__name__, time.perf_counter()
    screening, reference, unable = {}, [], []
    with Progress(len(trials), f"compile and measure {name}", s.verbose) as bar:
        def built(outcome):
            if outcome.status != OK:
                bar.update()
                return
            config = trials[outcome.index].config
            try:
                screening[on_gpus.screen(outcome.index, config)] = outcome.index
                if not reference and s.ref_prog is not None and s.measure is None:
                    reference.append(on_gpus.reference(config))
            except Exception as e:  # noqa: BLE001 - a measuring process that could not start
                unable.append(one_line(e))

        outcomes = pool.compile(_compile_tasks(tuned, problem, trials, arch), built)
        phases["compile"], clock = time.perf_counter() - clock, time.perf_counter()
        unable += [o.message for o in outcomes if o.status == workers.UNAVAILABLE]
        if unable:
            return _give_up(name, trials, unable[0])
        for trial, outcome in zip(trials, outcomes):
            trial.compile_s = outcome.seconds
            if outcome.status != OK:
                trial.status, trial.message = outcome.status, outcome.message
                log_skip(name, trial)
        for future in as_completed(screening):
            try:
                got = future.result()
            except Exception as e:  # noqa: BLE001 - a measuring process died
                return _give_up(name, trials, one_line(e))
            if got.status == workers.UNAVAILABLE:
                return _give_up(name, trials, got.message)
            trial = trials[got.index]
            trial.status, trial.latency_ms, trial.message = got.status, got.latency_ms, \
                got.message
            if not trial.ok:
                log_skip(name, trial)
            bar.update()
    try:
        measuring.confirm([t for t in trials if t.ok], s,
                          lambda pairs, rounds: on_gpus.confirm([t.config for t in pairs], rounds),
                          on_gpus.size)
    except Exception as e:  # noqa: BLE001 - as above
        return _give_up(name, trials, one_line(e))
    phases["measure"] = time.perf_counter() - clock
    try:
        ref_latency = reference[0].result() if reference else None
    except Exception:  # noqa: BLE001 - the reference's time is a courtesy, never a failure
        ref_latency = None
    return on_gpus.size, ref_latency


def _give_up(name, trials, why: str) -> None:
    """The GPUs' measurements are dropped: the trials go back to be compiled and measured here."""
    logger.info("autotune %s: measuring on this process's GPU alone: a measuring process "
                "could not do its part (%s)", name, why)
    for t in trials:
        t.status, t.message, t.latency_ms, t.compile_s = "", "", None, None


def _all_failed(name, problem, trials) -> str:
    tried = [t for t in trials if t.status != PRUNED]
    counts: dict = {}
    for t in tried:
        counts[t.status] = counts.get(t.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    first = next((t for t in tried if t.message), None)
    detail = f"; first: {first.status}: {first.message}" if first is not None else ""
    return (f"autotune {name}: none of the {len(tried)} candidate(s) tried for "
            f"{problem.describe()} compiled and ran correctly ({summary}){detail}")
