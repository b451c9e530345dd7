"""seesaw_warpgroups: MLA decoding's two consumer warpgroups take whole KV blocks in turn. The pass
rewrites the loop into pairs of blocks with one branch per warpgroup, row work on fragments of one
warpgroup, row vectors handed over a shared mailbox between named barriers, and each block's P
over its stage's rotary keys; it leaves loops it cannot run so as they are. The emulator runs the
rewritten kernels (even, odd and single block counts, several tiles per block) to the
interpreter's numbers with nothing reported, and reports the deadlock or the race when a
handoff or a warpgroup barrier is taken out."""
import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir.stmt import For, Kernel
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.ir.annotations import WARPGROUP_FRAGMENTS, is_warpgroup_branch
from tilecraft.backends.cuda.transforms.seesaw_warpgroups import seesaw_warpgroups
from tilecraft.backends.cuda.schedule.warp_specialize import warp_specialize
from tilecraft.backends.cuda.schedule.infer_instructions import infer_instructions
from tilecraft.passes.infer_pipeline import infer_pipeline

from test_emulator_checker import dropped, plant

SMEM = 227 * 1024
OFF = {"tl.disable_seesaw_warpgroups": True}
TILES = dict(block_N=64, block_H=64, num_stages=2, threads=256)


def mla(example, batch=1, heads=64, seqlen=200, dim=128, **tiles):
    m = example("mla_decode")
    return m, underlying(m.flash_mla_decode)(batch, heads, 1, seqlen, dim, 64,
                                             **{**TILES, **tiles})


def rewritten(func, arch="sm_90a", configs=None):
    func = infer_pipeline(infer_instructions(func, arch, configs))
    return seesaw_warpgroups(warp_specialize(func, arch, configs), arch, configs)


def kernel_of(func):
    return next(n for n in walk(func.body) if isinstance(n, Kernel))


def test_the_loop_becomes_pairs_of_blocks_one_branch_per_warpgroup(example):
    _, func = mla(example, seqlen=200)
    k = kernel_of(rewritten(func))
    branches = [n for n in walk(k.body) if is_warpgroup_branch(n)]
    assert len(branches) == 1
    pairs = next(n for n in walk(k.body) if isinstance(n, For) and n.body is branches[0])
    assert int(pairs.extent.value) == 2                       # 4 blocks of 64
    text = repr(branches[0])
    # warpgroup 0 publishes block 2k2's row vectors, warpgroup 1 block 2k2 + 1's
    assert "named_barrier_arrive(2, 256)" in repr(branches[0].then_body)
    assert "named_barrier_sync(2, 256)" in repr(branches[0].else_body)
    assert "named_barrier_arrive(3, 256)" in repr(branches[0].else_body)
    # P lives over the stage's rotary keys; S_shared is no longer used in the loop
    assert "S_shared" not in text and "T.copy(acc_s, K_pe_shared[" in text
    local = k.attrs[WARPGROUP_FRAGMENTS]
    assert {"acc_s", "scores_sum", "scores_max_prev", "scores_max_wg", "logsum_wg",
            "scores_scale_wg"} <= local
    assert not {"acc_o", "scores_scale", "logsum"} & local     # the O part's, over 256 threads


@pytest.mark.parametrize("why, change", [
    ("one stage: block 2k2 + 1 would wait for block 2k2's stage", dict(num_stages=1)),
    ("one warpgroup", dict(threads=128, block_H=64)),
    ("16 rows: not one wgmma row block", dict(block_H=16, threads=256)),
])
def test_loops_it_cannot_run_so_are_left_as_they_are(example, why, change):
    _, func = mla(example, **change)
    assert not any(is_warpgroup_branch(n) for n in walk(rewritten(func).body)), why


def test_turned_off_or_on_sm80_nothing_changes(example):
    _, func = mla(example)
    for arch, configs in (("sm_90a", OFF), ("sm_80", None)):
        assert not any(is_warpgroup_branch(n) for n in walk(rewritten(func, arch, configs).body))


def test_the_generated_source_branches_on_a_warp_uniform_warpgroup_index(example):
    _, func = mla(example)
    text = emit_cuda(pipelines.cuda(func, "sm_90a", SMEM))[0]
    assert "const int wtx = tx % 128;" in text
    assert text.count("if (tc::warpgroup_index() == 0) {") == 1
    loop = text[text.index("for (int k2 = 0;"):text.index("logsum[0] = logsum_wg[0];")]
    # no barrier of all consumers inside the branches: a warpgroup alone would wait forever
    assert "named_barrier_sync(1, 256)" not in loop and "__syncthreads" not in loop
    # the row reductions stay inside each warp (64 rows over one warpgroup's 4 warps)
    assert "_ws" not in loop and "_ws" in emit_cuda(pipelines.cuda(func, "sm_90a", SMEM, OFF))[0]
    # register copies between the twins, no shared staging
    assert "scores_scale[0] = scores_scale_wg[0];" in loop


def run(m, lowered, seqlen, batch, heads, dim=128, seed=3):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads, dim)).astype(np.float16)
    q_pe = rng.standard_normal((batch, heads, 64)).astype(np.float16)
    kv = rng.standard_normal((batch, seqlen, 1, dim)).astype(np.float16)
    k_pe = rng.standard_normal((batch, seqlen, 1, 64)).astype(np.float16)
    out = np.full((batch, heads, dim), np.nan, np.float16)
    reports = list(E.run(lowered, [q, q_pe, kv, k_pe, out]))
    return reports, out, m.ref_program(q, q_pe, kv, k_pe)


@pytest.mark.parametrize("seqlen, batch, heads", [(200, 1, 64), (131, 2, 128), (50, 1, 64)],
                         ids=["4-blocks", "3-blocks-ragged-two-tiles-per-block", "1-block"])
def test_the_emulator_runs_the_seesaw_to_the_right_numbers(example, seqlen, batch, heads):
    m, func = mla(example, batch=batch, heads=heads, seqlen=seqlen)
    lowered = E.lower(func, "sm_90a", {"tl.enable_persistent_tiles": 1})
    assert "tc::warpgroup_index()" in emit_cuda(lowered)[0]
    reports, out, want = run(m, lowered, seqlen, batch, heads)
    assert reports == []
    np.testing.assert_allclose(out.astype(np.float32), want, atol=1e-2, rtol=1e-2)


def _calls(name, barrier):
    def match(s):
        call = getattr(s, "value", None)
        return getattr(call, "name", "") == name and \
            getattr(call.args[0], "value", None) == barrier
    return match


def test_a_handoff_never_published_is_a_deadlock(example):
    m, func = mla(example)
    lowered = plant(E.lower(func, "sm_90a"), _calls("tc::named_barrier_arrive", 2), dropped)
    reports, _, _ = run(m, lowered, 200, 1, 64)
    assert any(r.kind == "deadlock" and "barrier 2" in r.message for r in reports)


def test_without_the_warpgroup_barrier_p_overwrites_keys_another_warp_reads(example):
    m, func = mla(example)
    lowered = plant(E.lower(func, "sm_90a"), _calls("tc::named_barrier_sync", 4), dropped)
    reports, _, _ = run(m, lowered, 200, 1, 64)
    assert any(r.kind == "race" and "K_pe_shared" in r.message for r in reports)
