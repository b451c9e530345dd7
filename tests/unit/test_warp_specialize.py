"""Warp specialization with TMA on sm_90a, checked on the IR and the CUDA text (no GPU)."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.codegen.cuda import emit_cuda, kernel_signature
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.schedule.warp_specialize import consumer_registers
from tilecraft.backends.cuda.runtime.program import CudaProgram

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402


def gemm(M=1024, N=1024, K=512, bm=128, bn=256, bk=64, threads=256, stages=3, trans_B=False):
    return kernels.gemm(M, N, K, bm, bn, bk, "float16", "float32", False, trans_B, threads,
                        False, T.GemmWarpPolicy.Square, stages)


def source(func, configs=None):
    return emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024, configs))[0]


def test_producer_warpgroup_issues_tma_and_consumers_compute():
    text = source(gemm())
    assert "__launch_bounds__(384, 1)" in text
    producer, consumer = text.split("} else {", 1)
    assert "tc::is_producer_thread(256)" in producer and "tc::tma_load_2d" in producer
    assert "tc::mbarrier_arrive_expect_tx" in producer and "wgmma" not in producer
    assert "tc::wgmma_m64n256k16" in consumer and "tma_load" not in consumer
    # registers move from the producer to the two consumer warpgroups
    assert "tc::setmaxnreg_dec<40>" in producer and "tc::setmaxnreg_inc<232>" in consumer
    # consumers never wait on a barrier the producer does not reach
    assert "tc::syncthreads()" not in consumer


def test_tensor_maps_are_kernel_parameters_with_the_tile_boxes():
    lowered = pipelines.cuda(gemm(), "sm_90a", 227 * 1024)
    maps = [obj for kind, obj in kernel_signature(lowered) if kind == "tensormap"]
    boxes = {(m.buffer.name, m.box, m.swizzle) for m in maps}
    # A tile 128 x 64 is one 128-byte-swizzled box; B tile 64 x 256 is four 64-column slabs;
    # the epilogue's staged C tile 128 x 256 leaves as four TMA stores of 128 x 64.
    assert boxes == {("A", (128, 64), "128B"), ("B", (64, 64), "128B"),
                     ("C", (128, 64), "128B")}
    text = emit_cuda(lowered)[0]
    assert "const __grid_constant__ tc::TensorMap A_tma" in text
    assert text.count("tc::tma_load_2d(") == 5


def test_a_loop_of_one_iteration_keeps_the_block_to_its_threads():
    """K = block_K: nothing to overlap, so no producer warpgroup (its registers would cost
    blocks per SM) and one version of the tiles besides the one being filled."""
    text = source(gemm(K=64, stages=4))
    assert "__launch_bounds__(256" in text and "tma_load" not in text
    assert "tc::cp_async_cg_16" in text and "tc::cp_async_wait<0>" in text
    assert "tc::is_producer_thread" in source(gemm(K=128, stages=4))   # two: overlapped


def test_the_launcher_encodes_maps_from_the_tensor_arguments():
    program = CudaProgram(gemm(), "sm_90a")
    assert ("tensormap",) in program.param_kinds
    assert ("tensormap", (0, (128, 64), "128B", None)) in program.positions
    assert program.launches[0][2] == 384


def test_mbarrier_ring_phases():
    text = source(gemm(stages=3))
    assert "tc::mbarrier_wait_parity((&tma_empty[k % 3]), k / 3 % 2 ^ 1)" in text
    assert "tc::mbarrier_wait_parity((&tma_full[k % 3]), k / 3 % 2)" in text
    assert "tc::mbarrier_init((&tma_empty[0]), 8)" in text  # one arrival per consumer warp


@pytest.mark.parametrize("configs", [{"tl.disable_warp_specialized": True},
                                     {"tl.disable_tma_lower": True}])
def test_pass_configs_turn_it_off(configs):
    text = source(gemm(), configs)
    assert "tma_load" not in text and "cp_async" in text


def test_copies_tma_cannot_do_keep_the_cp_async_pipeline():
    # K = 100 fp16: rows of A are 200 bytes apart, not a multiple of 16 as TMA requires
    text = source(gemm(K=100))
    assert "tma_load" not in text and "cp_async" in text


def test_older_gpus_are_not_warp_specialized():
    text = emit_cuda(pipelines.cuda(gemm(), "sm_80", 163 * 1024))[0]
    assert "tma_load" not in text and "is_producer_thread" not in text


def test_register_split():
    assert consumer_registers(128) is None  # 256 threads: every thread may have 255 already
    assert consumer_registers(256) == 232
    assert consumer_registers(384) == 152
    # 640 threads are launched with 96 registers each (61440, not the file's 65536): the
    # consumers may take only what that holds, or setmaxnreg.inc never returns
    assert consumer_registers(512) == 104


@pytest.mark.parametrize("consumers", [256, 384, 512, 640, 768, 896])
def test_register_split_fits_what_the_block_was_launched_with(consumers):
    from tilecraft.backends.cuda.schedule.warp_specialize import (
        PRODUCER_REGISTERS, PRODUCER_THREAD_COUNT, launch_registers)
    total = consumers + PRODUCER_THREAD_COUNT
    regs = consumer_registers(consumers)
    assert regs % 8 == 0 and regs >= launch_registers(total)
    assert regs * consumers + PRODUCER_REGISTERS * PRODUCER_THREAD_COUNT <= \
        launch_registers(total) * total


def _copies(func):
    from tilecraft.ir.tileop import Copy
    from tilecraft.ir.visitor import walk
    return [n for n in walk(func) if isinstance(n, Copy) and n.src.buffer.scope == "global"]


def test_tma_boxes_follow_the_tile_layout():
    from tilecraft.backends.cuda.tileops.tma import tma_plan
    a_copy, b_copy = _copies(gemm(bm=128, bn=256, bk=64))
    a, b = tma_plan(a_copy), tma_plan(b_copy)
    # A 128 x 64 fp16: one 128-byte-swizzled box; B 64 x 256: four slabs of 64 columns
    assert (a.box, a.swizzle, a.slabs, a.bytes) == ((128, 64), "128B", 1, 128 * 64 * 2)
    assert (b.box, b.swizzle, b.slabs, b.bytes) == ((64, 64), "128B", 4, 64 * 256 * 2)
    a32 = tma_plan(_copies(gemm(bm=64, bn=64, bk=32))[0])
    assert (a32.box, a32.swizzle) == ((64, 32), "64B")


def test_four_dimensional_attention_tiles_are_one_box_per_slab():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import flash_attention as fa
    from tilecraft.carver.recommend import underlying
    from tilecraft.backends.cuda.tileops.tma import tma_plan
    func = underlying(fa.flash_attention)(2, 4, 256, 128, False, block_M=128, block_N=128,
                                          num_stages=2, threads=256)
    plans = [tma_plan(c) for c in _copies(func)]
    k = [p for p in plans if p is not None and p.rank == 4]
    # K[b, n0:n0+128, h, :] -> box (1, 128, 1, 64) per 64-column slab of the 128-wide tile
    assert k and all(p.box == (1, 128, 1, 64) and p.slabs == 2 for p in k)


@pytest.mark.parametrize("K", [100, 36])
def test_row_strides_tma_cannot_address_are_refused(K):
    from tilecraft.backends.cuda.tileops.tma import tma_plan
    a_copy = _copies(gemm(K=K))[0]   # rows of A are 2K bytes apart: not a multiple of 16
    assert tma_plan(a_copy) is None


def row_of_floats(n, seq=1024):
    @T.prim_func
    def main(X: T.Tensor((4, seq), "float32"), Y: T.Tensor((4, seq), "float32")):
        with T.Kernel(4, threads=128) as bx:
            row = T.alloc_shared((n,), "float32")
            acc = T.alloc_fragment((n,), "float32")
            T.clear(acc)
            for k in T.Pipelined(seq // n, num_stages=2):
                T.copy(X[bx, k * n:(k + 1) * n], row)
                for i in T.Parallel(n):
                    acc[i] += row[i]
            T.copy(acc, Y[bx, 0:n])
    return main


@pytest.mark.parametrize("n, box", [(64, (1, 64)), (256, (1, 256)), (16, None), (40, None)])
def test_one_dimensional_tiles_are_one_row_box(n, box):
    """A [n] tile is one TMA box of one row when its bytes are whole 128-byte units (every
    version of it in the ring then starts where a bulk copy may write), else it stays on
    cp.async; a warp-specialized ring of it is placed at a 128-byte boundary."""
    from tilecraft.backends.cuda.tileops.tma import tma_plan
    plan = tma_plan(_copies(row_of_floats(n))[0])
    assert (plan.box if plan else None) == box
    src = source(row_of_floats(n))
    assert ("tc::tma_load_2d" in src) == (box is not None)
    if box is not None:
        import re
        offset = int(re.search(r"row = reinterpret_cast<float\*>\(tc_smem \+ (\d+)\)",
                               src).group(1))
        assert offset % 128 == 0


def test_tiles_first_read_by_different_statements_get_their_own_barriers():
    """Attention's K is read by the first gemm and V only after the softmax: each has its own
    full / empty pair, waited for right before its reader and released right after it, while
    a GEMM's A and B (read by the same gemm) share one pair as before."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import flash_attention as fa
    from tilecraft.carver.recommend import underlying
    func = underlying(fa.flash_attention)(2, 4, 1024, 128, False, block_M=128, block_N=128,
                                          num_stages=2, threads=256)
    text = source(func, {"tl.enable_persistent_tiles": False})
    producer, consumer = text.split("} else {", 1)
    assert "tc::mbarrier_init((&tma_full[3]), 1)" in text      # 2 groups x 2 stages
    assert "tc::mbarrier_arrive_expect_tx((&tma_full[k % 2]), 32768)" in producer
    assert "tc::mbarrier_arrive_expect_tx((&tma_full[k % 2 + 2]), 32768)" in producer
    order = [consumer.index(s) for s in (
        "tc::mbarrier_wait_parity((&tma_full[k % 2]), k / 2 % 2)", "wgmma_m64n128k16_f32_f16<",
        "tc::mbarrier_arrive_warp((&tma_empty[k % 2]))", "exp2f(",
        "tc::mbarrier_wait_parity((&tma_full[k % 2 + 2]), k / 2 % 2)",
        "wgmma_m64n128k16_f32_f16_rs", "tc::mbarrier_arrive_warp((&tma_empty[k % 2 + 2]))")]
    assert order == sorted(order)
    gemm_text = source(gemm(stages=3))
    assert "tc::mbarrier_init((&tma_full[2]), 1)" in gemm_text      # one group x 3 stages
    assert "tma_full[3]" not in gemm_text and "tma_empty[3]" not in gemm_text


def _attention(example, **configs):
    fa = example("flash_attention")
    from tilecraft.carver.recommend import underlying
    # 8 x 4 heads x 8 query tiles: two waves, where the query's load stays the consumers'
    func = underlying(fa.flash_attention)(8, 4, 1000, 128, True, block_M=128, block_N=128,
                                         threads=256, num_stages=3)
    return source(func, configs)


PRELOAD = {"tl.enable_producer_preload": True}


def test_the_query_tile_before_the_loop_can_be_loaded_by_the_producer(example):
    text = _attention(example, **PRELOAD)
    producer, consumer = text.split("} else {", 1)
    # issued once, before the loop's first stage, on a barrier of its own
    assert "tc::mbarrier_arrive_expect_tx((&tma_ready[0]), 32768);" in producer
    assert producer.index("(&Q_tma), (&tma_ready[0])") < producer.index("for (int k")
    assert "tc::mbarrier_init((&tma_ready[0]), 1);" in text
    # the consumers wait for it instead of loading Q themselves
    assert "tc::mbarrier_wait_parity((&tma_ready[0]), 0);" in consumer
    assert "Q[" not in consumer and "tma_load" not in consumer


def test_by_default_and_in_persistent_kernels_the_consumers_load_the_query(example):
    for configs in ({}, {**PRELOAD, "tl.enable_persistent_tiles": True}):
        text = _attention(example, **configs)
        producer, consumer = text.split("} else {", 1)
        assert "tma_ready" not in text and "Q_tma" not in producer
        assert "(&Q[" in consumer and "tc::st_shared_128((&Q_shared[" in consumer


def compacted_list_sum(n_tiles=6, blk=32, D=32):
    """Sums the tiles of X that Sel selects, through a list the block compacts in shared memory
    before the pipelined loop: the loop's count and its copies' rows read block state."""
    @T.prim_func
    def main(X: T.Tensor((n_tiles * blk, D), "float16"), Sel: T.Tensor((n_tiles,), "int32"),
             Y: T.Tensor((blk, D), "float32")):
        with T.Kernel(1, threads=128) as bx:
            chosen = T.alloc_shared((n_tiles,), "int32")
            count = T.alloc_var("int32", init=0)
            tile = T.alloc_shared((blk, D), "float16")
            acc = T.alloc_fragment((blk, D), "float32")
            for n in T.serial(n_tiles):
                if Sel[n] != 0:
                    chosen[count] = n
                    count += 1
            T.clear(acc)
            for i in T.Pipelined(count, num_stages=2):
                T.copy(X[chosen[i] * blk, 0], tile)
                for r, c in T.Parallel(blk, D):
                    acc[r, c] += tile[r, c]
            T.copy(acc, Y)
    return main


def test_a_loop_over_a_list_the_block_compacted_keeps_the_cp_async_pipeline():
    # a producer warp would read the list and the count before the consumers wrote them
    X = np.random.default_rng(0).uniform(-1, 1, (6 * 32, 32)).astype(np.float16)
    Sel = np.array([1, 0, 1, 1, 0, 1], np.int32)
    want = X.reshape(6, 32, 32)[Sel != 0].astype(np.float32).sum(0)
    kernel = tilecraft.compile(compacted_list_sum(), out_idx=[-1], target="emulator:sm_90a")
    np.testing.assert_allclose(kernel(X, Sel), want, rtol=1e-5, atol=1e-5)
    assert kernel.reports == []
    text = tilecraft.compile(compacted_list_sum(), target="sm_90a").get_kernel_source()
    assert "is_producer_thread" not in text and "cp_async" in text
