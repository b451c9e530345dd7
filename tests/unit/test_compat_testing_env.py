"""tilecraft.testing, tilecraft.utils.tensor and tilecraft.env as TileLang's scripts use
them: torch_assert_close's tolerance rule and attribute checks, seeding, the skip decorators,
map_torch_type, get_tensor_supply, TILELANG_CACHE_DIR and disable_cache / enable_cache."""
import os
import random

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
import tilecraft.testing
from tilecraft import env
from tilecraft.errors import TileError
from tilecraft.utils.tensor import TensorSupplyType, get_tensor_supply, map_torch_type


def test_torch_assert_close_allows_a_fraction_of_mismatches():
    torch = pytest.importorskip("torch")
    a = torch.zeros(1000)
    b = a.clone()
    b[:3] = 1.0                                          # 0.3% differ
    assert tilecraft.testing.torch_assert_close(a, b, max_mismatched_ratio=0.003) is True
    with pytest.raises(AssertionError, match=r"Too many mismatched elements: 3 > 1 .*first at "
                                             r"\(0,\): LHS 0.0, RHS 1.0"):
        tilecraft.testing.torch_assert_close(a, b)     # TileLang's default: 0.1% -> 1 allowed
    close = a + 1e-4                                     # within atol=1e-3
    assert tilecraft.testing.torch_assert_close(close, a, max_mismatched_ratio=0.0)
    nan = torch.full((4,), float("nan"))
    assert tilecraft.testing.torch_assert_close(nan, nan.clone())   # equal_nan=True default
    with pytest.raises(AssertionError):
        tilecraft.testing.torch_assert_close(nan, nan.clone(), equal_nan=False)


def test_torch_assert_close_checks_attributes():
    torch = pytest.importorskip("torch")
    a = torch.ones(4, 4)
    with pytest.raises(AssertionError, match="attribute 'shape' do not match"):
        tilecraft.testing.torch_assert_close(a, torch.ones(16))
    with pytest.raises(AssertionError, match="attribute 'dtype' do not match"):
        tilecraft.testing.torch_assert_close(a, a.half())
    assert tilecraft.testing.torch_assert_close(a, a.half(), check_dtype=False)
    with pytest.raises(AssertionError, match=r"attribute 'stride\(\)' do not match"):
        tilecraft.testing.torch_assert_close(a, a.t().contiguous().t(), check_stride=True)
    # numpy arrays are compared the same way (the interpreter's outputs)
    assert tilecraft.testing.torch_assert_close(np.ones(3), np.ones(3))


def test_set_random_seed_repeats_every_generator():
    tilecraft.testing.set_random_seed(7)
    first = (random.random(), np.random.rand())
    tilecraft.testing.set_random_seed(7)
    assert (random.random(), np.random.rand()) == first
    torch = pytest.importorskip("torch")
    tilecraft.testing.set_random_seed(3)
    x = torch.rand(3)
    tilecraft.testing.set_random_seed(3)
    assert torch.equal(x, torch.rand(3))


def test_skip_decorators_follow_the_gpu():
    gpu = tilecraft.testing.cuda_usable()
    def case():
        pass

    marked = tilecraft.testing.requires_cuda(case)
    (mark,) = marked.pytestmark
    assert mark.name == "skipif" and mark.args == (not gpu,)
    cc = tilecraft.testing.compute_version()
    assert gpu or cc == (0, 0)
    for version, mode in (((0, 0), "ge"), ((99, 0), "lt"), ((99, 0), "ge")):
        mark = tilecraft.testing.requires_cuda_compute_version(*version, mode=mode).mark
        expected = gpu and {"ge": cc >= version, "lt": cc < version}[mode]
        assert mark.args == (not expected,), (version, mode)
    assert tilecraft.testing.requires_cuda_compute_version_eq(9, 0).mark.args == \
        (not (gpu and cc == (9, 0)),)
    with pytest.raises(TileError, match="mode must be one of"):
        tilecraft.testing.requires_cuda_compute_version(9, 0, mode="at least")
    assert tilecraft.testing.requires_package("numpy").mark.args == (False,)
    assert tilecraft.testing.requires_package("no_such_package_x").mark.args == (True,)


def test_map_torch_type():
    torch = pytest.importorskip("torch")
    assert map_torch_type("float16") is torch.float16
    assert map_torch_type("half") is torch.float16
    assert map_torch_type("e4m3_float8") is torch.float8_e4m3fn
    assert map_torch_type("float8_e4m3fnuz") is torch.float8_e4m3fnuz   # torch's own names
    assert map_torch_type(T.bfloat16) is torch.bfloat16
    with pytest.raises(TileError, match="names no torch dtype"):
        map_torch_type("float7")


@tilecraft.jit(out_idx=[-1], target="interp")
def negate(n):
    @T.prim_func
    def main(A: T.Tensor((n, 4), "float16"), B: T.Tensor((n, 4), "float16")):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(n, 4):
                B[i, j] = -A[i, j]
    return main


def test_get_tensor_supply_makes_inputs_for_parameters():
    torch = pytest.importorskip("torch")
    kernel = negate(8)
    ones = get_tensor_supply(TensorSupplyType.One)(kernel.params[0])
    assert isinstance(ones, torch.Tensor) and ones.shape == (8, 4) and ones.dtype == torch.float16
    assert bool((ones == 1).all())
    ints = get_tensor_supply()(kernel.params[0])   # TileLang's default: Integer
    assert bool(((ints >= -2) & (ints <= 2) & (ints == ints.round())).all())
    out = kernel(ints.cpu())
    assert torch.equal(out, -ints.cpu())


def test_env_names(monkeypatch, tmp_path):
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    assert env.TILELANG_CACHE_DIR == str(tmp_path)
    from tilecraft.env import TILELANG_CACHE_DIR
    assert TILELANG_CACHE_DIR == str(tmp_path)
    with pytest.raises(AttributeError, match="tilecraft.env has no 'TILELANG_TMP_DIR'"):
        env.TILELANG_TMP_DIR
    monkeypatch.delenv("TILECRAFT_DISABLE_CACHE", raising=False)
    assert env.is_cache_enabled()
    tilecraft.disable_cache()
    try:
        assert not env.is_cache_enabled() and os.environ["TILECRAFT_DISABLE_CACHE"] == "1"
    finally:
        tilecraft.enable_cache()
    assert env.is_cache_enabled()


def test_set_log_level():
    import logging
    before = logging.getLogger("tilecraft").level
    try:
        tilecraft.set_log_level("error")
        assert logging.getLogger("tilecraft.autotuner").getEffectiveLevel() == logging.ERROR
        tilecraft.set_log_level(logging.DEBUG)
        assert logging.getLogger("tilecraft.autotuner").getEffectiveLevel() == logging.DEBUG
        with pytest.raises(TileError, match="unknown level 'LOUD'"):
            tilecraft.set_log_level("LOUD")
    finally:
        logging.getLogger("tilecraft").setLevel(before)


def test_the_log_level_comes_from_the_environment():
    import os
    import subprocess
    import sys
    probe = "import logging, tilecraft; print(logging.getLogger('tilecraft').level)"
    env = {**os.environ, "TILECRAFT_LOG_LEVEL": "INFO"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "20", out.stderr
    env["TILECRAFT_LOG_LEVEL"] = "LOUD"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "TILECRAFT_LOG_LEVEL='LOUD' is not a logging level" in out.stderr


def test_progress_without_tqdm_is_a_text_line(monkeypatch, capsys):
    import sys
    from tilecraft.autotuner.results import Progress
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with Progress(20, "compile matmul", enabled=True) as bar:
        for _ in range(20):
            bar.update()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "compile matmul: 2/20" and lines[-1] == "compile matmul: 20/20"
    assert len(lines) == 10
    with Progress(20, "quiet", enabled=False) as bar:
        bar.update()
    assert capsys.readouterr().err == ""
