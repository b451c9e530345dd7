"""Runs a fuzz program on every target and judges it against the numpy reference.

Targets: the interpreter, both emulators (whose checker must report nothing) and nvcc for
sm_80 and sm_90a (compile only; skipped where nvcc is absent). Inputs are random and never
zero; outputs are poisoned (NaN, or 0x7f bytes for integers) before each launch, so an
element a program fails to write shows up. A program with several launch sizes (symbolic
sizes) runs each size on the same compiled kernel.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import warnings
import zlib
from dataclasses import dataclass

import numpy as np

import tilecraft
from tilecraft.errors import TileInternalError

from .numerics import NUMPY, POISON_INT, mismatches
from .reference import expected
from .render import build, render
from .spec import dim_value, label, launch_sizes, shape, tensors

RUN_TARGETS = ("interp", "emulator", "emulator:sm_90a")
COMPILE_TARGETS = ("sm_80", "sm_90a")
TARGETS = RUN_TARGETS + COMPILE_TARGETS

# Failures whose cause is known: (kind, targets, what the failure says (a regex; None: any),
# the cause). Such a program failing there is an expected failure; passing there, an
# unexpected pass (not an error), so an entry can go once its fix lands.
KNOWN_FAILURES: tuple = ()   # none known now


def known_cause(spec, outcome) -> str | None:
    for kind, targets, says, cause in KNOWN_FAILURES:
        if spec.kind == kind and outcome.target in targets and (
                says is None or re.search(says, outcome.detail)):
            return cause
    return None


@dataclass(frozen=True)
class Outcome:
    target: str
    status: str          # pass, fail, xfail (known failure), xpass, skip
    category: str = ""   # mismatch, report (emulator checker), refused (TileError), internal
    detail: str = ""
    cause: str = ""      # of an expected failure (KNOWN_FAILURES)

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def has_nvcc() -> bool:
    from tilecraft.backends.cuda.runtime import has_nvcc as found
    return found()


def _random(rng: np.random.Generator, shape: tuple, dtype: str, bound=None) -> np.ndarray:
    if bound is not None:
        return rng.integers(0, bound, size=shape).astype(np.int32)
    if dtype.startswith("int"):
        values = rng.integers(1, 9, size=shape) * rng.choice((-1, 1), size=shape)
        return values.astype(NUMPY[dtype])
    values = rng.uniform(0.25, 2.0, size=shape) * rng.choice((-1.0, 1.0), size=shape)
    return values.astype(NUMPY[dtype])


def poisoned(shape: tuple, dtype: str) -> np.ndarray:
    if dtype.startswith("int"):  # every byte 0x7f (POISON_INT for an int32)
        return np.full(shape, POISON_INT, np.int64).astype(NUMPY[dtype])
    return np.full(shape, np.nan, NUMPY[dtype])


def launch_inputs(spec, source: str) -> list[dict]:
    """The inputs of each launch, by parameter name; seeded by the program's text."""
    rng = np.random.default_rng(zlib.crc32(source.encode()))
    launches = []
    for sizes in launch_sizes(spec):
        arrays = {t.name: _random(rng, shape(t, sizes), t.dtype,
                                  None if t.bound is None else dim_value(t.bound, sizes))
                  for t in tensors(spec) if t.role != "out"}
        if spec.kind == "pipelined" and spec.dynamic_trips:
            arrays["count"] = int(rng.integers(0, 6))
        launches.append(arrays)
    return launches


def arguments(spec, sizes: dict, inputs: dict) -> tuple[list, dict]:
    """The call's arguments in parameter order, and the arrays the call writes by name."""
    args, written = [], {}
    for t in tensors(spec):
        a = inputs[t.name].copy() if t.role != "out" else poisoned(shape(t, sizes), t.dtype)
        if t.role != "in":
            written[t.name] = a
        args.append(a)
    if spec.kind == "pipelined" and spec.dynamic_trips:
        args.insert(1, inputs["count"])
    return args, written


@contextlib.contextmanager
def _no_disk_cache():
    """nvcc must run for every program (a cached cubin would skip the compile under test)."""
    saved = os.environ.get("TILECRAFT_DISABLE_CACHE")
    os.environ["TILECRAFT_DISABLE_CACHE"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TILECRAFT_DISABLE_CACHE"]
        else:
            os.environ["TILECRAFT_DISABLE_CACHE"] = saved


def _error_outcome(target: str, e: BaseException) -> Outcome:
    from tilecraft.backends.cuda.emulator import EmulatorError
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    if isinstance(e, EmulatorError):
        return Outcome(target, "fail", "report", first)
    if isinstance(e, TileInternalError) or not isinstance(e, tilecraft.TileError):
        return Outcome(target, "fail", "internal", f"{type(e).__name__}: {first}")
    return Outcome(target, "fail", "refused", first)


def _run_on(target: str, spec, program, launches, expectations) -> Outcome:
    with warnings.catch_warnings():
        # the compiler's notes (a copy that cannot carry its L2 hint, a TMA add that runs as
        # element-wise atomics) are not findings
        warnings.simplefilter("ignore", UserWarning)
        return _judge_run(target, spec, program, launches, expectations)


def _judge_run(target: str, spec, program, launches, expectations) -> Outcome:
    func, configs = program
    try:
        if target in COMPILE_TARGETS:
            if not has_nvcc():
                return Outcome(target, "skip", detail="nvcc is not installed")
            with _no_disk_cache():
                tilecraft.compile(func, target=target, pass_configs=configs)
            return Outcome(target, "pass")
        kernel = tilecraft.compile(func, target=target, pass_configs=configs)
        for sizes, inputs, expect in zip(launch_sizes(spec), launches, expectations):
            args, written = arguments(spec, sizes, inputs)
            kernel(*args)  # the emulator raises EmulatorError when its checker reports
            for name, want in expect.items():
                problem = mismatches(want, written[name])
                if problem:
                    where = f" at sizes {sizes}" if len(launches) > 1 else ""
                    return Outcome(target, "fail", "mismatch", f"{name}{where}: {problem}")
        return Outcome(target, "pass")
    except Exception as e:  # noqa: BLE001 - every failure of a valid program is a finding
        return _error_outcome(target, e)


def _judged(spec, outcome: Outcome) -> Outcome:
    if outcome.failed:
        cause = known_cause(spec, outcome)
        return outcome if cause is None else dataclasses.replace(outcome, status="xfail",
                                                                 cause=cause)
    if outcome.status == "pass" and any(spec.kind == kind and outcome.target in targets and
                                        says is None for kind, targets, says, _ in KNOWN_FAILURES):
        return Outcome(outcome.target, "xpass")
    return outcome


def run_program(spec, targets=TARGETS) -> list[Outcome]:
    """One Outcome per target; a program the frontend cannot build fails on every target."""
    return run_source(spec, render(spec), targets)


def run_source(spec, source: str, targets=TARGETS) -> list[Outcome]:
    """`source` run and judged as the program `spec` describes (run_program renders it; a
    test may hand in an altered text to see the judgement catch it)."""
    try:
        func, configs = build(source)
    except Exception as e:  # noqa: BLE001
        failed = _error_outcome("build", e)
        return [Outcome(t, "fail", failed.category, failed.detail) for t in targets]
    launches = launch_inputs(spec, source)
    expectations = [expected(spec, inputs) for inputs in launches]
    return [_judged(spec, _run_on(t, spec, (func, configs), launches, expectations))
            for t in targets]


def describe(spec, outcome: Outcome, seed=None) -> str:
    """A failure as a reader needs it: where, what, and the program's source."""
    head = f"{label(spec)}" + (f" seed {seed}" if seed is not None else "")
    return (f"{head} on {outcome.target}: {outcome.category}: {outcome.detail}\n"
            f"{render(spec)}")
