"""The producer's L2 prefetch of the next iteration's tiles (tileops/prefetch.py): only tiles that
at most two blocks read and that are one contiguous byte range, guarded so that the last
(ragged) block is never prefetched past its tensor; the emulator runs the prefetching kernel
clean and reports the prefetch that leaves its tensor once the guard is taken out."""
import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir import dtypes as dt
from tilecraft.ir.buffer import Buffer, BufferRegion
from tilecraft.ir.expr import const
from tilecraft.ir.stmt import For, IfThenElse, Kernel
from tilecraft.ir.tileop import Copy
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.tileops.prefetch import contiguous_bytes, readers_per_tile

from test_emulator_checker import calls, plant
from test_seesaw_warpgroups import SMEM, mla, run

OFF = {"tl.disable_l2_prefetch": True}


def region(shape, extents, dtype="float16"):
    b = Buffer("X", tuple(shape), dt.dtype(dtype), "global", None)
    return BufferRegion(b, tuple((const(0), const(e)) for e in extents))


@pytest.mark.parametrize("shape, extents, want", [
    ((64, 1024, 1, 512), (1, 64, 1, 512), 65536),    # MLA's KV block: whole rows
    ((64, 1024, 1, 512), (1, 64, 1, 256), None),     # half rows: two ranges per row
    ((64, 1024, 1, 512), (2, 64, 1, 512), None),     # two sequences: a gap between them
    ((10, 8), (10, 8), 160),                         # the whole tensor
    ((10, 8), (3, 8), 48),                           # rows of 16 bytes
    ((10, 4), (3, 4), None),                         # rows of 8 bytes: not 16-byte aligned
])
def test_only_one_contiguous_16_byte_aligned_range_is_prefetched(shape, extents, want):
    assert contiguous_bytes(region(shape, extents)) == want


def loop_copies(func):
    k = next(n for n in walk(func.body) if isinstance(n, Kernel))
    loop = next(n for n in walk(k.body) if isinstance(n, For) and n.kind == "pipelined")
    return k, loop, {c.src.buffer.name: c for c in walk(loop.body) if isinstance(c, Copy)}


def test_readers_per_tile_mla_streams_attention_and_gemm_share(example):
    _, func = mla(example, batch=4, heads=128, seqlen=256)
    k, loop, copies = loop_copies(func)
    assert readers_per_tile(k, loop, copies["KV"]) == 2       # the two head groups
    assert readers_per_tile(k, loop, copies["K_pe"]) == 2
    fa = underlying(example("flash_attention").flash_attention)(2, 4, 512, 64, False,
                                                                 block_M=64, block_N=64)
    k, loop, copies = loop_copies(fa)
    assert readers_per_tile(k, loop, copies["K"]) == 8        # every query block of a head
    gemm = example("gemm").matmul.factory(512, 512, 256, block_M=128, block_N=128)
    k, loop, copies = loop_copies(gemm)
    assert readers_per_tile(k, loop, copies["A"]) == 4 and readers_per_tile(
        k, loop, copies["B"]) == 4


def source(func, configs=None):
    return emit_cuda(pipelines.cuda(func, "sm_90a", SMEM, configs))[0]


def test_mla_prefetches_the_next_kv_block_guarded_attention_and_gemm_do_not(example):
    _, func = mla(example, batch=2, heads=128, seqlen=200)
    text = source(func)
    producer = text[text.index("tc::is_producer_leader"):text.index("tc::setmaxnreg_inc")]
    assert producer.count("tc::prefetch_l2(") == 2
    assert "tc::prefetch_l2((&KV[" in producer and ", 8192);" in producer   # 64 x 64 halves
    # the next block must exist and lie wholly inside the cache (200 = 3 x 64 + 8)
    assert "k + 1 < 4" in producer and "* 64 + 64 <= 200" in producer
    assert "prefetch_l2" not in source(func, OFF)
    fa = underlying(example("flash_attention").flash_attention)(2, 4, 512, 64, False,
                                                                 block_M=64, block_N=64,
                                                                 num_stages=2, threads=128)
    gemm = example("gemm").matmul.factory(512, 512, 256, block_M=128, block_N=128,
                                          block_K=32, num_stages=3, threads=128)
    for other in (fa, gemm):
        text = source(other)
        assert "tc::is_producer_leader" in text and "prefetch_l2" not in text


def test_the_emulator_runs_the_prefetching_kernel_clean_and_finds_an_unguarded_one(example):
    m, func = mla(example, batch=1, heads=64, seqlen=131)     # 3 blocks, the last ragged
    lowered = E.lower(func, "sm_90a")
    assert "tc::prefetch_l2(" in emit_cuda(lowered)[0]
    reports, out, want = run(m, lowered, 131, 1, 64)
    assert reports == []
    np.testing.assert_allclose(out.astype(np.float32), want, atol=1e-2, rtol=1e-2)

    def guarded(s):
        return isinstance(s, IfThenElse) and calls("tc::prefetch_l2")(s.then_body)
    bare = plant(lowered, guarded, lambda s: s.then_body, which=1)   # the rotary keys' prefetch
    reports, _, _ = run(m, bare, 131, 1, 64)
    assert any(r.kind == "out-of-bounds" and "K_pe" in r.message and "L2 prefetch" in
               r.message for r in reports)


def gathered_tiles(n=8, block=64, N=64):
    """A pipelined loop whose tile's place is read from memory (Idx)."""
    import tilecraft.language as T

    @T.prim_func
    def main(X: T.Tensor((n * block, N), "float16"), Idx: T.Tensor((n,), "int32"),
             Y: T.Tensor((block, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            X_s = T.alloc_shared((block, N), "float16")
            acc = T.alloc_fragment((block, N), "float32")
            T.clear(acc)
            for i in T.Pipelined(n, num_stages=2):
                T.copy(X[Idx[i] * block:(Idx[i] + 1) * block, :], X_s)
                for a, b in T.Parallel(block, N):
                    acc[a, b] += X_s[a, b]
            T.copy(acc, Y)
    return main


@pytest.mark.parametrize("target", ["emulator:sm_90a", "emulator"])
def test_a_tile_placed_by_values_in_memory_is_loaded_without_a_prefetch(target):
    """The readers of such a tile cannot be counted at compile time: no prefetch, no crash."""
    import tilecraft
    func = gathered_tiles()
    source = emit_cuda(pipelines.cuda(func, "sm_90a", SMEM))[0]
    assert "prefetch_l2" not in source and "mbarrier" in source
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8 * 64, 64)).astype(np.float16)
    Idx = np.array([3, 1, 4, 1, 5, 2, 6, 0], np.int32)
    Y = np.full((64, 64), np.nan, np.float32)
    kernel = tilecraft.compile(func, target=target)
    kernel(X, Idx, Y)
    assert not kernel.reports
    want = sum(X[j * 64:(j + 1) * 64].astype(np.float32) for j in Idx)
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-4)


def test_a_tile_ragged_along_a_dimension_the_loop_does_not_move_is_guarded(example):
    """The dequantize GEMM's scale tile (64 rows of a 70-row tensor, block bx = 1 ragged at
    every k): the guard bounds the rows too, not only the dimension k moves, and the emulator
    runs the kernel with nothing reported."""
    mod = example("dequant_gemm")
    M, N, K, group = 37, 70, 256, 32
    func = underlying(mod.dequant_gemm)(M, N, K, group, block_M=32, block_N=64, block_K=64,
                                       num_stages=2, threads=128, weight_in_registers=True)
    lowered = E.lower(func, "sm_90a")
    text = emit_cuda(lowered)[0]
    assert "tc::prefetch_l2((&Scale[" in text and "bx * 64 + 64 <= 70" in text
    A, B, S = mod.make_inputs(M, N, K, group, seed=6)
    C = np.full((M, N), np.nan, np.float16)
    assert list(E.run(lowered, [A, B, S, C])) == []
    np.testing.assert_allclose(C.astype(np.float32), mod.ref_program(A, B, S, group),
                               rtol=2e-2, atol=2e-2)
