"""Persistent warp-specialized kernels (tl.enable_persistent_tiles): the IR warp_specialize
builds (a loop over tiles in each role, ring rounds counted across tiles), what the code
generator makes of it, the launch grid, the staging tile's budget, and the passes after
warp_specialize still applying (overlap_wgmma, rotate_wgmma_loop)."""
import math

import pytest

import tilecraft
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir.expr import BufferLoad
from tilecraft.ir.stmt import PERSISTENT_TILES, Allocate, BufferStore, For
from tilecraft.ir.visitor import walk
from tilecraft.pass_config import check_pass_configs
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.runtime.program import PersistentGrid

PERSISTENT = tilecraft.PassConfigKey.TL_ENABLE_PERSISTENT_TILES
SMEM = 232448


@pytest.fixture
def gemm(example):
    def make(M=8192, N=8192, K=8192, **tiles):
        config = dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3,
                      swizzle_panel=8)
        return underlying(example("gemm").matmul)(M, N, K, **{**config, **tiles})
    return make


def lowered(func, **configs):
    return pipelines.cuda(func, "sm_90a", SMEM, configs)


def tile_loops(func):
    return [n for n in walk(func.body) if isinstance(n, For) and n.annotations.get(PERSISTENT_TILES)]


def test_each_role_loops_over_the_tiles_and_counts_ring_rounds_across_them(gemm):
    func = lowered(gemm(), **{PERSISTENT: True})
    kernel = func.kernels()[0]
    assert kernel.attrs["persistent_blocks"] == 0      # one block per SM
    loops = tile_loops(func)
    assert len(loops) == 2
    for loop in loops:
        # 64 x 32 tiles; the pipelined loop's 128 iterations are added to the rounds after it
        assert int(loop.extent.value) == 64 * 32
        advance = [n for n in walk(loop.body) if isinstance(n, BufferStore) and
                   n.buffer.name == "tc_rounds"]
        assert len(advance) == 1
    # every mbarrier slot index reads the rounds
    source, _ = emit_cuda(func)
    # (a count known to be non-negative: plain %, not a floor-mod on 64-bit integers)
    assert "tma_full[(tc_rounds[0] + k) % 3]" in source and "tc_floormod(tc_rounds" not in source
    assert source.count("tc_tile = blockIdx.x; tc_tile < 2048; ++tc_tile_round, tc_tile = "
                        "tc_tile_round * gridDim.x + (tc_tile_round % 2 ? gridDim.x - 1 - "
                        "blockIdx.x : blockIdx.x)") == 1
    assert source.count("tc::rasterize_row(8, make_uint3(32, 64, 1),") == 2


def test_turned_off_nothing_changes(gemm):
    func = lowered(gemm(), **{PERSISTENT: False})
    assert not tile_loops(func)
    assert "persistent_blocks" not in func.kernels()[0].attrs
    assert not any(isinstance(n, BufferLoad) and n.buffer.name == "tc_rounds"
                   for n in walk(func.body))


def attention(example, causal=True, batch=8):
    """8 x 4 heads x 8 query tiles: 256 blocks, two waves on the H100 sm_90a stands for."""
    return underlying(example("flash_attention").flash_attention)(
        batch, 4, 1000, 128, causal, block_M=128, block_N=128, num_stages=3, threads=256)


def test_gemms_and_attention_are_persistent_unless_told_otherwise(example, gemm):
    assert lowered(attention(example)).kernels()[0].attrs["persistent_blocks"] == 0
    assert len(tile_loops(lowered(attention(example, causal=False)))) == 2
    assert not tile_loops(lowered(attention(example), **{PERSISTENT: False}))
    # a GEMM over more than one wave; of one wave (8 x 8 tiles), or storing its tile through
    # a shared tile of the user's (the split-K example), it is not
    assert lowered(gemm()).kernels()[0].attrs["persistent_blocks"] == 0
    assert not tile_loops(lowered(gemm(1024, 2048, 512)))
    split = underlying(example("gemm").matmul_splitk)(1024, 1024, 8192, split_k=4)
    assert not tile_loops(lowered(split))
    # the producer preload, asked for, takes the place of the default
    preloaded = lowered(attention(example), **{"tl.enable_producer_preload": True})
    assert not tile_loops(preloaded)
    assert "tma_ready" in emit_cuda(preloaded)[0]
    with pytest.raises(tilecraft.TileError, match="cannot be combined"):
        check_pass_configs({PERSISTENT: True, "tl.enable_producer_preload": True})


def test_a_grid_of_one_wave_gets_the_producer_preload_instead(example):
    one_wave = lowered(attention(example, batch=4))           # 128 blocks on 132 SMs
    assert not tile_loops(one_wave)
    assert "tma_ready" in emit_cuda(one_wave)[0]
    # asked for either way, as asked
    assert tile_loops(lowered(attention(example, batch=4), **{PERSISTENT: True}))
    plain = lowered(attention(example, batch=4), **{"tl.enable_producer_preload": False})
    assert not tile_loops(plain) and "tma_ready" not in emit_cuda(plain)[0]
    # two waves: persistent, the query loaded by the consumers
    two_waves = lowered(attention(example, batch=5))          # 160 blocks
    assert tile_loops(two_waves) and "tma_ready" not in emit_cuda(two_waves)[0]


def test_a_number_of_blocks_caps_the_grid_and_bad_values_are_refused():
    assert check_pass_configs({PERSISTENT: 4}) == {PERSISTENT: 4}
    for bad in (0, -2, "yes", 1.5):
        with pytest.raises(tilecraft.TileError, match="tl.enable_persistent_tiles"):
            check_pass_configs({PERSISTENT: bad})
    grid = PersistentGrid((32, 64), 4)
    assert grid.blocks({}, 132) == 4
    assert PersistentGrid((32, 64), 0).blocks({}, 132) == 132   # one block per SM
    assert PersistentGrid((3, 1), 132).blocks({}, 132) == 3     # never more blocks than tiles


def test_the_staging_tile_gets_its_own_bytes_only_where_they_fit(gemm):
    staged = lowered(gemm(num_stages=3), **{PERSISTENT: True})
    assert "C_local_staged" in staged.script()
    # 3 stages x 48 KiB of ring + the 64 KiB staging tile, no longer sharing the ring's bytes
    assert staged.kernels()[0].attrs["smem_bytes"] > 3 * 48 * 1024 + 64 * 1024
    # 4 stages: 192 KiB of ring leave room for half the tile, staged in two column bands
    deep = lowered(gemm(num_stages=4), **{PERSISTENT: True})
    assert staging_elements(deep) == [128 * 128]
    assert deep.kernels()[0].attrs["smem_bytes"] <= SMEM
    source, _ = emit_cuda(deep)
    assert source.count("tc::stmatrix_x4(") == 2
    stores = [line for line in source.splitlines() if "tc::tma_store_2d((&C_tma)" in line]
    assert [line.split("]), ")[1].split(",")[0] for line in stores] == [
        "bx * 256", "bx * 256 + 64", "bx * 256 + 128", "bx * 256 + 192"]
    # room for a quarter of the tile (two stages, a 32 KiB limit's spare bytes): four bands
    quarter = pipelines.cuda(gemm(num_stages=2), "sm_90a", 2 * 48 * 1024 + 2048 + 20 * 1024,
                             {PERSISTENT: True})
    assert staging_elements(quarter) == [128 * 64]
    # no room for a quarter either: stored straight from the registers
    none = pipelines.cuda(gemm(num_stages=2), "sm_90a", 2 * 48 * 1024 + 2048 + 8 * 1024,
                          {PERSISTENT: True})
    assert staging_elements(none) == []


@pytest.mark.parametrize("stages", [3, 4])
def test_the_next_tile_waits_for_the_last_store_only_before_it_writes_the_staging_tile(
        gemm, stages):
    # The previous tile's last TMA store reads the staging tile while the next tile's main
    # loop runs: the wait for it and the barrier come after that loop, just before the first
    # stmatrix into the staging tile, not at the top of the tile loop.
    source, _ = emit_cuda(lowered(gemm(num_stages=stages), **{PERSISTENT: True}))
    consumer = source[source.index("tc::setmaxnreg_inc"):]
    tile = consumer[consumer.index("for (int tc_tile"):]
    main_loop_end = tile.index("tc::wgmma_wait_group<0>();")
    first_wait = tile.index("tc::tma_store_wait<0>();")
    assert main_loop_end < first_wait < tile.index("tc::stmatrix_x4(")
    assert "tc::named_barrier_sync" not in tile[:main_loop_end]


def staging_elements(func) -> list:
    return [math.prod(n.buffer.shape) for n in walk(func.body)
            if isinstance(n, Allocate) and n.buffer.name.endswith("_staged")]


def test_overlap_and_rotation_still_apply(gemm, example):
    source, _ = emit_cuda(lowered(gemm(), **{PERSISTENT: True}))
    assert "tc::wgmma_wait_group<1>()" in source                      # overlap_wgmma
    fa = underlying(example("flash_attention").flash_attention)(
        8, 32, 4096, 128, True, block_M=128, block_N=128, threads=256, num_stages=3)
    source, _ = emit_cuda(lowered(fa, **{PERSISTENT: True}))
    assert "tc::wgmma_wait_group<1>()" in source                      # rotate_wgmma_loop


def test_clustered_blocks_stay_one_tile_each(gemm):
    func = lowered(gemm(), **{PERSISTENT: True,
                              tilecraft.PassConfigKey.TL_ENABLE_TMA_MULTICAST: True})
    kernel = func.kernels()[0]
    assert kernel.attrs.get("cluster_dims")
    assert "persistent_blocks" not in kernel.attrs and not tile_loops(func)


@pytest.mark.parametrize("blocks, tiles", [(132, 8192), (3, 10), (5, 5), (7, 3), (4, 9)])
def test_serpentine_rounds_give_every_tile_to_exactly_one_block(blocks, tiles):
    from tilecraft.backends.cuda.emulator.machine import tiles_of_block
    got = sorted(t for b in range(blocks) for t in tiles_of_block(b, blocks, tiles))
    assert got == list(range(tiles))


def test_serpentine_rounds_even_out_causal_attention_on_132_sms():
    # Causal attention at S 4096 with 128-row query tiles: tile t costs t % 32 + 1 KV blocks.
    # Round-robin gives each of 132 blocks the same residues mod 4 every round (132 = 4 * 33).
    from tilecraft.backends.cuda.emulator.machine import tiles_of_block
    work = [sum(t % 32 + 1 for t in tiles_of_block(b, 132, 8192)) for b in range(132)]
    plain = [sum(t % 32 + 1 for t in range(b, 8192, 132)) for b in range(132)]
    mean = sum(work) / 132
    assert sum(plain) == sum(work)
    assert max(plain) / mean > 1.1 and max(work) / mean < 1.01


def test_one_wave_is_counted_on_this_machines_gpu_when_it_is_of_the_arch(example, monkeypatch):
    """128 blocks fill one wave of an H100 SXM (132 SMs) but not of an H100 PCIe (114): there
    the attention grid is made persistent like any grid of more than one wave. The runtime asks
    the device once and passes the Target down; the passes never ask."""
    import dataclasses

    from tilecraft import target as targets
    from tilecraft.backends.cuda.runtime import device, program
    pcie = dataclasses.replace(targets.get_target("sm_90a"), num_sms=114)
    props = type("Props", (), {"sm_count": 114, "l2_bytes": pcie.l2_bytes})()
    device.device_target.cache_clear()
    monkeypatch.setattr(device, "has_cuda_device", lambda: True)
    monkeypatch.setattr(device, "current_arch", lambda: "sm_90a")
    monkeypatch.setattr(device, "device_properties", lambda: props)
    try:
        assert device.device_target("sm_90a") == pcie
        assert device.device_target("sm_80") == targets.get_target("sm_80")  # not this GPU
        assert program._planned_for("sm_90a") == (114, pcie.l2_bytes)
        # the passes plan with the device's Target, not by asking the device themselves
        assert tile_loops(pipelines.cuda(attention(example, batch=4), pcie, SMEM, {}))
        assert not tile_loops(lowered(attention(example, batch=4)))  # the table's 132 SMs
    finally:
        monkeypatch.undo()
        device.device_target.cache_clear()
