"""Clusters of two blocks sharing tiles by TMA multicast (sm_90a, pass config
tl.enable_tma_multicast), checked on the CUDA text: which grid axis pairs blocks, which copies
are multicast, the barrier counts and the cluster barriers; when clusters are not used."""
import sys
from pathlib import Path

import pytest

import tilecraft.language as T
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import kernels  # noqa: E402


def gemm(M=1024, N=1024, K=512, bm=128, bn=256, bk=64, threads=256, stages=3):
    return kernels.gemm(M, N, K, bm, bn, bk, "float16", "float32", False, False, threads,
                        False, T.GemmWarpPolicy.Square, stages)


MULTICAST = {"tl.enable_tma_multicast": True}


def source(func, configs=MULTICAST):
    return emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024, configs))[0]


def test_gemm_blocks_pair_along_y_and_share_b():
    text = source(gemm())
    assert "__cluster_dims__(1, 2, 1) main_kernel0(" in text
    # B (64 x 256: four 64-column boxes) is multicast, each block issuing every other box;
    # A (depends on by) is still loaded by each block alone
    assert text.count("tc::tma_load_2d_multicast(") == 4
    assert text.count("tc::cluster_ctarank() == ((unsigned int)0)") == 2
    assert text.count("tc::cluster_ctarank() == ((unsigned int)1)") == 2
    assert text.count("tc::tma_load_2d((&A_s") == 1
    assert ", 3, bx * 256" in text  # multicast mask: both blocks
    # each block still receives every byte of a stage; empty counts both blocks' 8 warps
    assert "tc::mbarrier_arrive_expect_tx((&tma_full[k % 3]), 49152)" in text
    assert "tc::mbarrier_init((&tma_empty[0]), 16)" in text
    assert "tc::mbarrier_arrive_warp_cluster<2>" in text and "tc::mbarrier_arrive_warp(" not in text
    # the barrier after mbarrier init and the one before exit are cluster-wide
    assert text.count("tc::cluster_sync();") == 2 and "tc::barrier_all()" not in text


def test_pairs_along_x_share_a_when_only_x_is_even():
    text = source(gemm(M=192, N=256, K=96, bm=64, bn=64, bk=32, threads=128))  # grid (4, 3)
    assert "__cluster_dims__(2, 1, 1)" in text
    assert text.count("tc::tma_load_2d_multicast((&A_s") == 1
    assert "tc::tma_load_2d_multicast((&B_s" not in text


@pytest.mark.parametrize("func,configs", [
    (gemm(M=192, N=192, K=64, bm=64, bn=64, bk=32, threads=128), MULTICAST),  # grid 3 x 3
    (gemm(), {}),                                                               # not asked for
    (gemm(stages=0), MULTICAST),                                                # not pipelined
])
def test_no_cluster(func, configs):
    text = source(func, configs)
    assert "__cluster_dims__" not in text and "multicast" not in text
    assert "cluster_sync" not in text and "tc::barrier_all()" in text or "tma_" not in text


def test_attention_shares_keys_and_values_unless_causal():
    import flash_attention as fa
    args = dict(block_M=128, block_N=128, num_stages=2, threads=256)
    plain = source(fa.flash_attention.__wrapped__(2, 4, 512, 128, False, **args))
    assert "__cluster_dims__(2, 1, 1)" in plain and "tma_load_4d_multicast" in plain
    # a causal loop's length depends on the query block: the two blocks would not stay paired
    causal = source(fa.flash_attention.__wrapped__(2, 4, 512, 128, True, **args))
    assert "__cluster_dims__" not in causal


def test_mla_head_blocks_share_the_kv_cache():
    import mla_decode
    text = source(mla_decode.flash_mla_decode.__wrapped__(4, 128, 1, 1024, 512, 64))
    assert "__cluster_dims__(1, 2, 1)" in text and "tma_load_4d_multicast((&KV_shared" in text


def test_rasterization_runs_over_clusters():
    import gemm as example
    text = source(example.matmul.__wrapped__(1024, 1024, 512, block_M=128, block_N=256,
                                             block_K=64, threads=256, swizzle_panel=4))
    assert "tc::rasterize_row_clustered<1, 2>(4, gridDim, blockIdx.x, blockIdx.y)" in text


def test_the_emulator_checks_kernels_without_clusters():
    from tilecraft.backends.cuda import emulator
    text = emulator.lower(gemm(), "sm_90a", MULTICAST).script()
    assert "multicast" not in text and "cluster" not in text


def _offsets(text) -> dict:
    """{shared tile: byte offset} of the kernel's arena, from the CUDA text."""
    import re
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r"\* (\w+) = reinterpret_cast<\w+\*>\(tc_smem \+ (\d+)\)", text)}


def test_no_tile_shares_bytes_with_the_barriers_a_peer_arrives_on():
    """The peer block's consumers arrive on this block's empty barriers up to the cluster's
    last barrier, after this block's loop has ended: its staged output must not sit on them.
    Nor without clusters: an mbarrier's bytes serve something else only after mbarrier.inval,
    which nothing issues."""
    for offsets in (_offsets(source(gemm())), _offsets(source(gemm(), {}))):
        barrier_end = max(offsets["tma_full"], offsets["tma_empty"]) + 3 * 8
        assert offsets["C_f_staged"] >= barrier_end
