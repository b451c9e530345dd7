"""The cost model's traffic and operation counts against hand-computed values for the GEMM,
MHA and MLA examples' FTGs (each hand computation is written out beside its assertion)."""
import dataclasses
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import flash_attention  # noqa: E402
import gemm  # noqa: E402
import mla_decode  # noqa: E402

from tilecraft.analysis.l2model import grid_indices  # noqa: E402
from tilecraft.carver import estimate, get_target  # noqa: E402
from tilecraft.pass_config import PassConfigKey  # noqa: E402

KB = 1024
H100 = get_target("h100")
# The H100 planned as the mma.sync path (what the compiler emits with tl.disable_wgmma and on
# sm_80-class GPUs): the hand counts below are those of ldmatrix + mma.sync.
H100_MMA = dataclasses.replace(H100, arch="sm_80")


def gemm_func(M, N, K, **config):
    return gemm.matmul.__wrapped__(M, N, K, **config)


def test_gemm_small_single_wave():
    # 256^3, 64x64x32 tiles, 128 threads: grid 4 x 4 = 16 blocks, 8 K iterations each.
    c = estimate(gemm_func(256, 256, 256, block_M=64, block_N=64, block_K=32, num_stages=2),
                 H100_MMA)
    tile = 64 * 32 * 2                       # an A or B tile: 4 KB of fp16
    executions = 16 * 8
    assert c.num_blocks == 16 and c.waves == 1
    # L2 sees every tile load (A and B per iteration) and every C store (fp16).
    assert c.l2_bytes == executions * 2 * tile + 256 * 256 * 2
    # HBM: A and B (128 KB each) fit in half the L2, so each is fetched once.
    assert c.hbm_read == 2 * 256 * 256 * 2
    assert c.hbm_write == 256 * 256 * 2
    assert c.tensor_flops == 2 * 256 ** 3
    # CUDA cores: only the fp32 -> fp16 conversion of C on its way out.
    assert c.cuda_ops == 256 * 256 and c.sfu_ops == 0
    # Shared: each iteration writes both tiles; the gemm (2 x 2 warps on 64 x 64) reads A once
    # per warp column and B once per warp row: 2 * tile + 2 * tile.
    assert c.resources.warp_partitions == [("C_local", "Square", 2, 2)]
    assert c.smem_bytes == executions * (2 * tile + 2 * tile + 2 * tile)


def test_gemm_8192_cube_128x128x32():
    M = N = K = 8192
    c = estimate(gemm_func(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3,
                           threads=128), H100_MMA)
    gx = gy = 64
    iters = K // 32
    tile = 128 * 32 * 2                      # 8 KB, A and B alike
    # Registers: C fragment 128*128*4 B / 128 threads = 128 words; mma staging per k step
    # (2 x 2 warps: 4 A atoms x 4 regs + 8 B atoms x 2 regs = 32); 32 overhead -> 192.
    assert c.resources.regs_per_thread == 192
    # 4 warps x 192 regs x 32 lanes = 24576 registers -> 2 blocks per SM (65536 // 24576);
    # shared 3 stages x 16 KB = 48 KB would allow 4.
    assert c.resources.smem_per_block == 3 * 2 * tile
    assert (c.resources.blocks_per_sm, c.resources.occupancy_limit) == (2, "registers")
    wave = 132 * 2
    assert c.waves == math.ceil(gx * gy / wave) == 16
    # L2: every block loads one A and one B tile per iteration and stores its C tile.
    assert c.l2_bytes == gx * gy * iters * 2 * tile + M * N * 2
    # HBM: within a wave each distinct A row-tile (by) and B column-tile (bx) comes from HBM
    # once per iteration; no reuse across waves (A and B are 128 MB each, more than half of
    # the 50 MB L2). The model plans with the compiler's pipeline, so it sees the block order
    # the compiler chose (choose_rasterization: panels of 8 rows), which reads less than
    # launch order (bx fastest) would.
    def hbm_in_order(bx, by):
        hbm = 0
        for w in range(c.waves):
            blocks = slice(w * wave, min((w + 1) * wave, gx * gy))
            hbm += (len(set(by[blocks])) + len(set(bx[blocks]))) * tile * iters
        return hbm
    (counts,) = c.counts
    assert counts.swizzle == (8, "row")
    bx, by, _ = grid_indices((gx, gy, 1), *counts.swizzle)
    launch_x, launch_y, _ = grid_indices((gx, gy, 1), 0, "row")
    assert c.hbm_read == hbm_in_order(bx.tolist(), by.tolist())
    assert c.hbm_read < hbm_in_order(launch_x.tolist(), launch_y.tolist())
    assert c.hbm_write == M * N * 2
    assert c.tensor_flops == 2 * M * N * K
    assert c.cuda_ops == M * N                # the C conversion
    # Shared per iteration: two tile writes + A read by 2 warp columns + B by 2 warp rows.
    assert c.smem_bytes == gx * gy * iters * (2 * tile + 2 * tile + 2 * tile)
    # The roofline terms are these counts over the target's rates.
    assert c.terms["hbm"] == pytest.approx((c.hbm_read + M * N * 2) / H100.hbm_bw)
    assert c.terms["tensor"] == pytest.approx(
        2 * M * N * K / (H100.tensor_flops["float16"] * H100.mma_sync_fraction)
        * (32 * 132 / (gx * gy)))
    assert c.bound == max(c.terms, key=c.terms.get)
    assert c.time == pytest.approx(max(c.terms.values()) + c.t_intrinsic)


def test_gemm_swizzle_cuts_hbm_traffic():
    plain = estimate(gemm_func(8192, 8192, 8192), H100,
                     configs={PassConfigKey.TL_DISABLE_AUTO_RASTERIZATION: True})
    assert plain.counts[0].swizzle is None
    panel = estimate(gemm_func(8192, 8192, 8192, swizzle_panel=8), H100)
    assert panel.l2_bytes == plain.l2_bytes
    assert panel.hbm_read < 0.7 * plain.hbm_read


def test_mha_counts():
    # batch 1, 2 heads, seq 256, dim 64, not causal; 64 x 64 tiles, 1 stage, 128 threads.
    func = flash_attention.flash_attention.__wrapped__(1, 2, 256, 64, False, block_M=64,
                                                       block_N=64, num_stages=1, threads=128)
    c = estimate(func, H100_MMA)
    blocks, iters = 4 * 2, 4                  # grid (seq/64, heads, batch); 256/64 key tiles
    ex = blocks * iters
    tile = 64 * 64 * 2                        # a Q, K, V or O tile: 8 KB of fp16
    assert c.num_blocks == blocks
    # L2: Q once per block, K and V every iteration, O stored once per block.
    assert c.l2_bytes == blocks * tile + ex * 2 * tile + blocks * tile
    # HBM: one wave; Q tiles are distinct per block, the K / V tile of an iteration is shared
    # by the blocks of one head; every tensor (64 KB) fits in L2, so each is read once.
    assert c.hbm_read == 3 * 256 * 2 * 64 * 2
    assert c.hbm_write == 256 * 2 * 64 * 2
    # Tensor cores: Q K^T and P V per iteration, 2 * 64 * 64 * 64 each.
    assert c.tensor_flops == ex * 2 * (2 * 64 ** 3)
    # CUDA-core ops per iteration (64 x 64 = 4096 scores, 64 rows):
    #   mask select 4096; reduce_max 4096; scale exp2(a*s - b*s): 3 * 64 lane + 64 SFU;
    #   scores exp2: 3 * 4096 lane + 4096 SFU; reduce_sum 4096; logsum a*b+c: 2 * 64;
    #   fp32 -> fp16 cast of P: 4096; acc_o *= scale: 4096
    per_iter = 4096 + 4096 + 3 * 64 + 3 * 4096 + 4096 + 2 * 64 + 4096 + 4096
    # after the loop, per block: acc_o /= logsum (a division: one lane op and one SFU
    # reciprocal) 4096, and the fp32 -> fp16 copy of acc_o into O_shared 4096.
    assert c.cuda_ops == ex * per_iter + blocks * (4096 + 4096)
    assert c.sfu_ops == ex * (64 + 4096) + blocks * 4096
    # Shared per iteration: K and V tile writes; gemm 1 (FullRow: 4 x 1 warps) reads Q once
    # and K by 4 warp rows; gemm 2 reads V by 4 warp rows (P is in registers).
    assert c.resources.warp_partitions == [("acc_s", "FullRow", 4, 1), ("acc_o", "FullRow", 4, 1)]
    per_iter_smem = 2 * tile + tile + 4 * tile + 4 * tile
    # per block: Q tile write, O tile write and read.
    assert c.smem_bytes == ex * per_iter_smem + blocks * 3 * tile


def test_mha_causal_trip_counts_follow_the_block_index():
    # Causal: query tile bx visits min(seq/bN, ceil((bx+1)*bM / bN)) key tiles.
    full = estimate(flash_attention.flash_attention.__wrapped__(
        1, 2, 512, 64, False, block_M=64, block_N=64), H100)
    causal = estimate(flash_attention.flash_attention.__wrapped__(
        1, 2, 512, 64, True, block_M=64, block_N=64), H100)
    visited = sum(min(8, bx + 1) for bx in range(8)) * 2   # x 2 heads
    assert full.tensor_flops == 8 * 8 * 2 * 2 * (2 * 64 ** 3)
    assert causal.tensor_flops == visited * 2 * (2 * 64 ** 3)


def test_mla_counts():
    # batch 2, 16 heads, 1 KV head, 256 cache entries, dim 64 + rope 32; block_N 64,
    # block_H = min(64, 16) = 16, 2 stages, 256 threads (8 warps, FullCol -> 1 x 8).
    func = mla_decode.flash_mla_decode.__wrapped__(2, 16, 1, 256, 64, 32, block_N=64,
                                                   block_H=64, num_stages=2, threads=256)
    c = estimate(func, H100)
    blocks, iters = 2, 4
    ex = blocks * iters
    q, q_pe, out = 16 * 64 * 2, 16 * 32 * 2, 16 * 64 * 2           # per block
    kv, k_pe = 64 * 64 * 2, 64 * 32 * 2                             # per iteration
    assert c.l2_bytes == blocks * (q + q_pe + out) + ex * (kv + k_pe)
    # HBM: every tensor is small enough for L2: each read once.
    assert c.hbm_read == 2 * 16 * (64 + 32) * 2 + 2 * 256 * (64 + 32) * 2
    assert c.hbm_write == 2 * 16 * 64 * 2
    # Tensor: Q KV^T (16x64x64), Q_pe K_pe^T (16x64x32), S KV (16x64x64) per iteration.
    assert c.tensor_flops == ex * 2 * (16 * 64 * 64 + 16 * 64 * 32 + 16 * 64 * 64)
    assert [p[2:] for p in c.resources.warp_partitions] == [(1, 8)] * 3
    # Shared per iteration: KV and K_pe tile writes; gemm 1 reads Q by 8 warp columns and KV
    # once; gemm 2 reads Q_pe by 8 and K_pe once; S tile written (2 KB); gemm 3 reads S by 8
    # and KV once. Per block: Q and Q_pe writes, O written and read.
    s_tile = 16 * 64 * 2
    per_iter = kv + k_pe + 8 * q + kv + 8 * q_pe + k_pe + s_tile + 8 * s_tile + kv
    assert c.smem_bytes == ex * per_iter + blocks * (q + q_pe + 2 * out)


def test_a_loop_without_a_pipeline_waits_for_its_loads_every_iteration():
    # 1024^3, 128 x 128 x 64 tiles: 8 x 8 = 64 blocks of 16 K iterations; with one stage
    # every iteration waits for its tiles, with three the loads run ahead.
    serial = estimate(gemm_func(1024, 1024, 1024, block_M=128, block_N=128, block_K=64,
                                num_stages=1), H100)
    piped = estimate(gemm_func(1024, 1024, 1024, block_M=128, block_N=128, block_K=64,
                               num_stages=3), H100)
    assert serial.counts[0].exposed_loads == 64 * 16
    assert piped.counts[0].exposed_loads == 0
    # 1024 waits over 64 SMs holding one block each (the grid is smaller than the GPU):
    # 16 L2 latencies on each SM's critical path, on top of the same loop phases.
    assert serial.t_intrinsic - piped.t_intrinsic == pytest.approx(16 * H100.l2_latency_s)
    assert serial.time > piped.time


def gathered_gemm(M, N, K, form, bm=128, bn=128, bk=32):
    """The GEMM with A's tile filled three ways: a tile copy, a T.Parallel loop reading the
    same elements, or a T.Parallel loop reading the rows an index tensor names."""
    import tilecraft.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             rows: T.Tensor((M,), "int32"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bm, bk), "float16")
            B_shared = T.alloc_shared((bk, bn), "float16")
            C_local = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_local)
            for k in T.Pipelined(K // bk, num_stages=2):
                if form == "copy":
                    T.copy(A[by * bm, k * bk], A_shared)
                elif form == "gather":
                    for i, j in T.Parallel(bm, bk):
                        A_shared[i, j] = A[by * bm + i, k * bk + j]
                else:
                    for i, j in T.Parallel(bm, bk):
                        A_shared[i, j] = A[rows[by * bm + i], k * bk + j]
                T.copy(B[k * bk, bx * bn], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * bm, bx * bn])
    return main


def test_a_gather_nest_shares_its_fetches_like_the_tile_copy_it_reads():
    # 8192 x 2048 A (32 MB, more than half the L2: no cap by size), 8 x 64 blocks. The blocks
    # of one A row band (the same by) read the same A elements whichever way the tile is
    # filled, so they share the fetch within a wave; only an indirect gather (rows read from
    # memory) cannot be told apart by block coordinates and is charged per block.
    M, N, K = 8192, 1024, 2048
    copy, gather, indirect = (estimate(gathered_gemm(M, N, K, form), H100_MMA)
                              for form in ("copy", "gather", "indirect"))
    a_bytes = M * K * 2
    assert gather.hbm_read == pytest.approx(copy.hbm_read, rel=1e-6)
    assert copy.hbm_read < 2 * a_bytes
    # Per block: every one of the 8 column blocks reads A's band again, and more.
    assert indirect.hbm_read >= 8 * a_bytes
