"""Recommendation: legality against the target's resources, and ranking sanity."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import flash_attention  # noqa: E402
import gemm  # noqa: E402

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft.carver import TARGETS, default_space, estimate, get_target, recommend  # noqa: E402
from tilecraft.carver.recommend import evaluate, format_table  # noqa: E402


@tilecraft.jit(out_idx=[-1])
def vector_add(N, block=1024, threads=256):
    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32),
             C: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            a = T.alloc_fragment((block,), "float32")
            b = T.alloc_fragment((block,), "float32")
            T.copy(A[bx * block], a)
            T.copy(B[bx * block], b)
            for i in T.Parallel(block):
                a[i] = a[i] + b[i]
            T.copy(a, C[bx * block])
    return main


def _check_fits(cands, target):
    t = get_target(target)
    for c in cands:
        res = c.cost.resources
        assert res.fits and res.blocks_per_sm >= 1
        assert res.smem_per_block <= t.smem_per_block
        assert res.regs_per_thread <= t.max_regs_per_thread
        assert res.threads <= t.max_threads_per_block
        assert res.blocks_per_sm * (res.smem_per_block + t.smem_reserved_per_block) <= \
            t.smem_per_sm or res.smem_per_block == 0
        assert res.blocks_per_sm * res.threads <= t.max_threads_per_sm
        assert res.blocks_per_sm * res.regs_per_block <= t.regs_per_sm


def test_targets_are_complete():
    for t in TARGETS.values():
        assert t.num_sms > 0 and t.hbm_bw > 0 and t.l2_bw > t.hbm_bw and t.smem_bw > t.l2_bw
        assert t.tensor_flops["float16"] > t.cuda_rate() > t.sfu_ops > 0
    assert TARGETS["h100"].hbm_bw == 3.0e12 and TARGETS["h100"].tensor_flops["float16"] == 783e12


def test_default_space_uses_the_factorys_tunables():
    space = default_space(gemm.matmul, (1024, 1024, 1024))
    assert set(space) == {"block_M", "block_N", "block_K", "num_stages", "threads"}
    assert "block_M" not in default_space(gemm.matmul, (1024, 1024, 1024), {"block_M": 64})


@pytest.mark.parametrize("target", ["h100", "a100", "rtx4090"])
def test_every_recommended_gemm_candidate_fits(target):
    space = {"block_M": [64, 128, 256], "block_N": [64, 128, 256], "block_K": [32, 64, 128],
             "num_stages": [2, 4], "threads": [128, 256]}
    everything = []
    rows = recommend(gemm.matmul, (4096, 4096, 4096), space, target=target, top=None,
                     candidates_out=everything)
    assert rows and len(rows) < len(everything)          # some are too big for the target
    _check_fits(rows, target)
    assert [r.rank for r in rows] == list(range(1, len(rows) + 1))
    assert all(a.time <= b.time for a, b in zip(rows, rows[1:]))
    assert all(c.reason for c in everything if not c.ok)
    # The RTX 4090's 99 KB per block rejects what an H100 takes.
    big = {"block_M": 128, "block_N": 256, "block_K": 128, "num_stages": 4, "threads": 256}
    assert evaluate(gemm.matmul, (4096, 4096, 4096), big, "rtx4090").reason
    row = rows[0].row()
    for key in ("arith_intensity", "hbm_mb", "roofline_util", "occupancy", "bound",
                "warp_partitions", "placement"):
        assert key in row


def test_every_recommended_attention_candidate_fits():
    rows = recommend(flash_attention.flash_attention, (2, 4, 1024, 128, True), top=None,
                     space={"block_M": [64, 128, 256], "block_N": [32, 64, 128, 256],
                            "num_stages": [1, 2], "threads": [128, 256]})
    assert rows
    _check_fits(rows, "h100")
    table = format_table([r.row() for r in rows[:3]])
    assert "block_M" in table and "bound" in table and len(table.splitlines()) == 5


def test_illegal_configurations_are_skipped_with_a_reason():
    c = evaluate(gemm.matmul, (1024, 1024, 1024), {"block_M": 16, "block_N": 16,
                                                   "threads": 128})
    assert not c.ok and "TileError" in c.reason         # 4 warps cannot split a 16x16 tile
    c = evaluate(gemm.matmul, (1024, 1024, 1024), {"block_M": 256, "block_N": 256,
                                                   "threads": 128})
    assert not c.ok and "registers" in c.reason
    c = evaluate(gemm.matmul, (1024, 1024, 1024), {"block_K": 8})
    assert not c.ok and "fragment" in c.reason


def test_small_tiles_are_predicted_slower_on_8192_cube():
    args = (8192, 8192, 8192)
    small = evaluate(gemm.matmul, args, {"block_M": 16, "block_N": 16, "block_K": 32,
                                         "threads": 32})
    big = evaluate(gemm.matmul, args, {"block_M": 128, "block_N": 128, "block_K": 32,
                                       "threads": 128})
    assert small.ok and big.ok
    assert small.time > 3 * big.time
    assert small.cost.l2_bytes > 4 * big.cost.l2_bytes   # 8x less reuse per tile
    ranked = recommend(gemm.matmul, args, {"block_M": [16, 32, 64, 128], "block_N": [16, 32,
                                           64, 128], "threads": [32, 128]}, top=None)
    best = ranked[0]
    assert best.config["block_M"] * best.config["block_N"] >= 64 * 64
    # every tile of at most 32 x 32 ranks after every tile of at least 64 x 64
    order = [(c.config["block_M"], c.config["block_N"]) for c in ranked]
    small = [i for i, (m, n) in enumerate(order) if m <= 32 and n <= 32]
    large = [i for i, (m, n) in enumerate(order) if m >= 64 and n >= 64]
    assert small and large and min(small) > max(large)
    # On sm_90a's wgmma path a 128 x 128 tile without a rasterizing swizzle waits on HBM.
    assert best.cost.bound in ("smem", "tensor", "l2", "hbm") and best.cost.bound == max(
        best.cost.terms, key=best.cost.terms.get)


def test_elementwise_kernel_is_hbm_bound():
    c = estimate(vector_add.__wrapped__(1 << 26), "h100")
    n = 1 << 26
    assert c.hbm_read == 2 * 4 * n and c.hbm_write == 4 * n
    assert c.cuda_ops == n and c.tensor_flops == 0
    assert c.bound == "hbm"
    assert c.arithmetic_intensity == pytest.approx(1 / 12)
    rows = recommend(vector_add, (1 << 26,), {"block": [256, 1024, 4096], "threads": [128, 256]})
    assert rows and all(r.cost.bound == "hbm" for r in rows)


def test_faster_memory_target_predicts_faster_elementwise():
    f = vector_add.__wrapped__(1 << 26)
    assert estimate(f, "h200").time < estimate(f, "h100").time < estimate(f, "rtx4090").time


def test_tied_hbm_bound_tiles_rank_by_their_zero_fill():
    # At M 16 the weight dominates: every tile below streams the same bytes and the roofline
    # ties them. Tiles reaching past M fill the rest of each A box with zeros; on the H100
    # they measured in this order (bench/gemm.md).
    args = (16, 8192, 8192)
    space = {"block_M": [16, 32, 64], "block_N": [16, 32], "block_K": [128], "num_stages": [4],
             "threads": [128]}
    ranked = recommend(gemm.matmul, args, space, top=None)
    tiles = {(c.config["block_M"], c.config["block_N"]): c for c in ranked}
    tied = [tiles[t] for t in ((16, 32), (32, 32), (32, 16), (64, 32))]
    assert len({round(c.time, 9) for c in tied}) == 1
    # blocks x k-steps x rows past M x block_K x 2 bytes
    assert [c.cost.zero_fill_bytes for c in tied] == [
        0, 256 * 64 * 16 * 128 * 2, 512 * 64 * 16 * 128 * 2, 256 * 64 * 48 * 128 * 2]
    assert [c.rank for c in tied] == sorted(c.rank for c in tied)
    full = recommend(gemm.matmul, (64, 8192, 8192), space, top=None)
    assert all(c.cost.zero_fill_bytes == 0 for c in full if c.config["block_M"] <= 64)


def test_the_best_few_are_those_of_ranking_everything():
    # recommend(top=k) plans only what can reach the top k (carver.search); the answer is the
    # full ranking's first k, in its order.
    space = {"block_M": [64, 128], "block_N": [64, 128, 256], "block_K": [32, 64],
             "num_stages": [2, 3], "threads": [128, 256]}
    full = recommend(gemm.matmul, (4096, 4096, 4096), space, top=None)
    best = recommend(gemm.matmul, (4096, 4096, 4096), space, top=3)
    assert [c.config for c in best] == [c.config for c in full[:3]]
    assert [c.time for c in best] == [c.time for c in full[:3]]


def test_auto_predicts_for_the_gpu_kernels_are_compiled_for(monkeypatch):
    from tilecraft import placement
    from tilecraft.backends.cuda.runtime import device
    assert placement.machine_target("sm_80") == "a100"
    assert placement.machine_target("interp") == "h100"     # the model only orders there
    # On an H200 the kernels it compiles for are predicted with the H200's figures.
    monkeypatch.setattr(placement, "resolve", lambda target: ("cuda", "sm_90a"))
    monkeypatch.setattr(device, "has_cuda_device", lambda: True)
    monkeypatch.setattr(device, "device_properties",
                        lambda ordinal=None: type("P", (), {"name": "NVIDIA H200"})())
    assert placement.machine_target() == "h200"
    picked = recommend(vector_add, (1 << 20,), {"block": [1024], "threads": [256]},
                       target="auto", top=1)
    assert picked[0].cost.target == "h200"
