"""What one autotuned call searches: the call's arguments split into the problem (the arguments
the caller gives and the tuner never changes) and the tunable parameters, the candidate
configurations, and their pruning by the cost model's predicted time.

A configuration is a dict {parameter: value} of the factory's keyword parameters. The caller
may pin some tunables by passing them; a pinned value overrides that key in every candidate,
so the search runs over the rest (all pinned: no search at all).
"""
from __future__ import annotations

import difflib
import inspect
import itertools
import json
import math
from dataclasses import dataclass, field

from ..carver.recommend import preference
from ..errors import TileError

# Recommended candidates are many (every legal tile shape); without an explicit fraction the
# tuner measures this share of them, the cost model's best.
RECOMMENDED_FRACTION = 0.05


@dataclass
class Problem:
    """A call of the tuned factory with its tunables taken out.

    args / kwargs: what is passed on to the factory besides a configuration; pinned: the
    tunables the caller fixed; bound: every non-tunable parameter by name, defaults included,
    which is what identifies the problem (shapes, dtypes, flags) in cache keys."""
    args: tuple
    kwargs: dict
    pinned: dict
    bound: dict = field(default_factory=dict)

    def call_kwargs(self, config: dict) -> dict:
        """The factory's keyword arguments for a configuration (its own pass configs apart)."""
        return {**self.kwargs, **factory_config(config)}

    def describe(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.bound.items())


# The key of a configuration that holds pass configs of its own (TileLang's per-config form):
# they are compiled with, not passed to the factory.
PASS_CONFIGS = "pass_configs"


def factory_config(config: dict) -> dict:
    """A configuration's factory keywords: all but its own pass configs."""
    return {k: v for k, v in config.items() if k != PASS_CONFIGS} if PASS_CONFIGS in config \
        else config


def own_pass_configs(config: dict) -> dict:
    """The pass configs a configuration brings (empty for most)."""
    return dict(config.get(PASS_CONFIGS) or {})


def canonical(value) -> str:
    """A stable text form of a configuration or argument set, for keys and comparisons."""
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except TypeError:  # keys JSON cannot order (e.g. mixed types in an argument's dict)
        return repr(value)


def _parameters(fn) -> tuple[list, bool]:
    sig = inspect.signature(fn)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    return list(sig.parameters.values()), takes_any


def normalize_configs(configs, fn, span, name: str) -> list[dict]:
    """configs as a non-empty list of dicts whose keys are keyword parameters of fn.

    Accepts a list (or tuple) of dicts, or a dict {parameter: [values]} meaning every
    combination. Anything else, an empty search, or a key fn does not take is a TileError at
    `span` (the @autotune line)."""
    if isinstance(configs, dict):
        names = list(configs)
        for key, values in configs.items():
            if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
                raise TileError(f"autotune: configs[{key!r}] must be a list of values to try, "
                                f"got {values!r}", span)
        configs = [dict(zip(names, combo))
                   for combo in itertools.product(*(list(configs[k]) for k in names))]
    if not isinstance(configs, (list, tuple)):
        raise TileError("autotune: configs must be a list of dicts {parameter: value}, a dict "
                        f"{{parameter: [values]}} or a callable returning one; got "
                        f"{type(configs).__name__}", span)
    configs = list(configs)
    if not configs:
        raise TileError(f"autotune: configs for {name} is empty; give at least one "
                        "configuration, or configs=None to let the cost model propose them", span)
    params, takes_any = _parameters(fn)
    keyword_ok = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                        inspect.Parameter.KEYWORD_ONLY)}
    for i, config in enumerate(configs):
        if not isinstance(config, dict):
            raise TileError(f"autotune: config {i} of {name} must be a dict {{parameter: value}}, "
                            f"got {type(config).__name__}", span)
        for key in config:
            if not isinstance(key, str):
                raise TileError(f"autotune: config {i} of {name} has the key {key!r}; keys are "
                                "parameter names", span)
            if key == PASS_CONFIGS:   # compile options, even where the factory has the name
                _check_own_pass_configs(config[key], i, name, span)
                continue
            if key not in keyword_ok and not takes_any:
                known = ", ".join(p.name for p in params)
                close = difflib.get_close_matches(key, sorted(keyword_ok), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise TileError(f"autotune: config {i} sets '{key}', which is not a keyword "
                                f"parameter of {name}({known}){hint}", span)
    return configs


def _check_own_pass_configs(configs, i: int, name: str, span) -> None:
    from ..pass_config import check_pass_configs
    try:
        check_pass_configs(configs)
    except TileError as e:
        raise TileError(f"autotune: config {i} of {name}: {e.message}", span) from None


def _flatten(bound, params) -> dict:
    """bound.arguments with a **kwargs parameter's entries lifted to the top level."""
    flat = {}
    for key, value in bound.arguments.items():
        if params[key].kind is inspect.Parameter.VAR_KEYWORD:
            flat.update(value)
        else:
            flat[key] = value
    return flat


def split_call(fn, tunables: set, args: tuple, kwargs: dict, span, name: str) -> Problem:
    """Separate a call's arguments into the problem and the pinned tunables.

    Leading positional arguments stay positional; an argument given positionally after a
    tunable one is passed on by name, so a configuration can always be added as keywords."""
    sig = inspect.signature(fn)
    try:
        bound = sig.bind_partial(*args, **kwargs)
    except TypeError as e:
        raise TileError(f"{name}: {e}", span) from None
    params = sig.parameters
    lead, consumed = 0, set()
    for p in params.values():
        if lead >= len(args) or p.name in tunables:
            break
        consumed.add(p.name)
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            lead = len(args)
            break
        lead += 1
    flat = _flatten(bound, params)
    pinned = {k: v for k, v in flat.items() if k in tunables}
    rest = {}
    for key, value in flat.items():
        if key in tunables or key in consumed:
            continue
        if key in params and params[key].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                  inspect.Parameter.VAR_POSITIONAL):
            raise TileError(f"{name}: the positional argument {key} comes after a tunable "
                            "argument; pass the tunable by keyword", span)
        rest[key] = value
    bound.apply_defaults()
    problem_values = {k: v for k, v in _flatten(bound, params).items() if k not in tunables}
    return Problem(tuple(args[:lead]), rest, pinned, problem_values)


def with_pins(configs: list[dict], pinned: dict) -> list[dict]:
    """Every configuration with the pinned values written over it, duplicates dropped (the
    first occurrence keeps its place)."""
    seen, out = set(), []
    for config in configs:
        merged = {**config, **pinned}
        key = canonical(merged)
        if key not in seen:
            seen.add(key)
            out.append(merged)
    return out


@dataclass(frozen=True)
class Prediction:
    """The cost model's verdict on one configuration: its time (inf when illegal, with the
    reason) and the resources carver's ranking breaks ties on."""
    time: float
    reason: str = ""
    smem: int = 0
    regs: int = 0
    stages: int = 0
    zero_fill: float = 0.0

    @classmethod
    def of(cls, cand, config: dict) -> "Prediction":
        """The prediction of a legal carver Candidate built from config."""
        res = cand.cost.resources
        return cls(cand.time, "", res.smem_per_block, res.regs_per_thread,
                   config.get("num_stages") or 0, cand.cost.zero_fill_bytes)


def predict_one(fn, args: tuple, kwargs: dict, config: dict, target: str,
                timeout: float | None = None) -> Prediction:
    """Build one configuration and predict it, within the compile time limit."""
    from ..carver.recommend import evaluate
    from .workers import CompileTimeout, deadline
    try:
        with deadline(timeout):
            cand = evaluate(fn, args, {**kwargs, **factory_config(config)}, target)
    except CompileTimeout as e:
        return Prediction(math.inf, f"timeout: {e}")
    except Exception as e:  # noqa: BLE001 - the model only ranks; the compiler has the last word
        return Prediction(math.inf, f"{type(e).__name__}: {e}".splitlines()[0])
    if not cand.ok:
        return Prediction(math.inf, cand.reason or "illegal")
    return Prediction.of(cand, config)


def predict_best(fn, problem: Problem, configs: list, target: str,
                 fraction: float) -> list[Prediction]:
    """Predictions for a recommended search that is pruned to `fraction`: the best fraction of
    the configurations the model cannot reject before planning are predicted exactly as
    predict_one does, the rest get a lower bound on their time (carver.search), which ranks
    them after every one of those."""
    from ..carver.search import best_candidates
    full = [problem.call_kwargs(c) for c in configs]
    cands = best_candidates(fn, problem.args, full, target, fraction=fraction)
    out = []
    for config, cand in zip(configs, cands):
        if cand.ok:
            out.append(Prediction.of(cand, config))
        elif cand.bound is not None:
            out.append(Prediction(cand.bound, "", stages=config.get("num_stages") or 0))
        else:
            out.append(Prediction(math.inf, cand.reason or "illegal"))
    return out


def grid(space_: dict) -> list[dict]:
    """Every combination of a {parameter: [values]} space, in product order."""
    names = list(space_)
    return [dict(zip(names, values)) for values in itertools.product(*space_.values())]


def rank_legal(predictions: list[Prediction], target: str, name: str, problem: Problem,
               span) -> list[int]:
    """Indices of the legal configurations in carver's preference order (fastest predicted
    first, ties to less zero fill past the tensors' edges, deeper pipelines, then less shared
    memory and fewer registers); a TileError when none is legal."""
    legal = [i for i, p in enumerate(predictions) if math.isfinite(p.time)]
    if not legal:
        reasons = sorted({p.reason for p in predictions if p.reason})[:3]
        detail = f" ({'; '.join(reasons)})" if reasons else ""
        raise TileError(f"autotune: the cost model found no legal configuration of {name} for "
                        f"{problem.describe()} on {target}{detail}; give configs=", span)
    legal.sort(key=lambda i: preference(predictions[i].time, predictions[i].stages,
                                        predictions[i].smem, predictions[i].regs,
                                        predictions[i].zero_fill) + (i,))
    return legal


def recommended_tunables(fn) -> set:
    from ..carver.recommend import default_space
    return set(default_space(fn))


def recommended_space(fn, problem: Problem) -> dict:
    """The search the recommender would make for the problem, as data (for cache keys)."""
    from ..carver.recommend import default_space
    return default_space(fn, problem.args, problem.call_kwargs(problem.pinned))


def keep_count(total: int, fraction: float) -> int:
    """How many candidates the top `fraction` is: rounded up, at least one."""
    return max(1, min(total, math.ceil(fraction * total - 1e-9)))


def prune(times: list[float], fraction: float) -> list[int]:
    """Indices of the candidates to measure, fastest predicted first: the top `fraction`
    (rounded up, at least one). Candidates the model rejects (time inf) rank last, in their
    given order, so they are measured only when the fraction reaches them."""
    order = sorted(range(len(times)), key=lambda i: (times[i], i))
    return order[:keep_count(len(times), fraction)]
