"""The compatibility census' own logic (tools/compat_census.py, tools/census/): the tilelang
import alias, the classification of failures, and a whole census over two small example
files written here (run on the interpreter target, so no nvcc and no GPU)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tools.census import classify as census_classify
from tools.census import importalias
from tools.census.names import missing_names
from tools.census.scan import scan_source
from tilecraft.errors import TileError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Two kernels: `copy_rows` builds; `uses_missing` asks for a name T lacks. The entry builds
# both (the first one's call returns unrun outputs, so the script goes on).
BUILDS_AND_MISSES = textwrap.dedent('''
    import numpy as np
    import tilelang
    import tilelang.language as T


    @tilelang.jit(out_idx=[-1])
    def copy_rows(M=64):
        @T.prim_func
        def copy_kernel(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(M):
                    B[i] = A[i]
        return copy_kernel


    @tilelang.jit(out_idx=[-1])
    def uses_missing(M=64):
        @T.prim_func
        def missing_kernel(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                T.no_such_tile_op(A, B)
        return missing_kernel


    def main():
        out = copy_rows()(np.ones(64, dtype=np.float32))
        assert out.shape == (64,)
        uses_missing()


    if __name__ == "__main__":
        main()
''')

# Fails while importing: a tilelang module tilecraft does not have. Its kernel is never built.
IMPORT_FAILS = textwrap.dedent('''
    import tilelang
    import tilelang.language as T
    from tilelang.no_such_module import helper


    @T.prim_func
    def never_built(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.clear(A)


    if __name__ == "__main__":
        pass
''')


@pytest.fixture
def alias():
    finder = importalias.install()
    yield finder
    sys.meta_path.remove(finder)
    for name in [n for n in sys.modules if importalias.aliased_root(n)]:
        del sys.modules[name]


def test_alias_resolves_tilelang_to_tilecraft(alias):
    import tilecraft.language
    import tilelang.language as T
    from tilelang.language import prim_func
    assert T is tilecraft.language
    assert prim_func is tilecraft.language.prim_func
    assert T.__spec__.name == "tilecraft.language"  # the module keeps its own identity


def test_alias_resolves_tilelangs_bundled_tvm(alias):
    import tilecraft.tvm
    import tvm
    from tvm import DataType, tirx
    assert tvm is tilecraft.tvm and tirx is tilecraft.tvm.tirx
    assert DataType("float16").bits == 16
    assert importalias.source_name("tilecraft.tvm.tirx") == "tvm.tirx"
    assert importalias.source_name("tilecraft.language") == "tilelang.language"


def test_alias_names_a_missing_module_as_the_script_wrote_it(alias):
    with pytest.raises(ModuleNotFoundError) as info:
        __import__("tilelang.no_such_module")
    assert info.value.name == "tilelang.no_such_module"
    assert census_classify.classify(info.value)["detail"] == "tilelang.no_such_module"


def _raised(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError("expected an exception")


def test_missing_names_are_spelled_as_in_tilelang():
    import tilecraft.language
    e = _raised(lambda: tilecraft.language.alloc_nothing)
    assert census_classify.classify(e) == {"class": "missing-name", "detail": "T.alloc_nothing",
                                           "type": "AttributeError", "where": None}
    e = _raised(lambda: __import__("tilecraft").no_such_helper)
    assert census_classify.classify(e)["detail"] == "tilelang.no_such_helper"
    frontend = TileError("T has no attribute 'alloc_barrier'")
    assert census_classify.classify(frontend)["detail"] == "T.alloc_barrier"
    keyword = TileError("TypeError: copy() got an unexpected keyword argument 'disable_tma' "
                        "(in `T.copy(A, B, disable_tma=True)`)")
    assert census_classify.classify(keyword)["class"] == "missing-argument"
    assert census_classify.classify(keyword)["detail"] == "copy(disable_tma=)"


def test_tile_nvcc_and_internal_errors_are_told_apart():
    plain = TileError("T.copy: shapes (4,) and (8,) differ\nmore text")
    assert census_classify.classify(plain)["class"] == "tile-error"
    assert census_classify.classify(plain)["detail"] == "T.copy: shapes (4,) and (8,) differ"
    nvcc = TileError("nvcc failed for sm_90a (exit 1):\nk.cu(12): error: identifier \"x\" is "
                     "undefined\n1 error detected")
    found = census_classify.classify(nvcc)
    assert found["class"] == "nvcc-error" and found["detail"].startswith("error: identifier")
    from tilecraft.target import get_target
    internal = census_classify.classify(_raised(lambda: get_target("no-such-gpu")))
    assert internal["class"] == "internal-error" and internal["type"] == "ValueError"
    assert internal["where"].startswith("tilecraft/target.py:")
    # raised in the standard library on tilecraft's behalf: still tilecraft's failure
    from tilecraft.ir.visitor import children
    inside = census_classify.classify(_raised(lambda: children("a call's text argument")))
    assert inside["class"] == "internal-error" and inside["type"] == "TypeError"
    assert inside["where"].startswith("tilecraft/ir/visitor.py:")


def test_the_scripts_own_failures_are_not_tilecraft_s():
    def script():
        raise RuntimeError("Torch not compiled with CUDA enabled")
    assert census_classify.classify(_raised(script))["class"] == "needs-gpu"
    assert census_classify.classify(_raised(lambda: 1 / 0))["class"] == "example-error"
    missing = census_classify.classify(_raised(lambda: __import__("no_such_pkg_census")),
                                       "import")
    assert missing == {"class": "import-time", "type": "ModuleNotFoundError", "where": None,
                       "detail": "module 'no_such_pkg_census' not installed"}


def test_a_tilecraft_class_s_missing_attribute_and_a_refused_value():
    from tilecraft import PassConfigKey
    import tilecraft.language as T
    e = _raised(lambda: PassConfigKey.TL_NO_SUCH_KEY)
    assert census_classify.classify(e)["detail"] == "tilelang.PassConfigKey.TL_NO_SUCH_KEY"
    # TypeError quoting a class of tilecraft's: the script used the value as another kind
    e = _raised(lambda: len(T.GemmWarpPolicy.Square))
    assert census_classify.classify(e)["class"] == "value-mismatch"


def test_static_names_lists_every_missing_name_a_source_uses():
    source = textwrap.dedent('''
        import tilelang
        import tilelang.language as T
        from tilelang.no_such_module import helper
        from tilelang.language import Kernel, not_in_t
        from tilelang.language import *
        T.copy, T.GemmWarpPolicy.FullRow, T.missing_op(1), tilelang.jit, tilelang.gone.deeper
    ''')
    assert missing_names(source) == ["T.missing_op", "T.not_in_t", "tilelang.gone",
                                     "tilelang.no_such_module"]


def test_scan_finds_kernels_entries_and_the_eager_form():
    scan = scan_source(BUILDS_AND_MISSES + textwrap.dedent('''
        @tilelang.jit
        def eager(A, B):
            with T.Kernel(1, threads=32) as bx:
                T.copy(A, B)
    '''))
    assert [(k.name, k.eager) for k in scan.kernels] == [
        ("copy_kernel", False), ("missing_kernel", False), ("eager", True)]
    assert scan.has_main and scan.imports_tilelang and scan.tests == []
    assert scan.kernel_at(scan.kernels[0].line + 2).name == "copy_kernel"


def test_census_of_two_small_examples(tmp_path):
    examples, out = tmp_path / "examples", tmp_path / "out"
    (examples / "demo").mkdir(parents=True)
    (examples / "demo" / "builds_and_misses.py").write_text(BUILDS_AND_MISSES)
    (examples / "demo" / "import_fails.py").write_text(IMPORT_FAILS)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compat_census.py"),
                           str(examples), str(out), "--target", "interp", "--jobs", "1",
                           "--timeout", "120"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    census = json.loads((out / "census.json").read_text())
    status = {k["name"]: (k["status"], k["failure"]) for k in census["kernels"]}
    assert status["copy_kernel"] == ("ok", None)
    assert status["missing_kernel"][0] == "missing-name"
    assert status["missing_kernel"][1]["detail"] == "T.no_such_tile_op"
    assert status["never_built"][0] == "not-reached"
    assert status["never_built"][1]["class"] == "missing-name"
    assert status["never_built"][1]["detail"] == "tilelang.no_such_module"
    summary = (out / "census.md").read_text()
    # name | kind | first failure: kernels, files | used: kernels in those files, files
    assert "| `T.no_such_tile_op` | missing-name | 1 | 1 | 2 | 1 |" in summary
    assert "| `tilelang.no_such_module` | missing-name | 1 | 1 | 1 | 1 |" in summary
    assert "| ok (built for interp) | 1 | |" in summary


# An eager @tilelang.jit function: its body is the kernel, built at the call.
HEADER = textwrap.dedent('''
    import numpy as np
    import tilelang
    import tilelang.language as T
''')


def eager_kernel(name: str, factor: float) -> str:
    """The source of an eager kernel `name` returning its input times factor."""
    return textwrap.dedent(f'''

        @tilelang.jit
        def {name}(X):
            N = T.const("N")
            X: T.Tensor[[N], T.float32]
            Y = T.empty((N,), T.float32)
            with T.Kernel(1, threads=32):
                for i in T.Parallel(N):
                    Y[i] = X[i] * {factor}
            return Y
    ''')


EAGER = HEADER + eager_kernel("doubled", 2.0) + textwrap.dedent('''

    if __name__ == "__main__":
        assert doubled(np.ones(16, dtype=np.float32)).shape == (16,)
''')


def test_an_eager_kernel_is_counted_once_under_its_function(tmp_path):
    examples, out = tmp_path / "examples", tmp_path / "out"
    (examples / "demo").mkdir(parents=True)
    (examples / "demo" / "eager.py").write_text(EAGER)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compat_census.py"),
                           str(examples), str(out), "--target", "interp", "--jobs", "1",
                           "--timeout", "120"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    kernels = json.loads((out / "census.json").read_text())["kernels"]
    assert [(k["name"], k["eager"], k["status"]) for k in kernels] == [("doubled", True, "ok")]


# Checks the first kernel's output before building the second, and times it on the way.
CHECKS_THEN_BUILDS = HEADER + eager_kernel("doubled", 2.0) + eager_kernel("tripled", 3.0) + \
    textwrap.dedent('''

    if __name__ == "__main__":
        x = np.arange(16, dtype=np.float32)
        assert (doubled(x) == 2 * x).all(), "doubled is wrong"
        assert tilelang.profiler.do_bench(lambda: doubled(x), warmup=10000, rep=10000) > 0
        assert (tripled(x) == 3 * x).all()
''')


@pytest.mark.parametrize("gpu", [False, True], ids=["compile-only", "run"])
def test_a_census_that_runs_the_kernels_sees_their_outputs(tmp_path, gpu):
    """--gpu: the kernels run for real (here on the interpreter), so a script's own check of
    its first kernel passes and its second kernel is built; each timing runs once (the budgets
    asked for, 10 s each, are not spent). Compile only, the unrun zeros fail the check."""
    examples, out = tmp_path / "examples", tmp_path / "out"
    (examples / "demo").mkdir(parents=True)
    (examples / "demo" / "checks.py").write_text(CHECKS_THEN_BUILDS)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compat_census.py"),
                           str(examples), str(out), "--target", "interp", "--jobs", "1",
                           "--timeout", "100"] + (["--gpu"] if gpu else []),
                          capture_output=True, text=True, cwd=ROOT, timeout=200)
    assert done.returncode == 0, done.stderr
    census = json.loads((out / "census.json").read_text())
    status = {k["name"]: k["status"] for k in census["kernels"]}
    assert status == {"doubled": "ok", "tripled": "ok" if gpu else "not-reached"}
    assert census["gpu"] is gpu
    assert ("kernels built and run" in (out / "census.md").read_text()) is gpu


def test_a_kernel_whose_results_the_script_rejects_is_a_wrong_result():
    """Built and run on a GPU, then the example's own assertion failed: not counted as built."""
    from types import SimpleNamespace
    from tools.census import aggregate
    scans = {"x.py": SimpleNamespace(kernels=[SimpleNamespace(line=3, name="k", eager=False),
                                              SimpleNamespace(line=9, name="j", eager=False)])}
    kernel = {"event": "kernel", "file": "x.py", "name": "k", "phase": "compile", "ok": True,
              "failure": None}
    events = {"x.py": [
        {"event": "entry-start", "entry": "test_one"},
        dict(kernel, line=3),
        {"event": "entry-end", "entry": "test_one", "outcome": "failed",
         "failure": {"class": "example-error", "type": "AssertionError",
                     "detail": "AssertionError: Tensor-likes are not close!"}},
        {"event": "entry-start", "entry": "test_two"},
        dict(kernel, line=9, name="j"),
        {"event": "entry-end", "entry": "test_two", "outcome": "finished", "failure": None}]}
    records = {r["line"]: r for r in aggregate.kernels(scans, {}, events)}
    assert records[3]["status"] == "wrong-result"
    assert records[3]["failure"]["detail"].startswith("AssertionError: Tensor-likes")
    assert records[9]["status"] == "ok"
