"""pingpong_warpgroups: the consumer warpgroups of a rotated attention loop take turns issuing
their wgmma batches over named barriers 2 + warpgroup, in one copy of the loop. The emulator
(which runs each warpgroup of a role as an agent of its own) runs such kernels, several tiles
per block included, to the right numbers with nothing reported, and reports the deadlock when
the first turn is never handed over. Loops that are not rotated, or whose warpgroups share
rows, are left as they are."""
import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines

from test_emulator_checker import dropped, plant

SMEM = 227 * 1024
OFF = {"tl.disable_warpgroup_pingpong": True}


def attention(example, seq_len=256, causal=False, stages=3):
    fa = example("flash_attention")
    return fa, underlying(fa.flash_attention)(1, 2, seq_len, 64, causal, block_M=128,
                                              block_N=64, num_stages=stages, threads=256)


def cuda(func, configs=None):
    return emit_cuda(pipelines.cuda(func, "sm_90a", SMEM, configs))[0]


def test_warpgroups_take_turns_over_the_issue_of_both_batches(example):
    _, func = attention(example)
    text = cuda(func, {"tl.enable_persistent_tiles": True})
    consumers = text[text.index("} else {"):]
    # warpgroup 1 hands warpgroup 0 the first turn, once, after the register raise (in a
    # persistent kernel, before the loop over tiles)
    assert consumers.index("tc::setmaxnreg_inc") < \
        consumers.index("if (tx / 128 == 1) {\n      tc::named_barrier_arrive(2, 256);") < \
        consumers.index("for (int tc_tile")
    # one copy of the loop: wait for the turn, issue both batches, hand the turn on
    assert text.count("for (int k = 1; k < ") == 1
    loop = text[text.index("for (int k = 1; k < "):]
    issue = loop[loop.index("tc::named_barrier_sync(2 + tx / 128, 256);"):
                 loop.index("tc::named_barrier_arrive(2 + (tx / 128 + 1) % 2, 256);")]
    assert issue.count("tc::wgmma_commit_group();") == 2 and "wgmma_wait_group" not in issue
    assert loop.index("tc::named_barrier_sync(2 + tx / 128") < loop.index("wgmma_m64n")
    off = cuda(func, OFF)
    assert "named_barrier_arrive" not in off and "tx / 128 ==" not in off


@pytest.mark.parametrize("name", ["two-stage attention", "mla", "gemm"])
def test_loops_not_rotated_or_sharing_rows_are_left_as_they_are(example, name):
    if name == "two-stage attention":
        func = attention(example, stages=2)[1]
    elif name == "mla":
        func = underlying(example("mla_decode").flash_mla_decode)(
            2, 64, 1, 200, 128, 64, block_N=64, block_H=64, num_stages=2, threads=256)
    else:
        func = underlying(example("gemm").matmul)(256, 256, 256, block_M=128, block_N=256,
                                                  block_K=64, threads=256, num_stages=3)
    assert cuda(func) == cuda(func, OFF)


def run(fa, lowered, seq_len, causal, seed=5):
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.standard_normal((1, seq_len, 2, 64)).astype(np.float16) for _ in range(3))
    O = np.zeros_like(Q)
    return list(E.run(lowered, [Q, K, V, O])), O, fa.ref_program(Q, K, V, causal)


@pytest.mark.parametrize("seq_len, causal, configs", [
    (256, False, None), (200, True, None),
    (520, True, {"tl.enable_persistent_tiles": 2}),   # several tiles per block
], ids=["256", "200-causal", "520-causal-two-blocks"])
def test_the_emulator_runs_the_turns_to_the_right_numbers(example, seq_len, causal, configs):
    fa, func = attention(example, seq_len, causal)
    lowered = E.lower(func, "sm_90a", configs)
    assert "named_barrier_sync(2 + tx / 128" in emit_cuda(lowered)[0]
    reports, O, want = run(fa, lowered, seq_len, causal)
    assert reports == []
    np.testing.assert_allclose(O.astype(np.float32), want, atol=1e-2, rtol=1e-2)


def test_a_first_turn_never_handed_over_is_a_deadlock(example):
    fa, func = attention(example)
    lowered = E.lower(func, "sm_90a")

    def first_turn(s):
        call = getattr(getattr(s, "then_body", None), "value", None)
        return type(s).__name__ == "IfThenElse" and getattr(call, "name", "") == \
            "tc::named_barrier_arrive" and getattr(call.args[0], "value", None) == 2
    bad = plant(lowered, first_turn, dropped)
    reports, _, _ = run(fa, bad, 256, False)
    dead = [r for r in reports if r.kind == "deadlock"]
    assert dead and any("barrier 2" in r.message for r in dead)



def test_one_lock_step_group_on_several_barriers_is_an_error_not_a_guess(example, monkeypatch):
    # Were the warpgroups one lock-step agent, the turn barrier would differ between their
    # threads in one statement: the emulator says so instead of picking one thread's number.
    import tilecraft.backends.cuda.emulator.agents as agents
    from tilecraft.errors import TileError
    monkeypatch.setattr(agents, "_warpgroups", lambda live: [live])
    fa, func = attention(example)
    with pytest.raises(TileError, match="named barriers 2, 3 used by the threads of one"):
        run(fa, E.lower(func, "sm_90a"), 256, False)
