"""Delta debugging over a spec: the smallest program that still fails the same way.

A candidate is the spec with one thing made simpler: a member of a tuple field dropped (an
element-wise step, a reduction, a copy stage, a launch), a size made smaller, a field set to
one of its `simpler` values (spec.py). A candidate is kept when the interpreter still agrees
with the reference (so it is still a valid program with a trusted answer) and the failing
target still fails the same way (`signature`); shrinking restarts from each kept candidate
until none is.
"""
from __future__ import annotations

import dataclasses
import re

from .runner import run_program


def normalized(spec):
    """A spec made consistent after an edit: static programs have one launch; element reads
    are numbered from 0 in order."""
    if not spec.symbolic and len(spec.sizes) > 1:
        spec = dataclasses.replace(spec, sizes=spec.sizes[:1])
    if spec.kind == "element_access":
        accesses, reads = [], 0
        for a in spec.accesses:
            if a[0] == "read":
                a, reads = (*a[:3], reads), reads + 1
            accesses.append(a)
        spec = dataclasses.replace(spec, accesses=tuple(accesses))
    return spec


def _smaller_sizes(sizes: tuple):
    if len(sizes) > 1:
        for n in range(len(sizes)):
            yield sizes[:n] + sizes[n + 1:]
    for n, launch in enumerate(sizes):
        for d, value in enumerate(launch):
            for smaller in sorted({1, value // 2, value - 1}):
                if 0 < smaller < value:
                    changed = launch[:d] + (smaller,) + launch[d + 1:]
                    yield sizes[:n] + (changed,) + sizes[n + 1:]


def candidates(spec):
    """Every spec one simplification away from `spec`."""
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        options = []
        if f.name == "sizes":
            options = list(_smaller_sizes(value))
        elif "simpler" in f.metadata:
            choices = f.metadata["simpler"]
            rank = choices.index(value) if value in choices else len(choices)
            options = [c for c in choices[:rank] if c != value]
        elif isinstance(value, tuple):
            options = [value[:n] + value[n + 1:] for n in range(len(value))]
            for n, member in enumerate(value):
                if dataclasses.is_dataclass(member):
                    options += [value[:n] + (m,) + value[n + 1:] for m in candidates(member)]
        elif dataclasses.is_dataclass(value):
            options = list(candidates(value))
        for option in options:
            yield dataclasses.replace(spec, **{f.name: option})


def signature(outcome) -> str:
    """What makes two failures the same: the category and, for an error or a checker report,
    the start of its message with the numbers left out (a shrunk program has other sizes)."""
    if outcome.category == "mismatch":
        return f"mismatch {outcome.detail.split(':')[0]}"
    text = outcome.detail.split("first: ")[-1]
    return f"{outcome.category} {re.sub(r'[0-9]+', '#', text)[:60]}"


def _fails_alike(spec, target: str, wanted: str) -> bool:
    outcomes = {o.target: o for o in run_program(spec, ("interp", target))}
    failed = outcomes[target]
    return (outcomes["interp"].status == "pass" and failed.status in ("fail", "xfail")
            and signature(failed) == wanted)


def minimize(spec, still_fails, budget: int = 300):
    """The smallest spec found, within `budget` tries, for which still_fails(spec) holds."""
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for candidate in candidates(spec):
            candidate = normalized(candidate)
            if candidate == spec:
                continue
            tries += 1
            if still_fails(candidate):
                spec, progress = candidate, True
                break
            if tries >= budget:
                break
    return spec


def shrink(spec, outcome, budget: int = 300):
    """The smallest spec found that fails on outcome's target as outcome did (see minimize and
    signature)."""
    wanted = signature(outcome)
    return minimize(spec, lambda s: _fails_alike(s, outcome.target, wanted), budget)
