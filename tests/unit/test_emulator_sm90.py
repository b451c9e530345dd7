"""The emulator runs kernels through the sm_90a pipeline: wgmma through shared-memory
descriptors, TMA loads into swizzled tiles, and warp-specialized loops whose producer and
consumers progress independently on mbarriers. The examples agree with numpy and the
interpreter with nothing reported; planted bugs (an mbarrier phase that never completes, a wrong
descriptor, a stage released early, a missing proxy fence) are found."""
import dataclasses
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft
import tilecraft.backends.cuda.emulator as E
import tilecraft.language as T
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.emulator.hopper import canonical_offsets, decode, swizzle
from tilecraft.ir import dtypes as dt
from tilecraft.ir.expr import Call, Const
from tilecraft.ir.stmt import Evaluate, SeqStmt
from tilecraft.ir.visitor import Mutator, walk
from tilecraft.layout.swizzle import make_xor_swizzle

from test_emulator_checker import calls, dropped, plant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402

NO_WS = {"tl.disable_warp_specialized": True}


def line_of(fn, text) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def gemm_case(example, M, N, K, configs=None, **tiles):
    mod = example("gemm")
    config = dict(block_M=64, block_N=64, block_K=32, num_stages=2, threads=128)
    config.update(tiles)
    func = underlying(mod.matmul)(M, N, K, **config)
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    return mod, E.lower(func, "sm_90a", configs), A, B


def run_gemm(lowered, A, B):
    """(max abs error against numpy, reports)."""
    C = np.zeros((A.shape[0], B.shape[1]), np.float16)
    reports = list(E.run(lowered, [A, B, C]))
    want = A.astype(np.float32) @ B.astype(np.float32)
    return float(np.nan_to_num(np.abs(C.astype(np.float32) - want), nan=1e9).max()), reports


# --- the sm_90a path agrees with numpy and the interpreter ---------------------------------
@pytest.mark.parametrize("ws", [True, False], ids=["warp-specialized", "cp.async"])
@pytest.mark.parametrize("M, N, K, tiles", [
    pytest.param(96, 80, 72, {}, id="96x80x72-b64x64x32"),
    pytest.param(130, 200, 80, dict(block_M=128, block_N=128, threads=256, num_stages=3),
                 id="130x200x80-b128x128x32-t256-s3"),
])
def test_gemm_example(example, ws, M, N, K, tiles):
    _, lowered, A, B = gemm_case(example, M, N, K, None if ws else NO_WS, **tiles)
    text = lowered.script()
    assert "tc::wgmma_m64n" in text and "tc::make_smem_desc" in text
    assert ("tc::tma_load_2d" in text) == ws and ("tc::cp_async" in text) != ws
    err, reports = run_gemm(lowered, A, B)
    assert reports == []
    assert err < 1e-2


@pytest.mark.parametrize("trans_A, trans_B, dtype, a_regs", [
    (True, True, "float16", False),      # M-major A, K-major B
    (False, True, "bfloat16", True),     # A from registers (the _rs form)
])
def test_gemm_operand_majors(trans_A, trans_B, dtype, a_regs):
    M, N, K = 80, 96, 112
    func = kernels.gemm(M, N, K, 64, 64, 32, dtype, "float32", trans_A, trans_B, 128, a_regs,
                        T.GemmWarpPolicy.Square, 2)
    lowered = E.lower(func, "sm_90a")
    assert ("_rs<" in lowered.script()) == a_regs
    rng = np.random.default_rng(1)
    np_type = dt.dtype(dtype).numpy
    A = rng.uniform(-1, 1, (K, M) if trans_A else (M, K)).astype(np_type)
    B = rng.uniform(-1, 1, (N, K) if trans_B else (K, N)).astype(np_type)
    C = np.zeros((M, N), np_type)
    assert list(E.run(lowered, [A, B, C])) == []
    a, b = A.astype(np.float32), B.astype(np.float32)
    want = (a.T if trans_A else a) @ (b.T if trans_B else b)
    np.testing.assert_allclose(C.astype(np.float32), want, atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("ws", [True, False], ids=["warp-specialized", "cp.async"])
@pytest.mark.parametrize("seq_len, is_causal, dim", [(40, True, 16), (77, False, 32)])
def test_flash_attention_example(example, ws, seq_len, is_causal, dim):
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 2, seq_len, dim, is_causal, block_M=64,
                                         block_N=32, num_stages=2)
    lowered = E.lower(func, "sm_90a", None if ws else NO_WS)
    text = lowered.script()
    assert "_rs<" in text and ("tc::tma_load_4d" in text) == ws
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((1, seq_len, 2, dim)).astype(np.float16) for _ in range(3))
    O = np.zeros_like(Q)
    assert list(E.run(lowered, [Q, K, V, O])) == []
    want = tilecraft.compile(func, out_idx=[-1], target="interp")(Q, K, V)
    np.testing.assert_allclose(O.astype(np.float32), want.astype(np.float32), atol=2e-3,
                               rtol=2e-3)
    np.testing.assert_allclose(O, fa.ref_program(Q, K, V, is_causal), atol=1e-2, rtol=1e-2)


# --- descriptors decode to the shared layouts the compiler stores tiles in -------------------
@pytest.mark.parametrize("rows, cols, k_major", [(64, 32, True), (64, 64, True),
                                                 (32, 128, False), (16, 64, False)])
def test_descriptor_addresses_follow_the_swizzled_layout(rows, cols, k_major):
    """Each k16 step's descriptor (as wgmma.py builds it) addresses exactly the bytes where
    layout.swizzle stores the operand's elements: K-major tiles are (mn, k), MN-major (k, mn)."""
    layout = make_xor_swizzle(rows, cols, 16, {128: "128B", 64: "64B", 32: "32B"}[
        min(cols * 2, 128)])
    width = min(cols * 2, 128)
    mode = {128: 1, 64: 2, 32: 3}[width]
    base = 2048
    table = layout.table()[..., 0] * 2 + base
    for kk in range((cols if k_major else rows) // 16):
        if k_major:
            start, lbo, extent = base + kk * 32, 16, rows
            want = table[:extent, kk * 16:kk * 16 + 16]
        else:
            start, lbo, extent = base + kk * 16 * width, rows * width, cols
            want = table[kk * 16:kk * 16 + 16, :extent].T
        got = swizzle(start + canonical_offsets(extent, k_major, mode, lbo, 8 * width, 2), mode)
        np.testing.assert_array_equal(got, want)
        desc = (start >> 4) | (lbo >> 4) << 16 | (8 * width >> 4) << 32 | mode << 62
        assert decode(desc) == (start, lbo, 8 * width, 0, mode)


class Rewrite(Mutator):
    """Replaces calls named `name` by fn(call)."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def visit_Call(self, c):
        c = self.generic_visit(c)
        return self.fn(c) if c.name == self.name else c


def calls_in(func) -> set:
    from tilecraft.ir.visitor import walk
    return {n.name for n in walk(func.body) if isinstance(n, Call)}


def with_arg(c, i, value):
    args = list(c.args)
    args[i] = Const(value, args[i].dtype)
    return Call(c.name, tuple(args), c.dtype, c.span)


@pytest.mark.parametrize("bug", ["A SBO", "B LBO", "B swizzle mode", "TransB flag"])
def test_a_wrong_descriptor_gives_wrong_numbers(example, bug):
    # N = 128: B (32 x 128, N-major) spans two 128-byte slabs, so its LBO matters
    _, lowered, A, B = gemm_case(example, 64, 128, 64, block_N=128)
    assert run_gemm(lowered, A, B) == (pytest.approx(0, abs=1e-2), [])
    if bug == "A SBO":      # A: 64 x 32 fp16, 64B swizzle, 8-row groups 512 bytes apart
        bad = Rewrite("tc::make_smem_desc",
                      lambda c: with_arg(c, 3, 256) if c.args[3].value == 512 else c)
    elif bug == "B LBO":    # B: slabs 32 rows x 128 bytes = 4096 bytes apart
        bad = Rewrite("tc::make_smem_desc",
                      lambda c: with_arg(c, 2, 2048) if c.args[2].value == 4096 else c)
    elif bug == "B swizzle mode":
        bad = Rewrite("tc::make_smem_desc",
                      lambda c: with_arg(c, 1, 2) if c.args[1].value == 1 else c)
    else:                   # B read as K-major
        name = next(n for n in calls_in(lowered) if n.startswith("tc::wgmma_m64"))
        assert name.endswith("<0, 1>")
        bad = Rewrite(name, lambda c: Call(name.replace("<0, 1>", "<0, 0>"), c.args, c.dtype,
                                           c.span))
    err, _ = run_gemm(bad.visit(lowered), A, B)
    assert err > 0.5


# --- planted synchronization bugs ------------------------------------------------------------
def test_missing_expect_tx_is_a_deadlock_on_the_full_barrier(example):
    gemm, lowered, A, B = gemm_case(example, 96, 80, 72)
    bad = plant(lowered, calls("tc::mbarrier_arrive_expect_tx"), dropped)
    _, reports = run_gemm(bad, A, B)
    dead = {r.buffer: r for r in reports if r.kind == "deadlock"}
    assert set(dead) == {"tma_full", "tma_empty"}
    loop = line_of(gemm.matmul, "T.Pipelined(")
    full = dead["tma_full"]
    assert full.lines == (loop,) and full.threads == tuple(range(128))
    assert "tma_full[0]" in full.message and "misses 1 of 1 arrival" in full.message
    assert f"gemm.py:{loop}" in str(full)
    assert dead["tma_empty"].threads == (128,)      # the producer's leader
    assert len(reports) == 2                        # the launch stops at the first deadlock


def test_wrong_producer_parity_is_a_deadlock(example):
    gemm, lowered, A, B = gemm_case(example, 96, 80, 72)

    def same_parity(s):   # wait for the consumers' release in round 0 too
        c = s.value
        return Evaluate(Call(c.name, (c.args[0], c.args[1].a), c.dtype, c.span), s.span)
    bad = plant(lowered, calls("tc::mbarrier_wait_parity"), same_parity, 0)
    _, reports = run_gemm(bad, A, B)
    dead = [r for r in reports if r.kind == "deadlock"]
    assert {r.buffer for r in dead} == {"tma_full", "tma_empty"}
    assert all(r.lines == (line_of(gemm.matmul, "T.Pipelined("),) for r in dead)
    assert "parity 0" in next(r for r in dead if r.buffer == "tma_empty").message


def test_named_barrier_over_too_many_threads_is_a_deadlock(example):
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 1, 40, 16, False, block_M=64, block_N=32,
                                         num_stages=2)
    lowered = E.lower(func, "sm_90a")
    # 128 consumers and a producer warp: a consumer barrier over all 160 threads of the block
    # waits for the producer warp, which never arrives.
    bad = plant(lowered, calls("tc::named_barrier_sync"),
                lambda s: Evaluate(with_arg(s.value, 1, 160), s.span), 0)
    Q = np.ones((1, 40, 1, 16), np.float16)
    reports = list(E.run(bad, [Q, Q, Q, Q * 0]))
    assert [r.kind for r in reports] == ["deadlock"]
    assert reports[0].buffer == "barrier 1" and "128 of its threads arrived" in reports[0].message


def test_consumers_releasing_a_stage_early(example):
    """Each consumer warp arrives on each empty barrier right after its wait on the matching
    full barrier instead of after its last reads: the producer refills the stages under it."""
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 2, 77, 32, True, block_M=64, block_N=32,
                                         num_stages=2)
    lowered = E.lower(func, "sm_90a", {"tl.disable_wgmma_rotation": True})
    release = calls("tc::mbarrier_arrive_warp")

    class Early(Mutator):
        def visit_For(self, s):
            s = self.generic_visit(s)
            body = s.body.stmts if isinstance(s.body, SeqStmt) else ()
            if not any(release(x) for x in body):
                return s
            # The tile groups are released in the order they are waited for.
            early = iter([x for x in body if release(x)])
            moved = []
            for x in body:
                if not release(x):
                    moved.append(x)
                if calls("tc::mbarrier_wait_parity")(x):
                    moved.append(next(early))
            return dataclasses.replace(s, body=SeqStmt(tuple(moved)))
    rng = np.random.default_rng(5)
    Q, K, V = (rng.standard_normal((1, 77, 2, 32)).astype(np.float16) for _ in range(3))
    O = np.zeros_like(Q)
    reports = list(E.run(Early().visit(lowered), [Q, K, V, O]))
    assert {r.buffer for r in reports if r.kind == "async-before-wait"} == \
        {"K_shared", "V_shared"}
    gemm_line = line_of(fa.attention_forward, "T.gemm(Q_shared")
    assert any(gemm_line in r.lines for r in reports)
    want = fa.ref_program(Q, K, V, True)
    assert np.abs(O.astype(np.float64) - want).max() > 0.1


def test_rotated_loop_releasing_v_while_its_batch_is_in_flight(example):
    """In the rotated attention loop, the V stage of iteration k - 1 is released only after the
    wgmma batch reading it has retired (wait_group 0). Released right after that batch is
    committed instead, the producer's TMA refills V under the tensor cores: the checker names
    the write into bytes an in-flight wgmma reads."""
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 1, 300, 32, False, block_M=64, block_N=32,
                                         num_stages=3)
    lowered = E.lower(func, "sm_90a")
    commit, release = calls("tc::wgmma_commit_group"), calls("tc::mbarrier_arrive_warp")
    planted = []

    class Early(Mutator):
        def visit_For(self, s):
            s = self.generic_visit(s)
            body = list(s.body.stmts) if isinstance(s.body, SeqStmt) else []
            if sum(1 for x in body if commit(x)) != 2 or \
                    not any(calls("tc::wgmma_wait_group<1>")(x) for x in body):
                return s
            v_release = [x for x in body if release(x)][-1]
            body.remove(v_release)
            second = [i for i, x in enumerate(body) if commit(x)][1]
            body.insert(second + 1, v_release)
            planted.append(True)
            return dataclasses.replace(s, body=SeqStmt(tuple(body)))
    bad = Early().visit(lowered)
    assert planted, "the loop was not rotated"
    rng = np.random.default_rng(6)
    Q, K, V = (rng.standard_normal((1, 300, 1, 32)).astype(np.float16) for _ in range(3))
    O = np.zeros_like(Q)
    reports = list(E.run(bad, [Q, K, V, O]))
    # (the unplanted kernel reports nothing: test_rotated_attention_loop_agrees_with_numpy)
    assert any(r.buffer == "V_shared" for r in reports), [str(r) for r in reports]


@pytest.mark.parametrize("persistent, fence", [(False, 0), (True, 1)],
                         ids=["plain", "persistent"])
def test_missing_proxy_fence_before_wgmma(example, persistent, fence):
    # (a persistent kernel's first fence publishes the previous tile's epilogue; the query
    # tile's writes are published by the second)
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 1, 40, 16, False, block_M=64, block_N=32,
                                         num_stages=2)
    lowered = E.lower(func, "sm_90a", {"tl.enable_persistent_tiles": persistent})
    bad = plant(lowered, calls("tc::fence_proxy_async_shared"), dropped, fence)
    Q = np.ones((1, 40, 1, 16), np.float16)
    reports = list(E.run(bad, [Q, Q, Q, Q * 0]))
    assert [r.kind for r in reports] == ["proxy-fence"]
    assert reports[0].buffer == "Q_shared"
    assert reports[0].lines == (line_of(fa.attention_forward, "T.gemm(Q_shared"),)


def test_accumulator_read_before_wgmma_wait(example):
    gemm, lowered, A, B = gemm_case(example, 64, 64, 64, configs=NO_WS)
    bad = plant(lowered, calls("tc::wgmma_wait_group<0>"), dropped, None)
    err, reports = run_gemm(bad, A, B)
    early = [r for r in reports if r.kind == "async-before-wait"]
    assert early and early[0].buffer == "C_local"
    assert early[0].lines[0] == line_of(gemm.matmul, "T.gemm(")
    assert "async-not-waited" in {r.kind for r in reports}


def test_consumers_not_waiting_for_the_tma(example):
    _, lowered, A, B = gemm_case(example, 96, 80, 72)
    bad = plant(lowered, calls("tc::mbarrier_wait_parity"), dropped, 1)
    _, reports = run_gemm(bad, A, B)
    found = {r.buffer for r in reports if r.kind == "async-before-wait"}
    # The epilogue's staging tile shares the ring's bytes, which the unwaited TMA still writes.
    assert {"A_shared", "B_shared"} <= found <= {"A_shared", "B_shared", "C_local_staged"}
    assert "has not waited for" in next(r for r in reports if r.buffer == "A_shared").message


def test_unknown_architecture():
    with pytest.raises(tilecraft.TileError, match="sm_90a"):
        E.lower(kernels.elementwise(32, 64), "sm_70")


def test_mbarriers_used_before_they_are_published_or_initialized(example):
    gemm, lowered, A, B = gemm_case(example, 96, 80, 72)
    # barrier_all publishes thread 0's mbarrier_init to the other threads
    _, reports = run_gemm(plant(lowered, calls("tc::barrier_all"), dropped), A, B)
    races = {r.buffer for r in reports if r.kind == "race"}
    assert races == {"tma_full", "tma_empty"}
    assert all("mbarrier_init" in r.message for r in reports)
    # the empty barrier of stage 0 never initialized
    _, reports = run_gemm(plant(lowered, calls("tc::mbarrier_init"), dropped, 2), A, B)
    kinds = {(r.kind, r.buffer) for r in reports}
    assert ("mbarrier", "tma_empty") in kinds and ("uninitialized", "tma_empty") in kinds


def test_target_names_pick_the_emulated_pipeline():
    from tilecraft.errors import TileError
    from tilecraft.placement import resolve
    assert resolve("emulator") == ("emulator", "sm_80")
    assert resolve("emulator:sm_90a") == ("emulator", "sm_90a")
    with pytest.raises(TileError, match="emulator runs the sm_80 and sm_90a pipelines"):
        resolve("emulator:sm_75")


def doubled_a_gemm(M, N, K, bm=64, bn=64, bk=32):
    """C = (2 A) B with the doubled A tile written by a T.Parallel loop every iteration (a
    computed wgmma operand, which the pipeline cannot run ahead as a copy)."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                for i, j in T.Parallel(bm, bk):
                    A_s[i, j] = A[by * bm + i, k * bk + j] * 2
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])
    return main


def test_a_wgmma_batch_kept_in_flight_over_a_rewritten_operand(monkeypatch):
    """The consumers write the doubled A tile (an operand of the wgmma) every iteration, so
    overlap_wgmma must leave its wait in place; with the legality check forced, the next
    iteration's stores land while the previous batch may still read the tile."""
    from tilecraft.backends.cuda.transforms import overlap_wgmma
    func = doubled_a_gemm(64, 64, 128)
    rng = np.random.default_rng(4)
    A = rng.uniform(-1, 1, (64, 128)).astype(np.float16)
    B = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
    C = np.zeros((64, 64), np.float16)
    kept = E.lower(func, "sm_90a")
    assert "tc::wgmma_wait_group<1>" not in kept.script()
    assert list(E.run(kept, [A, B, C])) == []
    monkeypatch.setattr(overlap_wgmma, "_only_wgmma_touches", lambda body, acc: True)
    forced = E.lower(func, "sm_90a")
    assert "tc::wgmma_wait_group<1>" in forced.script()
    reports = list(E.run(forced, [A, B, C]))
    races = [r for r in reports if r.kind == "race" and "wgmma" in r.message]
    assert races and races[0].buffer == "A_s"
    assert "may still be reading it" in races[0].message
    assert line_of(doubled_a_gemm, "T.gemm(") in races[0].lines


@pytest.mark.parametrize("seq, causal, block_N", [
    pytest.param(300, False, 32, id="s300-ragged"),
    pytest.param(77, True, 32, id="s77-causal-ragged"),
    pytest.param(40, False, 32, id="s40-two-iterations"),   # fewer iterations than stages
    pytest.param(20, False, 32, id="s20-one-iteration"),
    pytest.param(64, True, 16, id="s64-causal-bn16"),        # first query tile: 4 iterations
])
def test_rotated_attention_loop_agrees_with_numpy(example, seq, causal, block_N):
    """Attention with a three-stage ring: the consumer loop is rotated (batch 1 of iteration k
    in flight beside batch 2 of k - 1, the softmax between them), including trip counts below
    the ring's depth and causal tiles whose loops differ in length, with nothing reported."""
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 2, seq, 32, causal, block_M=64, block_N=block_N,
                                         num_stages=3)
    lowered = E.lower(func, "sm_90a")
    waits = [n.name for n in walk(lowered.body) if isinstance(n, Call) and
             n.name.startswith("tc::wgmma_wait_group")]
    assert "tc::wgmma_wait_group<1>" in waits, "the loop was not rotated"
    _attention_agrees_with_numpy(fa, lowered, seq, causal)


def test_two_stage_rings_are_not_rotated(example):
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 1, 300, 32, False, block_M=64, block_N=32,
                                         num_stages=2)
    names = {n.name for n in walk(E.lower(func, "sm_90a").body) if isinstance(n, Call)}
    assert "tc::wgmma_wait_group<1>" not in names and "tc::wgmma_wait_group<0>" in names


def _attention_agrees_with_numpy(fa, lowered, seq, causal):
    """Runs the lowered attention (batch 1, 2 heads, dim 32) on random inputs into a poisoned
    output: nothing reported and the output matches the example's float64 reference."""
    rng = np.random.default_rng(seq)
    Q, K, V = (rng.standard_normal((1, seq, 2, 32)).astype(np.float16) for _ in range(3))
    O = np.full_like(Q, np.nan)
    assert not list(E.run(lowered, [Q, K, V, O]))
    np.testing.assert_allclose(O.astype(np.float64), fa.ref_program(Q, K, V, causal),
                               atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("seq, causal", [(100, True), (40, False)])
def test_a_query_preloaded_by_the_producer_agrees_with_numpy(example, seq, causal):
    """tl.enable_producer_preload: the producer loads Q by TMA on its own barrier before the
    ring; the consumers' wait for it is all that orders their reads (nothing reported)."""
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 2, seq, 32, causal, block_M=64, block_N=32,
                                         num_stages=2)
    lowered = E.lower(func, "sm_90a", {"tl.enable_producer_preload": True})
    assert any(isinstance(n, Call) and n.name == "tc::mbarrier_wait_parity" and
               "tma_ready" in repr(n) for n in walk(lowered.body))
    _attention_agrees_with_numpy(fa, lowered, seq, causal)
