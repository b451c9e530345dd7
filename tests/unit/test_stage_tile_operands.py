"""Operands where TileLang takes them and the CUDA lowering does not read them from: T.reduce_*
of a shared tile or into one (through a fragment), T.gemm's B in a fragment (through a shared
tile); schedule/stage_tile_operands.py. The emulators (sm_80 and sm_90a lowering, race checker
on) agree with numpy and the interpreter on random inputs with poisoned outputs, ragged sizes
and a sub-tile of the shared buffer."""
import numpy as np
import pytest

import sys
from pathlib import Path

import tilecraft
from tilecraft.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from kernels import gemm_with_computed_b, shared_reductions  # noqa: E402


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("M, N", [(64, 48), (37, 29)])
def test_reductions_of_and_into_shared_tiles_agree_with_numpy(target, M, N):
    half = (M + 1) // 2
    A = np.random.default_rng(M * N).standard_normal((M, N)).astype(np.float32)
    R, C, H = (np.full(n, np.nan, np.float32) for n in (M, N, half))
    kernel = tilecraft.compile(shared_reductions(M, N, half), target=target)
    kernel(A, R, C, H)
    if target != "interp":
        assert kernel.reports == []
    np.testing.assert_allclose(R, A.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(C, np.maximum(A.max(0), -1.0))
    np.testing.assert_allclose(H, A[:half].astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_the_reductions_run_on_fragments_after_the_pass():
    from tilecraft.ir.tileop import Reduce
    from tilecraft.ir.visitor import walk
    after = pipeline.lower(shared_reductions(64, 48, 32), "sm_90a",
                           stop_after="stage_tile_operands")
    reduces = [n for n in walk(after.body) if isinstance(n, Reduce)]
    assert len(reduces) == 3
    assert all(r.src.buffer.scope == "local.fragment" and r.dst.buffer.scope ==
               "local.fragment" for r in reduces)


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("M, N, K, transpose_B", [(64, 64, 32, False), (50, 37, 29, False),
                                                  (64, 64, 32, True)])
def test_gemm_b_computed_in_registers_agrees_with_numpy(target, M, N, K, transpose_B):
    rng = np.random.default_rng(M + N + K)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (N, K) if transpose_B else (K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, np.float32)
    kernel = tilecraft.compile(gemm_with_computed_b(M, N, K, transpose_B), target=target)
    kernel(A, B, C)
    if target != "interp":
        assert kernel.reports == []
    b = (B * np.float16(2) - np.float16(1)).astype(np.float64)   # rounded as the kernel does
    # the tile past the tensor's edge is zero-filled, so its weights there are -1
    want = A.astype(np.float64) @ (b.T if transpose_B else b)
    np.testing.assert_allclose(C, want, rtol=2e-3, atol=2e-3)
