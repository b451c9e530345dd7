"""TILECRAFT_DUMP_IR=dir: the IR after every pass of the sm_80 pipeline, and the CUDA source,
are written to dir as <func>.<NN>.<pass>.txt, in pass order."""
import re
from pathlib import Path

import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.runtime import has_nvcc

BACKEND_DIR = Path(pipelines.__file__).resolve().parent
# Where a pass lives: target-neutral ones in passes/, the CUDA backend's in its slice.
PASS_DIRS = (BACKEND_DIR.parents[1] / "passes", BACKEND_DIR, BACKEND_DIR / "schedule",
             BACKEND_DIR / "transforms")
needs_nvcc = pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")


from test_lowering import gemm_epilogue as gemm_relu  # noqa: E402  (one GEMM + ReLU kernel)
from test_lowering import transposed  # noqa: E402


@pytest.fixture
def dump_dir(tmp_path, monkeypatch):
    directory = tmp_path / "dump"
    monkeypatch.setenv("TILECRAFT_DUMP_IR", str(directory))
    monkeypatch.setenv("TILECRAFT_DISABLE_CACHE", "1")
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))
    return directory


def dumped(directory: Path) -> list:
    """(index, pass name, text) of every dumped file, by index."""
    out = []
    for path in directory.iterdir():
        m = re.fullmatch(r"main\.(\d\d)\.(\w+)\.txt", path.name)
        assert m, f"unexpected file {path.name}"
        out.append((int(m.group(1)), m.group(2), path.read_text()))
    return sorted(out)


def check_sequence(files):
    indices = [i for i, _, _ in files]
    names = [n for _, n, _ in files]
    assert names[0] == "input" and indices[0] == 0
    assert names[-1] == "cuda" and indices[-1] == 99
    assert indices[:-1] == list(range(len(files) - 1)), "pass dumps are numbered 00, 01, ..."
    passes = names[1:-1]
    assert {"insert_barriers", "lower_tile_ops", "plan_shared_memory"} <= set(passes)
    assert len(set(passes)) == len(passes)
    assert passes.index("insert_barriers") < passes.index("lower_tile_ops")
    for name in passes:
        # One public pass per file: the dump name is the module and the function name.
        assert sum((d / f"{name}.py").is_file() for d in PASS_DIRS) == 1, name
    return passes


def test_pipeline_dumps_every_pass_in_order(dump_dir):
    func = gemm_relu()
    lowered = pipelines.cuda_sm80(func)
    pipelines.dump_source(func, "// source text\n")
    files = dumped(dump_dir)
    passes = check_sequence(files)
    text = {n: t for _, n, t in files}
    assert text["input"] == func.script()
    assert text[passes[-1]] == lowered.script()
    assert text["cuda"] == "// source text\n"
    # The tile ops are still in the input and gone once lowered.
    assert "T.gemm(" in text["input"] and "T.Parallel(" in text["input"]
    assert "T.gemm(" not in text["lower_tile_ops"] and "T.Parallel(" not in text["lower_tile_ops"]
    assert "T.alloc_local" in text["lower_tile_ops"]
    assert "syncthreads" in text["lower_tile_ops"]


def test_nothing_is_written_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("TILECRAFT_DUMP_IR", raising=False)
    monkeypatch.chdir(tmp_path)
    pipelines.cuda_sm80(gemm_relu())
    assert list(tmp_path.iterdir()) == []


@needs_nvcc
def test_compile_dumps_passes_and_the_cuda_source(dump_dir):
    func = gemm_relu()
    kernel = tilecraft.compile(func, target="sm_80")
    files = dumped(dump_dir)
    passes = check_sequence(files)
    text = {n: t for _, n, t in files}
    assert text["cuda"] == kernel.get_kernel_source()
    assert text["input"] == func.script()
    lowered = text["lower_tile_ops"]
    assert "C_f = T.alloc_local((32,), \"float32\")" in lowered  # 64x64 over 128 threads
    assert "tc::syncthreads" in lowered or "syncthreads" in lowered
    assert "tc::mma_m16n8k16_f16_f32" in lowered
    # The lowering rewrites the program; what it received is the tile-level IR.
    before = (["input"] + passes)[passes.index("lower_tile_ops")]
    assert "T.gemm(" in text[before] and text[before] != lowered


@needs_nvcc
def test_dumping_is_not_served_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TILECRAFT_DUMP_IR", raising=False)
    monkeypatch.delenv("TILECRAFT_DISABLE_CACHE", raising=False)
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))
    source = tilecraft.compile(gemm_relu(), target="sm_80").get_kernel_source()
    directory = tmp_path / "dump"
    monkeypatch.setenv("TILECRAFT_DUMP_IR", str(directory))
    # The same program again: with dumping on it is lowered again, so the files appear.
    kernel = tilecraft.compile(gemm_relu(), target="sm_80")
    files = dumped(directory)
    check_sequence(files)
    assert files[-1][2] == source == kernel.get_kernel_source()


def test_file_names_follow_the_prim_func_name(dump_dir):
    @T.prim_func
    def scale_rows(X: T.Tensor((32, 32), "float32"), Y: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(32, 32):
                Y[i, j] = X[i, j] * 3.0
    pipelines.cuda_sm80(scale_rows)
    names = sorted(p.name for p in dump_dir.iterdir())
    assert names and all(n.startswith("scale_rows.") for n in names)
    assert names[0] == "scale_rows.00.input.txt"


def test_a_second_compilation_overwrites_the_dump(dump_dir):
    pipelines.cuda_sm80(gemm_relu())
    first = {p.name: p.read_text() for p in dump_dir.iterdir()}
    pipelines.cuda_sm80(gemm_relu())
    second = {p.name: p.read_text() for p in dump_dir.iterdir()}
    assert first == second  # same names, each file rewritten whole (not appended to)


def test_passes_before_a_failing_one_are_dumped(dump_dir):
    # A loop that writes the accumulator transposed is rejected while lowering; the IR up to
    # that pass is what one wants to look at, so it must be on disk.
    main = transposed(write=True)
    with pytest.raises(tilecraft.TileError):
        pipelines.cuda_sm80(main)
    files = dumped(dump_dir)
    assert files[0][:2] == (0, "input") and files[0][2] == main.script()
    assert "lower_tile_ops" not in [n for _, n, _ in files]
    assert [i for i, _, _ in files] == list(range(len(files)))


def test_the_interpreter_dumps_the_tile_ir_it_runs(dump_dir):
    func = gemm_relu()
    tilecraft.compile(func, target="interp")
    assert (dump_dir / f"{func.name}.00.tile_ir.txt").read_text() == func.script()
