"""tileops.lowering.hoistable_offset: in a kernel whose fragments fill a thread's registers, a
swizzled shared-memory offset read in unrolled loops is rewritten so its per-thread part does
not depend on the iteration (iteration 0's term, plus or XOR-ed with a constant of the
iteration). The rewrite keeps every offset of every thread and iteration, is made only where
the registers are tight, and the rewritten kernels compute what the interpreter computes."""
import numpy as np
import pytest

import tilecraft.backends.cuda.tileops.lowering as L
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir.expr import Binary, Var, binary
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda import pipeline as pipelines

from test_emulator_examples import compare, half, qkv

SM80 = {"tl.enable_fast_math": True, "tl.disable_warp_specialized": True,
        "tl.disable_tma_lower": True, "tl.disable_wgmma": True}


def swizzled_ldmatrix_offset(tx, kk, ni):
    """A K tile's ldmatrix.x4 offset as the gemm lowering writes it (64-element rows, 16-byte
    chunks XOR-ed with the row)."""
    chunk = binary("+", binary("*", kk, 16), binary("*", tx % 32 // 8 % 2, 8))
    return (binary("*", binary("^", chunk % 64 // 8, tx % 32 % 8), 8) + chunk // 64 * 4096 +
            ni * 1024 + tx % 32 // 16 * 512 + tx % 32 % 8 * 64)


def context(tight: bool):
    tx = Var("tx")
    ctx = L.ThreadContext(tx, 128, None)
    ctx.var_bounds[id(tx)] = (0, 127)
    ctx.fragment_registers = L.TIGHT_REGISTERS + (1 if tight else -1)
    return ctx


def test_every_offset_is_kept_and_the_thread_part_leaves_the_loop():
    ctx = context(tight=True)
    kk, ni = ctx.fresh("kk", 8), ctx.fresh("ni", 4)
    e = swizzled_ldmatrix_offset(ctx.tx, kk, ni)
    out = L.hoistable_offset(e, ctx, [(kk, 8), (ni, 4)])
    assert out is not e
    env = {id(ctx.tx): np.arange(128)[:, None, None], id(kk): np.arange(8)[None, :, None],
           id(ni): np.arange(4)[None, None, :]}
    np.testing.assert_array_equal(L.evaluate_table(out, env), L.evaluate_table(e, env))
    # Some XOR now has a side that depends on the thread alone.
    sides = [(n.a, n.b) for n in walk(out) if isinstance(n, Binary) and n.op == "^"]
    assert any(not L.uses_var(a, kk) and L.uses_var(a, ctx.tx) and L.uses_var(b, kk)
               and not L.uses_var(b, ctx.tx) for a, b in sides)


def test_left_as_written_where_the_registers_are_not_tight():
    ctx = context(tight=False)
    kk, ni = ctx.fresh("kk", 8), ctx.fresh("ni", 4)
    e = swizzled_ldmatrix_offset(ctx.tx, kk, ni)
    assert L.hoistable_offset(e, ctx, [(kk, 8), (ni, 4)]) is e


def attention_source(example, block_N, threads):
    func = underlying(example("flash_attention").flash_attention)(
        8, 32, 4096, 128, False, block_M=128, block_N=block_N, num_stages=2, threads=threads)
    return emit_cuda(pipelines.cuda(func, "sm_90a", 232448, SM80))[0]


@pytest.mark.parametrize("block_N, threads, rewritten", [(64, 128, True), (128, 256, False)])
def test_attention_offsets_rewritten_only_with_two_row_tiles_a_warp(example, block_N, threads,
                                                                    rewritten):
    # 128 query rows on four warps: the accumulators take ~280 registers a thread; on eight
    # warps ~200.
    src = attention_source(example, block_N, threads)
    k_reads = [line for line in src.splitlines() if "(&K_shared[" in line and "ldmatrix" in line]
    assert k_reads
    assert all(("^ kk * 16 % 64 / 8" in line) == rewritten for line in k_reads)


@pytest.fixture
def always_rewritten(monkeypatch):
    """Every gemm offset rewritten (small test tiles never fill the registers), nothing read
    from the disk cache; yields the list of offsets the gemm lowering had rewritten."""
    import tilecraft.backends.cuda.tileops.gemm as G
    monkeypatch.setattr(L, "TIGHT_REGISTERS", 0)
    monkeypatch.setenv("TILECRAFT_DISABLE_CACHE", "1")
    rewritten = []

    def spy(e, ctx, unrolled):
        out = L.hoistable_offset(e, ctx, unrolled)
        if out is not e:
            rewritten.append(out)
        return out
    monkeypatch.setattr(G, "hoistable_offset", spy)
    yield rewritten


def test_rewritten_gemm_computes_the_product(example, always_rewritten):
    rng = np.random.default_rng(3)
    A, B = half(rng, 72, 56), half(rng, 56, 40)
    compare(example("gemm").matmul, (72, 40, 56),
            dict(block_M=32, block_N=32, block_K=32, num_stages=2, threads=64), (A, B))
    assert always_rewritten


@pytest.mark.parametrize("is_causal", [False, True])
def test_rewritten_attention_computes_attention(example, always_rewritten, is_causal):
    # Head dim 64: four k steps of QK^T, the swizzle XOR differs between them.
    inputs = qkv(np.random.default_rng(5), 1, 77, 2, 64)
    compare(example("flash_attention").flash_attention, (1, 2, 77, 64, is_causal),
            dict(block_M=64, block_N=32, num_stages=2, threads=64), inputs)
    assert always_rewritten
