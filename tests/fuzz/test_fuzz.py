"""A fixed slice of the differential fuzzer, and checks that its judgement can fail.

Every program kind runs a few seeds on the interpreter and both emulators, a few more on the
interpreter alone, and one on nvcc for sm_80 and sm_90a (skipped without nvcc). A known
failure (runner.KNOWN_FAILURES) makes its test an expected failure, not a silent pass.
`python3 -m tests.fuzz --n ...` runs as many programs as one likes.
"""
import dataclasses
import re

import pytest

from .__main__ import main as fuzz_main
from .generator import KIND_NAMES, generate
from .render import render
from .runner import COMPILE_TARGETS, RUN_TARGETS, describe, has_nvcc, run_program, run_source
from .shrink import minimize
from .spec import Elementwise, Step

# Seeds chosen to span each kind's variety within CI's time: (kind, seed) on every run target.
EMULATED = [(kind, seed) for kind in KIND_NAMES for seed in range(7)]
INTERPRETED = [(kind, seed) for kind in KIND_NAMES for seed in range(7, 47)]
COMPILED = [(kind, seed) for kind in KIND_NAMES for seed in (0, 1, 2)]


def _judge(spec, outcomes):
    failed = [o for o in outcomes if o.status == "fail"]
    assert not failed, "\n".join(describe(spec, o) for o in failed)
    known = [o for o in outcomes if o.status == "xfail"]
    if known:
        pytest.xfail("; ".join(f"{o.target}: {o.cause}" for o in known))


@pytest.mark.parametrize("kind, seed", EMULATED, ids=[f"{k}-{s}" for k, s in EMULATED])
def test_program_agrees_with_reference_on_interpreter_and_emulators(kind, seed):
    spec = generate(kind, seed)
    _judge(spec, run_program(spec, RUN_TARGETS))


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_programs_agree_with_reference_on_interpreter(kind):
    failures = []
    for k, seed in INTERPRETED:
        if k == kind:
            spec = generate(kind, seed)
            failures += [describe(spec, o, seed) for o in run_program(spec, ("interp",))
                         if o.failed]
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("kind, seed", COMPILED, ids=[f"{k}-{s}" for k, s in COMPILED])
def test_program_compiles_with_nvcc(kind, seed):
    spec = generate(kind, seed)
    _judge(spec, run_program(spec, COMPILE_TARGETS))


def test_a_seed_names_one_program():
    for kind in KIND_NAMES:
        assert render(generate(kind, 7)) == render(generate(kind, 7))
    assert len({render(generate("gemm", s)) for s in range(10)}) == 10


# --- the judgement catches what it should --------------------------------------------------
def _chain():
    return Elementwise(((20, 24),), 8, 16, 64, "float32", "float32", "float32", "float32",
                       "fragment", False, (Step("shift", 0.25), Step("mul_w"), Step("exp")))


def test_a_wrong_constant_is_a_mismatch():
    spec = _chain()
    source = render(spec)
    assert "+ 0.25" in source
    outcomes = run_source(spec, source.replace("+ 0.25", "+ 0.2501"), ("interp",))
    assert [(o.status, o.category) for o in outcomes] == [("fail", "mismatch")]


def test_an_unwritten_output_is_caught_by_its_poison():
    spec = _chain()
    source = render(spec)
    # store only the tile's first column: the rest of Y keeps the NaN it was filled with
    partial = re.sub(r"T\.copy\(x, Y\[(.*)\]\)", r"T.copy(x[0:8, 0:1], Y[\1])", source)
    assert partial != source
    outcome, = run_source(spec, partial, ("interp",))
    assert outcome.status == "fail" and "want" in outcome.detail and "got nan" in outcome.detail


def test_a_program_that_does_not_build_fails_on_every_target():
    spec = _chain()
    outcomes = run_source(spec, render(spec).replace("T.exp(", "T.expp("), ("interp", "emulator"))
    assert [o.status for o in outcomes] == ["fail", "fail"]


def test_minimize_keeps_only_what_the_failure_needs():
    spec = dataclasses.replace(generate("elementwise", 5), steps=(
        Step("shift", 0.25), Step("exp"), Step("tanh", new_loop=True), Step("neg")),
        sizes=((37, 50),), staging="shared")

    def needs_tanh_and_rows(s):
        return any(step.op == "tanh" for step in s.steps) and s.sizes[0][0] >= 9

    small = minimize(spec, needs_tanh_and_rows)
    assert [step.op for step in small.steps] == ["tanh"]
    assert small.steps[0].new_loop is False
    assert small.sizes == ((9, 1),) and small.staging == "fragment"
    assert needs_tanh_and_rows(small)


def test_the_command_line_counts_programs_per_kind_and_target(capsys):
    assert fuzz_main(["--n", "3", "--seed", "4", "--kinds", "copy,cumsum",
                      "--targets", "interp"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"copy\s+2p", out) and re.search(r"cumsum\s+1p", out)
    assert "3 programs, 0 failure(s)" in out
