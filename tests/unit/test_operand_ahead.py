"""operand_ahead: a warp-specialized loop that computes a gemm's shared operand (the W4A16
GEMM's unpacked weight tile) keeps that tile in two versions and computes the next iteration's
version while the current wgmma batch is in flight; the result is unchanged, and the emulator's
checker (races, proxy fences, mbarrier phases) finds nothing in the rotated loop."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft
import tilecraft.backends.cuda.emulator as E
from tilecraft.backends.cuda.intrinsics import NAMED_BARRIER_SYNC, WGMMA_COMMIT_GROUP
from tilecraft.backends.cuda.transforms.overlap_wgmma import WAIT_ALL
from tilecraft.ir.annotations import OPERAND_AHEAD, WARP_SPECIALIZED
from tilecraft.ir.stmt import Allocate, For, IfThenElse, called, stmts_of
from tilecraft.ir.visitor import walk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import dequant_gemm as example  # noqa: E402

QUALIFYING = dict(block_M=64, block_N=64, block_K=256, num_stages=2, threads=128)
OFF = {"tl.disable_operand_ahead": True}


def build(M, N, K, configs=None, **config):
    func = example.dequant_gemm.__wrapped__(M, N, K, group_size=32, **{**QUALIFYING, **config})
    return func, E.lower(func, "sm_90a", configs)


def consumer_loop(lowered) -> For:
    loops = [n for n in walk(lowered.body) if isinstance(n, For) and
             n.annotations.get(WARP_SPECIALIZED)]
    assert len(loops) == 1
    return loops[0]


def weight_tile_elements(lowered) -> int:
    """Elements of the (flattened, lowered) weight tile W."""
    (alloc,) = [n for n in walk(lowered.body) if isinstance(n, Allocate) and
                n.buffer.name == "W"]
    return int(np.prod([int(d) for d in alloc.buffer.shape]))


def test_the_weight_tile_is_computed_a_step_ahead_of_its_wgmma():
    _, lowered = build(256, 256, 1024)
    loop = consumer_loop(lowered)
    assert loop.annotations.get(OPERAND_AHEAD)
    assert weight_tile_elements(lowered) == 2 * 64 * 256
    body = list(stmts_of(loop.body))
    names = [called(s) for s in body]
    commit, wait = names.index(WGMMA_COMMIT_GROUP.name), names.index(WAIT_ALL)
    between = body[commit + 1:wait]
    # the next iteration's unpacking sits between the batch's issue and its wait ...
    assert len(between) == 1 and isinstance(between[0], IfThenElse)
    assert any(getattr(n, "buffer", None) is not None and n.buffer.name == "B_packed_shared"
               for n in walk(between[0]))
    # ... and one block barrier an iteration is left (the unrotated loop has two)
    syncs = [n for n in walk(loop.body) if getattr(n, "name", "") == NAMED_BARRIER_SYNC.name]
    assert len(syncs) == 1


def test_the_pass_config_turns_it_off():
    _, lowered = build(256, 256, 1024, OFF)
    loop = consumer_loop(lowered)
    assert not loop.annotations.get(OPERAND_AHEAD)
    assert weight_tile_elements(lowered) == 64 * 256


def test_a_second_version_that_does_not_fit_is_not_made():
    # Three stages of the A, B and scale tiles beside W and the epilogue's tile take 156 KB;
    # under a 170 KB limit a second 32 KB W does not fit: the loop stays as it was, and
    # still compiles.
    func = example.dequant_gemm.__wrapped__(256, 256, 1024, group_size=32,
                                            **{**QUALIFYING, "num_stages": 3})
    from tilecraft.backends.cuda import pipeline
    lowered = pipeline.lower(func, "sm_90a", smem_bytes=170 * 1024)
    loop = consumer_loop(lowered)
    assert not loop.annotations.get(OPERAND_AHEAD)


@pytest.mark.parametrize("M, N, K, config", [
    pytest.param(70, 72, 1024, {}, id="70x72x1024-b64x64x256-s2"),
    pytest.param(130, 64, 512, dict(block_M=128, threads=256), id="130x64x512-b128-t256"),
    # the last iteration has no next one to compute ahead (a loop of one iteration is not
    # warp-specialized at all: test_warp_specialize)
    pytest.param(33, 100, 512, dict(num_stages=3), id="33x100x512-two-k-steps-s3"),
    # four scales a row (8 bytes): loaded by TMA in rows of 16 (widen_tma_rows), the last
    # tile's past the tensor's edge
    pytest.param(40, 72, 768, dict(block_K=128, num_stages=3), id="40x72x768-b64x64x128-s3"),
])
def test_results_and_checker_on_the_emulator(M, N, K, config):
    func, lowered = build(M, N, K, **config)
    assert consumer_loop(lowered).annotations.get(OPERAND_AHEAD)
    A, B_packed, Scale = example.make_inputs(M, N, K, 32, seed=3)
    C = np.full((M, N), np.nan, np.float16)
    reports = list(E.run(lowered, [A, B_packed, Scale, C]))
    assert reports == []
    want = tilecraft.compile(func, target="interp", out_idx=[-1])(A, B_packed, Scale)
    np.testing.assert_allclose(C.astype(np.float64), want.astype(np.float64),
                               rtol=1e-2, atol=1e-2)
