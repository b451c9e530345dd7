"""The cost model plans what the compiler emits on sm_90a (wgmma, a TMA producer warpgroup,
setmaxnreg) and on sm_80 (ldmatrix + mma.sync): one GEMM configuration counted by hand both
ways."""
import dataclasses
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import gemm  # noqa: E402

from tilecraft.carver import estimate, get_target  # noqa: E402
from tilecraft.carver.recommend import evaluate  # noqa: E402

H100, A100 = get_target("h100"), get_target("a100")
# 1024^3 in 128 x 128 x 64 tiles, 3 stages, 256 threads: grid 8 x 8 = 64 blocks, 16 iterations.
FUNC = gemm.matmul.__wrapped__(1024, 1024, 1024, block_M=128, block_N=128, block_K=64,
                               num_stages=3, threads=256)
EXECUTIONS = 64 * 16
TILE = 128 * 64 * 2                      # an A or B tile: 16 KB of fp16


def test_h100_plans_wgmma_with_a_producer_warpgroup():
    c = estimate(FUNC, H100)
    res = c.resources
    # Two consumer warpgroups split the 128 x 128 tile along M (one m64n128 band each).
    assert res.warp_partitions == [("C_local", "Square", 2, 1)]
    # 256 consumers + the 128-thread TMA producer; 384 threads take setmaxnreg, so the entry
    # count fills the register file (65536 / 384 -> 168 each): one block per SM.
    assert (res.threads, res.producer_threads) == (384, 128)
    assert res.regs_per_block == 65536
    assert (res.blocks_per_sm, res.occupancy_limit) == (1, "registers")
    # Consumer registers: the accumulator 128*128 fp32 / 256 threads = 64, plus 32 of
    # addresses and indices; wgmma stages no operand fragments in registers.
    assert res.regs_per_thread == 96
    # Shared: 3 versions of both tiles (96 KB) plus the full / empty mbarriers the producer
    # and the consumers synchronize on, planned at the 1 KB alignment of the swizzled tiles.
    assert res.smem_per_block == 3 * 2 * TILE + 1024
    # Shared traffic per iteration: TMA writes A and B (2 tiles); every m64n128k16 reads its
    # A band once (2 bands = 1 tile) and its B slice once per 64 rows (2 x B = 2 tiles). The
    # compiler stages the epilogue through shared memory on sm_90a (stage_epilogue), and the
    # model plans with the compiler's pipeline: each of the 64 blocks writes its 128 x 128
    # fp16 C tile there and reads it back.
    epilogue = 64 * 2 * (128 * 128 * 2)
    assert c.smem_bytes == EXECUTIONS * (2 * TILE + TILE + 2 * TILE) + epilogue
    assert c.tensor_flops == 2 * 1024 ** 3
    # wgmma runs at the target's tensor rate; 64 blocks on 132 SMs: one wave, tail 132 / 64.
    assert c.terms["tensor"] == pytest.approx(2 * 1024 ** 3 / H100.tensor_flops["float16"]
                                              * 132 / 64)
    assert c.terms["smem"] == pytest.approx(c.smem_bytes / H100.smem_bw * 132 / 64)


def test_a100_plans_mma_sync_without_a_producer():
    c = estimate(FUNC, A100)
    res = c.resources
    # 8 warps on 128 x 128 in whole 16 x 8 atoms, as square as possible: 4 x 2.
    assert res.warp_partitions == [("C_local", "Square", 4, 2)]
    assert (res.threads, res.producer_threads) == (256, 0)
    # Registers: 64 accumulator + 32 overhead + ldmatrix staging of one k16 step
    # (32 rows = 2 A atoms x 4 regs, 64 columns = 8 B atoms x 2 regs = 24) -> 120.
    assert res.regs_per_thread == 120
    assert res.regs_per_block == 8 * 120 * 32
    # 96 KB of tiles (no barriers: cp.async groups) + 1 KB reserved: one block in 164 KB.
    assert res.smem_per_block == 3 * 2 * TILE
    assert (res.blocks_per_sm, res.occupancy_limit) == (1, "shared")
    # Shared per iteration: 2 tile writes, A read by 2 warp columns, B by 4 warp rows.
    assert c.smem_bytes == EXECUTIONS * (2 * TILE + 2 * TILE + 4 * TILE)
    assert c.terms["tensor"] == pytest.approx(2 * 1024 ** 3 / A100.tensor_flops["float16"]
                                              * 108 / 64)


def test_mma_sync_on_hopper_runs_slower_than_wgmma():
    wgmma = estimate(FUNC, H100)
    mma = estimate(FUNC, dataclasses.replace(H100, arch="sm_80"))
    assert mma.resources.producer_threads == 0 and mma.resources.threads == 256
    assert mma.terms["tensor"] == pytest.approx(wgmma.terms["tensor"] / H100.mma_sync_fraction)
    assert mma.smem_bytes > wgmma.smem_bytes


def test_setmaxnreg_limits_the_consumers():
    # 128 x 256 on 256 threads: 128 accumulator registers per consumer thread fit the 232
    # setmaxnreg gives them; 256 x 256 needs 256 + 32 and does not.
    ok = evaluate(gemm.matmul, (4096, 4096, 4096), {"block_M": 128, "block_N": 256,
                                                    "block_K": 64, "threads": 256}, "h100")
    assert ok.ok and ok.cost.resources.regs_per_thread == 160
    big = evaluate(gemm.matmul, (4096, 4096, 4096), {"block_M": 256, "block_N": 256,
                                                     "block_K": 32, "threads": 256}, "h100")
    assert not big.ok and "registers" in big.reason


def test_one_warpgroup_block_has_a_producer_warp():
    # 128 consumers, no setmaxnreg (below 384 threads): the producer is one warp, not a
    # warpgroup whose three idle warps would hold registers and thread slots.
    c = estimate(gemm.matmul.__wrapped__(1024, 1024, 1024, block_M=64, block_N=64,
                                         block_K=64, num_stages=3, threads=128), H100)
    res = c.resources
    assert (res.threads, res.producer_threads) == (160, 32)
    # 64*64 fp32 / 128 = 32 accumulator registers + 32 -> 64 per thread, 5 warps: registers
    # would allow 6 blocks per SM.
    assert res.regs_per_thread == 64 and res.regs_per_block == 5 * 64 * 32
    assert 65536 // res.regs_per_block == 6
    # 3 stages of A and B (48 KB) with their barriers; the 8 KB tile that stage_epilogue adds
    # to carry C out reuses the ring's bytes after the loop (the kernel is not persistent:
    # one warpgroup's blocks share an SM instead), so shared memory decides: 4 blocks.
    assert res.smem_per_block == 3 * 2 * 64 * 64 * 2 + 1024
    assert (res.blocks_per_sm, res.occupancy_limit) == (4, "shared")
