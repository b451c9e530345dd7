"""rotate_mma_loop: a cp.async GEMM loop loads each k step's fragments one step ahead (double
buffered) and waits for the next tile before its last k step. The rotated kernels compute the
product on the emulator for two and four k steps per tile (one is left unrotated) and every
trip count (none, fewer than the stages, ragged), its checker stays silent, and it finds the
bugs the rotation's synchronization prevents: a missing wait, a missing barrier. Loops of
another shape (attention) are left as they are, and tl.disable_mma_rotation turns it off."""
import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines

from test_emulator_checker import (_walk_stmts, calls, calls_prefix, dropped, kinds,
                                  plant)

SM80 = {"tl.disable_warp_specialized": True, "tl.disable_tma_lower": True,
        "tl.disable_wgmma": True}
OFF = {"tl.disable_mma_rotation": True}


def gemm_func(example, M, N, K, **cfg):
    config = dict(block_M=64, block_N=64, block_K=32, threads=128, num_stages=3)
    config.update(cfg)
    return underlying(example("gemm").matmul)(M, N, K, **config)


def cuda_text(func, arch="sm_80", configs=None):
    return emit_cuda(pipelines.cuda(func, arch, 232448, configs))[0]


def run(lowered, M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float16)
    reports = list(E.run(lowered, [a, b, c]))
    return reports, a, b, c


@pytest.mark.parametrize("arch, configs", [("sm_80", None), ("sm_90a", SM80)])
def test_the_gemm_loop_loads_fragments_a_step_ahead(example, arch, configs):
    src = cuda_text(gemm_func(example, 8192, 8192, 8192, block_M=128, block_N=256,
                              block_K=64, threads=256), arch, configs)
    assert "unsigned int C_local_a[32];" in src      # 4 atoms x 4 words, two copies
    assert "if (kk == 3) {\n        tc::cp_async_wait<1>();\n        tc::syncthreads();" in src
    assert "C_local_a[kk % 2 * 16 + mi_1 * 4]" in src  # the mmas read step kk's copy
    # The copies ahead: A's at step 0, B's and the commit at step 2.
    assert "if (kk == 0) {\n        if (k + 2 < 128) {\n          // gemm.py:34" in src
    assert "if (kk == 2) {\n        if (k + 2 < 128) {\n          // gemm.py:35" in src
    assert src.index("if (kk == 2) {") < src.rindex("tc::cp_async_commit();")
    # The loop no longer opens with the wait: it moved in front of the loop and into step 3.
    assert "for (int k = 0; k < 128; ++k) {\n    tc::cp_async_wait" not in src


def test_turned_off_by_the_pass_config(example):
    func = gemm_func(example, 8192, 8192, 8192, block_M=128, block_N=256, block_K=64,
                     threads=256)
    src = cuda_text(func, "sm_80", OFF)
    assert "unsigned int C_local_a[16];" in src and "if (kk == 3)" not in src
    assert "for (int k = 0; k < 128; ++k) {\n    tc::cp_async_wait<1>();" in src


def test_attention_loops_are_left_as_they_are(example):
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 2, 256, 64, False, block_M=64, block_N=64,
                                    num_stages=2, threads=128)
    assert cuda_text(func) == cuda_text(func, configs=OFF)


@pytest.mark.parametrize("M, N, K, cfg", [
    (80, 72, 40, dict(block_K=16)),                     # one k step: not rotated
    (96, 80, 200, dict(block_K=32)),                    # two steps, ragged last tile
    (64, 64, 192, dict(block_K=64, num_stages=2)),      # four steps, two stages
    (70, 66, 24, dict(block_K=32, num_stages=4)),       # one tile, fewer than the stages
    (64, 64, 64, dict(block_K=32, num_stages=3)),       # two tiles, fewer than the stages
], ids=["k16", "k32-ragged", "k64-s2", "one-tile-s4", "two-tiles-s3"])
def test_rotated_gemm_is_right_and_race_free(example, M, N, K, cfg):
    func = gemm_func(example, M, N, K, **cfg)
    lowered = E.lower(func)
    # An odd number of k steps per tile is not rotated (the parity of a step's fragment copy
    # would alternate between tiles).
    assert ("if (kk ==" in emit_cuda(lowered)[0]) == (cfg["block_K"] % 32 == 0)
    reports, a, b, c = run(lowered, M, N, K)
    assert reports == []
    np.testing.assert_allclose(c.astype(np.float64), a.astype(np.float64) @ b, rtol=1e-2,
                               atol=1e-2)


def test_no_k_tiles_writes_zeros(example):
    lowered = E.lower(gemm_func(example, 64, 64, 0))
    reports, _, _, c = run(lowered, 64, 64, 0)
    assert reports == [] and (c == 0).all()


def test_a_missing_wait_before_the_last_step_is_reported(example):
    lowered = E.lower(gemm_func(example, 96, 80, 200))
    waits = [n for n in _walk_stmts(lowered) if calls_prefix(n, "tc::cp_async_wait<")]
    assert len(waits) == 2   # in front of the loop, and before its last k step
    bad = plant(lowered, lambda s: calls_prefix(s, "tc::cp_async_wait<"), dropped, 1)
    assert "async-before-wait" in kinds(run(bad, 96, 80, 200)[0])


def test_a_missing_barrier_before_the_last_step_is_a_race(example):
    lowered = E.lower(gemm_func(example, 96, 80, 200))
    barriers = [n for n in _walk_stmts(lowered) if calls("tc::syncthreads")(n)]
    # The last one is the loop's (the prologue's and the one in front of the loop come first).
    bad = plant(lowered, calls("tc::syncthreads"), dropped, len(barriers) - 1)
    assert "race" in kinds(run(bad, 96, 80, 200)[0])


@pytest.mark.parametrize("K, checked", [(8192, False), (8192 - 16, True)])
def test_copies_under_the_pipeline_guard_check_bounds_only_when_ragged(example, K, checked):
    # `if (k + 2 < 128)` keeps every k tile it issues inside K = 8192: the cp.async go without
    # a run-time bounds predicate. With K ragged the last tile is partly out of range, and the
    # predicate stays (the emulator cases above run such kernels).
    src = cuda_text(gemm_func(example, 256, 256, K))
    guarded = src[src.index("if (k + 2 < "):]
    copies = [line for line in guarded.splitlines() if "tc::cp_async_cg_16" in line]
    assert copies
    assert any(not line.rstrip().endswith("true);") for line in copies) == checked
