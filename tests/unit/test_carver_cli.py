"""`tilecraft recommend` prints a ranked table (run as a subprocess)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _run(*args):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT))
    return subprocess.run([sys.executable, "-m", "tilecraft.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_recommend_prints_a_table():
    p = _run("recommend", "examples/gemm.py:matmul", "--shape", "8192,8192,8192",
             "--target", "h100", "--top", "3", "--space", "block_M=64,128",
             "--space", "block_N=128,256", "--space", "block_K=32,64")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "configurations" in lines[0] and "legal" in lines[0]
    header = lines[1].split()
    for col in ("block_M", "block_N", "block_K", "TFLOP/s", "bound", "waves", "regs"):
        assert col in header
    rows = [l for l in lines[3:] if l.strip()[:1].isdigit()]
    assert len(rows) == 3 and rows[0].split()[0] == "1"
    assert any(l.startswith("best:") for l in lines)


def test_recommend_module_form_and_fixed_arguments():
    p = _run("recommend", "examples.flash_attention:flash_attention", "--shape",
             "1,2,512,64,true", "--top", "2", "--set", "threads=128",
             "--space", "block_M=64,128", "--space", "block_N=64", "--space", "num_stages=1,2")
    assert p.returncode == 0, p.stderr
    assert "flash_attention(1, 2, 512, 64, True)" in p.stdout


def test_recommend_reports_bad_input():
    p = _run("recommend", "examples/gemm.py:nothing", "--shape", "64,64,64")
    assert p.returncode != 0 and "nothing" in p.stderr
    p = _run("recommend", "examples/gemm.py:matmul", "--shape", "64,64,64", "--target", "x")
    assert p.returncode != 0 and "unknown target" in p.stderr


def test_version_and_python_dash_m():
    import tilecraft
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "tilecraft", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"tilecraft {tilecraft.__version__}"
    out = run()
    assert out.returncode == 2 and "required: command" in out.stderr


GEMM = "examples/gemm.py:matmul"
MISUSES = [
    [], ["--bogus"], ["recommend"], ["recommend", "examples/gemm.py"],
    ["recommend", "no_such_file.py:f"], ["recommend", "no_such_module_anywhere:f"],
    ["recommend", "examples/gemm.py:nothing", "--shape", "64,64,64"],
    ["recommend", "examples/gemm.py:T", "--shape", "64,64,64"],       # not a factory
    ["recommend", GEMM], ["recommend", GEMM, "--shape", "64,64"],
    ["recommend", GEMM, "--shape", "64,64,64", "--target", "tpu"],
    ["recommend", GEMM, "--shape", "64,64,64", "--top", "0"],
    ["recommend", GEMM, "--shape", "64,64,64", "--top", "many"],
    ["recommend", GEMM, "--shape", "64,64,64", "--space", "block_M"],
    ["recommend", GEMM, "--shape", "64,64,64", "--space", "blockM=64,128"],
    ["recommend", GEMM, "--shape", "64,64,64", "--set", "dtpye=float16"],
]


@pytest.mark.parametrize("argv", MISUSES, ids=[" ".join(a) or "nothing" for a in MISUSES])
def test_a_misuse_is_one_line_and_exit_2(argv, capsys, monkeypatch):
    from tilecraft import cli
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tilecraft: error: ") and err.count("\n") == 1, err


def test_a_module_that_fails_to_load_is_one_line(tmp_path, capsys, monkeypatch):
    from tilecraft import cli
    broken = tmp_path / "broken_kernels.py"
    broken.write_text("def matmul(:\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert cli.main(["recommend", f"{broken}:matmul", "--shape", "1"]) == 2
    err = capsys.readouterr().err
    assert "fails to load: SyntaxError" in err and err.count("\n") == 1, err


def test_the_roof_is_that_of_the_kernels_dtype():
    """An fp16 GEMM's roofline roof is the fp16 tensor rate, not the card's fastest (fp8)."""
    from types import SimpleNamespace
    from tilecraft import cli
    from tilecraft.carver import get_target
    t = get_target("h100")
    node = SimpleNamespace(tensor_flops=1.0, dtype="float16")
    cost = SimpleNamespace(counts=[SimpleNamespace(nodes=[node])])
    assert cli._roof(cost, t) == t.tensor_rate("float16") < t.tensor_rate("float8_e4m3")
