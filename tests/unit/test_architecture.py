"""The layering docs/design.md describes, checked: the target-neutral core never imports a
backend, the packages import each other without cycles, every file the code cites exists, and
the cost model plans with the compiler's own pipeline (the shared-memory plan and layouts it
prices are those of the compiled kernel)."""
from __future__ import annotations

import ast
import collections
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tilecraft"
CORE = ("ir", "frontend", "language", "arith", "layout", "passes", "interp", "carver", "analysis",
        "ops")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set:
    """Every tilecraft module a file imports, at module level or inside a function."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names] if node.module is None else [target]
            out.update(n for n in names if n.startswith("tilecraft"))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("tilecraft"))
    return out


def _graph() -> dict:
    return {_module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def _unit(module: str) -> str:
    """The package a module belongs to for layering: tilecraft.X, or tilecraft.backends.X."""
    parts = module.split(".")
    return ".".join(parts[:3] if len(parts) > 2 and parts[1] == "backends" else parts[:2])


def test_the_target_neutral_core_never_imports_a_backend():
    offenders = [f"{m} imports {d}" for m, deps in _graph().items()
                 if m.split(".")[1:2] and m.split(".")[1] in CORE
                 for d in deps if d.startswith("tilecraft.backends")]
    assert not offenders, "\n".join(offenders)


def test_packages_import_each_other_without_cycles():
    edges = collections.defaultdict(set)
    for m, deps in _graph().items():
        for d in deps:
            a, b = _unit(m), _unit(d)
            if a != b and "tilecraft" not in (a, b):
                edges[a].add(b)
    state: dict = {}
    cycles = []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


_CITED = re.compile(r"(?<![\w/.])((?:[\w]+/)+[\w]+\.(?:py|h|md))\b")


def test_every_file_the_code_cites_exists():
    """Docstrings and comments name files as paths relative to tilecraft/, to the CUDA backend,
    to its header folder, to the repository or to their own folder."""
    bases = (PACKAGE, PACKAGE / "backends" / "cuda", PACKAGE / "backends" / "cuda" / "codegen" /
             "include", ROOT)
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.h")):
        for cited in _CITED.findall(path.read_text()):
            if cited.startswith("path/to/"):   # a placeholder in usage text
                continue
            if not any((base / cited).exists() for base in (*bases, path.parent)):
                missing.append(f"{path.relative_to(ROOT)} cites {cited}")
    assert not missing, "\n".join(missing)


def _examples(names):
    spec = importlib.util.spec_from_file_location(
        "compile_kernels", ROOT / "tests" / "toolkit" / "test_compile_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(n, f) for n, f in module._example_funcs("sm_90a") if n.split(".")[0] in names]


@pytest.mark.parametrize("example", ["gemm", "flash_attention", "mla_decode"])
def test_the_cost_model_sees_the_shared_memory_plan_of_the_compiled_kernel(example):
    from tilecraft.carver.cost import plan
    from tilecraft.compiler import lower
    from tilecraft.ir.buffer import FRAGMENT
    for name, func in _examples({example}):
        _same_plan(name, func, plan, lower, FRAGMENT)


def _same_plan(name, func, plan, lower, FRAGMENT):
    planned = plan(func, "h100")
    compiled = lower(func, "sm_90a")   # the whole pipeline, as jit compiles it
    assert [smem for _, _, smem, _ in planned] == \
        [k.attrs["smem_bytes"] for k in compiled.kernels()], name
    from tilecraft.ir.stmt import Allocate
    from tilecraft.ir.visitor import walk
    from tilecraft.layout.derive import same_layout
    fragments = [n.buffer for n in walk(func.body)
                 if isinstance(n, Allocate) and n.buffer.scope == FRAGMENT]
    assert fragments, name
    for (_, layouts, _, _), kernel in zip(planned, compiled.kernels()):
        theirs = kernel.attrs["layouts"]
        compared = [b for b in fragments if theirs.has(b)]
        assert compared, name
        for b in compared:
            assert same_layout(layouts.buffer(b), theirs.buffer(b)), (name, b.name)
