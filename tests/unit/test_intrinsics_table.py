"""The table of CUDA intrinsics (backends/cuda/intrinsics.py) covers what the compiler writes:
every `tc::` call in the CUDA of the golden corpus and of every example is listed, with the
argument count its IR call has; every listed intrinsic the emulator claims to run has an
implementation there; and no sm_90a-only intrinsic appears in sm_80 code."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda.emulator.intrinsics import resolve
from tilecraft.backends.cuda.intrinsics import HINT_SUFFIX, NAMESPACE, SM90A, TABLE, lookup
from tilecraft.ir.expr import Call
from tilecraft.ir.visitor import walk

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "golden"))
import golden_corpus  # noqa: E402

ARCHS = ("sm_80", "sm_90a")
# A call in CUDA text: the name, template arguments included, right before its "(".
_CALL = re.compile(r"\btc::\w+(?:<[^<>()]*>)?(?=\()")


def _example_funcs(arch):
    spec = importlib.util.spec_from_file_location(
        "compile_kernels", ROOT / "tests" / "toolkit" / "test_compile_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._example_funcs(arch)


def _lower(func, arch):
    return pipelines.cuda(func, arch, 227 * 1024 if arch == "sm_90a" else 163 * 1024)


@pytest.fixture(scope="module")
def compiled():
    """(arch, name, lowered PrimFunc, CUDA text) of every example and golden kernel."""
    out = []
    for arch in ARCHS:
        named = [(f"golden.{n}", f()) for n, f in sorted(golden_corpus.CASES.items())]
        for name, func in named + list(_example_funcs(arch)):
            lowered = _lower(func, arch)
            out.append((arch, name, lowered, emit_cuda(lowered)[0]))
    return out


def test_every_intrinsic_the_code_calls_is_in_the_table(compiled):
    unknown = {(arch, name, call) for arch, name, _, source in compiled
               for call in _CALL.findall(source) if lookup(call) is None}
    assert not unknown, sorted(unknown)


def test_every_intrinsic_call_in_the_ir_has_the_tables_argument_count(compiled):
    wrong = set()
    for arch, name, lowered, _ in compiled:
        for n in walk(lowered.body):
            if isinstance(n, Call) and n.name.startswith(NAMESPACE):
                entry = lookup(n.name)
                if entry is None or entry.arity_of(n.name) != len(n.args):
                    wrong.add((arch, name, n.name, len(n.args)))
    assert not wrong, sorted(wrong)


def test_sm90a_intrinsics_never_appear_in_sm80_code(compiled):
    hopper = {(name, call) for arch, name, _, source in compiled if arch == "sm_80"
              for call in _CALL.findall(source) if lookup(call).archs == SM90A}
    assert not hopper, sorted(hopper)


@pytest.mark.parametrize("entry", [e for e in TABLE if e.emulated], ids=lambda e: e.name)
def test_the_emulator_implements_every_intrinsic_the_table_says_it_runs(entry):
    names = [entry.example()] + ([entry.example() + HINT_SUFFIX] if entry.hinted else [])
    for name in names:
        assert lookup(name) is entry, name
        args = [None] * entry.arity_of(name)
        assert resolve(name[len(NAMESPACE):], args) is not None, name


def test_each_entry_names_its_architecture_and_meaning():
    for entry in TABLE:
        assert entry.archs in ("sm_80+", SM90A) and entry.meaning, entry.name
        assert lookup(entry.example()) is entry, entry.name
