"""Every GPU-test kernel, lowered for sm_80 and for sm_90a (wgmma, TMA and warp specialization
where they apply) and run on the thread-level emulator, computes what the tile-level
interpreter computes, and the checker finds no race, unwritten read, out-of-bounds access or
deadlock in it. This is how CI, which has no GPU, guards the lowering."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft
from tilecraft.profiler import TensorSupplyType, make_input

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402

CORPUS = dict(kernels.corpus())


@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_lowered_kernel_matches_interpreter_and_is_race_free(name, target):
    func = CORPUS[name]
    rng = np.random.default_rng(1)
    inputs = [make_input(p, TensorSupplyType.Uniform, rng) for p in func.params]
    on_emulator = [a.copy() for a in inputs]
    on_interp = [a.copy() for a in inputs]
    emulated = tilecraft.compile(func, target=target)
    emulated(*on_emulator)
    tilecraft.compile(func, target="interp")(*on_interp)
    assert emulated.reports == []
    for got, want in zip(on_emulator, on_interp):
        got, want = got.astype(np.float64), want.astype(np.float64)
        assert not np.isnan(got).any() or np.isnan(want).any()
        tol = 2e-2 if "16" in str(func.params[0].dtype) else 1e-4
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
