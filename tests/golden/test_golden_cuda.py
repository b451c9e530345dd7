"""Golden files: the tile IR text (`func.script()`) and the generated CUDA (sm_80) of a small
corpus of kernels (golden_corpus.py) must stay exactly as stored in cases/.

A difference fails with a unified diff. When the change is intended, regenerate the files with

    TILECRAFT_UPDATE_GOLDEN=1 python3 -m pytest -q tests/golden

and review the diff of tests/golden/cases before committing it.
"""
import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tilecraft
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.runtime import has_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_corpus  # noqa: E402

CASES_DIR = Path(__file__).resolve().parent / "cases"
ROOT = Path(__file__).resolve().parents[2]
UPDATE = os.environ.get("TILECRAFT_UPDATE_GOLDEN", "").strip().lower() in ("1", "true", "yes")
NAMES = sorted(golden_corpus.CASES)
UPDATE_HINT = ("if the change is intended, regenerate the golden files with "
               "TILECRAFT_UPDATE_GOLDEN=1 python3 -m pytest -q tests/golden and review the diff "
               "of tests/golden/cases")


def cuda_source(func) -> str:
    """The sm_80 CUDA text, through the same passes and emitter as tilecraft.compile (whose
    equality with this is checked below where nvcc exists)."""
    source, _ = emit_cuda(pipelines.cuda_sm80(func))
    return source


def generate(name: str) -> dict:
    func = golden_corpus.CASES[name]()
    return {"ir.txt": func.script(), "cu": cuda_source(func)}


@pytest.fixture(autouse=True)
def _no_cache_no_dump(monkeypatch):
    monkeypatch.setenv("TILECRAFT_DISABLE_CACHE", "1")
    monkeypatch.delenv("TILECRAFT_DUMP_IR", raising=False)


def compare_or_update(path: Path, actual: str):
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != actual:
            path.write_text(actual)
        return
    if not path.exists():
        pytest.fail(f"golden file {path.relative_to(ROOT)} is missing; create it with "
                    "TILECRAFT_UPDATE_GOLDEN=1 python3 -m pytest -q tests/golden")
    expected = path.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"{path.relative_to(ROOT)} (golden)", tofile="generated now"))
        pytest.fail(f"generated text differs from {path.relative_to(ROOT)}:\n{diff}\n"
                    f"{UPDATE_HINT}", pytrace=False)


@pytest.mark.parametrize("name", NAMES)
def test_ir_text_matches_golden(name):
    compare_or_update(CASES_DIR / f"{name}.ir.txt", generate(name)["ir.txt"])


@pytest.mark.parametrize("name", NAMES)
def test_cuda_text_matches_golden(name):
    compare_or_update(CASES_DIR / f"{name}.cu", generate(name)["cu"])


def test_every_golden_file_belongs_to_a_case():
    stored = {p.name for p in CASES_DIR.iterdir() if p.is_file()}
    expected = {f"{n}.{ext}" for n in NAMES for ext in ("ir.txt", "cu")}
    assert stored == expected, f"stale or missing golden files: {sorted(stored ^ expected)}"


def test_generation_is_deterministic_in_process():
    first = {n: generate(n) for n in NAMES}
    second = {n: generate(n) for n in NAMES}
    for n in NAMES:
        assert first[n] == second[n], f"{n}: two compilations in one process differ"


_CHILD = """
import json, sys
sys.path.insert(0, {golden_dir!r})
import golden_corpus
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines
out = {{}}
for name in sorted(golden_corpus.CASES):
    func = golden_corpus.CASES[name]()
    out[name] = {{"ir.txt": func.script(), "cu": emit_cuda(pipelines.cuda_sm80(func))[0]}}
print(json.dumps(out))
"""


def test_generation_is_deterministic_across_processes():
    # Another interpreter with another hash seed: set or dict order leaking into the output,
    # or object ids in names, would show up here.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILECRAFT_")}
    env.update(TILECRAFT_DISABLE_CACHE="1", PYTHONHASHSEED="12345",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    code = _CHILD.format(golden_dir=str(Path(__file__).resolve().parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=str(ROOT), timeout=300)
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout)
    assert sorted(child) == NAMES
    for n in NAMES:
        assert child[n] == generate(n), f"{n}: a compilation in a new process differs"


@pytest.mark.parametrize("name", NAMES)
def test_cuda_has_no_absolute_paths(name):
    source = generate(name)["cu"]
    assert str(ROOT) not in source
    home = os.path.expanduser("~")
    if len(home) > 1:
        assert home not in source
    comments = re.findall(r"//\s*(\S+\.py):(\d+)", source)
    assert comments, "the emitter names the source line of each statement"
    for filename, _ in comments:
        assert "/" not in filename and "\\" not in filename, filename
    # Outside comments and the header include, no path-like text at all.
    code = "\n".join(line.split("//")[0] for line in source.splitlines()
                     if not line.startswith("#include"))
    assert not re.search(r"(^|[\s\"'])/(home|tmp|usr|work|root)\b", code)


@pytest.mark.parametrize("name", NAMES)
def test_source_comments_point_at_the_kernel_source(name):
    """Each `// file.py:line` names a line of the file that defines the kernel, inside it."""
    func_path = ROOT / "examples" / "gemm.py" if name.startswith("gemm_128") else \
        Path(golden_corpus.__file__)
    lines = func_path.read_text().splitlines()
    for filename, line in re.findall(r"//\s*(\S+\.py):(\d+)", generate(name)["cu"]):
        assert filename == func_path.name
        assert 1 <= int(line) <= len(lines)
        assert lines[int(line) - 1].strip(), f"{filename}:{line} is a blank line"


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("name", NAMES)
def test_compile_gives_the_golden_source_and_no_spills(name):
    kernel = tilecraft.compile(golden_corpus.CASES[name](), target="sm_80")
    assert kernel.get_kernel_source() == generate(name)["cu"]
    assert kernel.program.registers > 0
    assert kernel.program.spills == 0, f"{name} spills registers"
