"""TMA stores and stmatrix (sm_90a): infer_instructions gives a shared -> global copy TMA can do
to TMA ("tma") and a register -> shared copy into a 16-bit tile to stmatrix; the choice is in the
dumped IR and can be turned off. The lowered kernel issues the stores from one thread, waits for
them to read their tile before every barrier and at the end, and fences the async proxy. The
emulator runs such kernels on ragged shapes (TMA drops what falls outside the tensor) and finds
the planted bugs: a store never waited for, a tile overwritten while its store reads it, a write
not fenced for the async proxy."""
import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
import tilecraft.language as T
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir.tileop import Copy
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.schedule.infer_instructions import infer_instructions
from tilecraft.backends.cuda.schedule.stage_epilogue import stage_epilogue

from test_emulator_checker import calls, dropped, plant
from test_emulator_sm90 import gemm_case, line_of, run_gemm

SMEM = 227 * 1024


def gemm_func(example, M=1000, N=768, K=520, **cfg):
    config = dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3)
    config.update(cfg)
    return underlying(example("gemm").matmul)(M, N, K, **config)


def copy_choices(func, arch="sm_90a", configs=None):
    """{(source, destination): instruction} of the copies after infer_instructions."""
    func = stage_epilogue(func, arch, configs, SMEM)
    func = infer_instructions(func, arch, configs)
    return {(n.src.buffer.name, n.dst.buffer.name): n.annotations.get("instruction")
            for n in walk(func.body) if isinstance(n, Copy)}


def test_the_epilogue_is_stmatrix_then_a_tma_store_and_shows_in_the_ir(example):
    choices = copy_choices(gemm_func(example))
    assert choices[("C_local", "C_local_staged")] == "stmatrix"
    assert choices[("C_local_staged", "C")] == "tma"
    assert choices[("A", "A_shared")] is None    # loads are warp_specialize's choice
    text = infer_instructions(gemm_func(example), "sm_90a").script()
    assert "instruction='tma'" not in text       # no staged tile yet: C_local -> C stays


@pytest.mark.parametrize("configs", [{"tl.disable_tma_store": True},
                                     {"tl.disable_tma_lower": True}])
def test_pass_configs_keep_stores_off_tma(example, configs):
    choices = copy_choices(gemm_func(example), configs=configs)
    assert choices[("C_local_staged", "C")] is None
    assert choices[("C_local", "C_local_staged")] == "stmatrix"


def test_no_tma_store_for_rows_not_16_byte_aligned_nor_on_sm80(example):
    # 777 halves a row: TMA needs the tensor's row stride a multiple of 16 bytes.
    assert "tma" not in copy_choices(gemm_func(example, N=777)).values()
    assert set(copy_choices(gemm_func(example), "sm_80").values()) == {None}


def copy_through_shared(disable_tma):
    @T.prim_func
    def main(X: T.Tensor((256, 128), "float16"), Y: T.Tensor((256, 128), "float16")):
        with T.Kernel(2, threads=128) as bx:
            tile = T.alloc_shared((128, 128), "float16")
            T.copy(X[bx * 128, 0], tile)
            T.copy(tile, Y[bx * 128, 0], disable_tma=disable_tma)
    return main


@pytest.mark.parametrize("disable_tma", [False, True])
def test_disable_tma_on_the_copy_keeps_it_off_tma(disable_tma):
    func = copy_through_shared(disable_tma)
    assert copy_choices(func)[("tile", "Y")] == (None if disable_tma else "tma")
    text = emit_cuda(pipelines.cuda(func, "sm_90a", SMEM))[0]
    assert ("tc::tma_store_2d(" in text) != disable_tma
    assert ("tc::st_global_128(" in text) == disable_tma
    X = np.random.default_rng(2).standard_normal((256, 128)).astype(np.float16)
    Y = np.zeros_like(X)
    assert list(E.run(E.lower(func, "sm_90a"), [X, Y])) == []
    np.testing.assert_array_equal(Y, X)


def test_the_lowered_epilogue(example):
    text = emit_cuda(pipelines.cuda(gemm_func(example), "sm_90a", SMEM))[0]
    assert text.count("tc::stmatrix_x4(") == 1 and "tc::st_shared_32(" not in text
    stores = text[text.index("if (tx == 0) {"):]
    assert stores.count("tc::tma_store_2d((&C_tma)") == 4    # 128 x 256: four 64-column boxes
    assert stores.index("tc::tma_store_commit()") > stores.rindex("tc::tma_store_2d(")
    # the wait ends the kernel, after the consumers' branch
    assert text.rstrip().endswith("tc::tma_store_wait<0>();\n}") or \
        text.rstrip()[:-1].rstrip().endswith("tc::tma_store_wait<0>();")
    lines = text.splitlines()
    barriers = [i for i, line in enumerate(lines) if "tc::named_barrier_sync(1, 256)" in line]
    for i in barriers:  # each publishes a tile wgmma or the TMA store reads
        assert "tc::fence_proxy_async_shared()" in lines[i - 1] + lines[i - 2]
    # Every barrier also waits until this thread's stores have read their tiles.
    for i in barriers:
        assert "tc::tma_store_wait<0>()" in lines[i - 1]


def test_barriers_leave_out_the_fence_their_statements_do_not_need(example):
    # MLA's loop with both warpgroups in every score tile (seesaw_warpgroups off): the row
    # max's barrier is the first of the body (fence kept), the row sum's follows statements
    # that write only its scratch slots (no fence), S's follows the stmatrix of S_shared,
    # which wgmma reads (the fence). Each still waits for stores.
    shared_rows = {"tl.disable_seesaw_warpgroups": True}
    func = underlying(example("mla_decode").flash_mla_decode)(
        2, 64, 1, 200, 128, 64, block_N=64, block_H=64, num_stages=2, threads=256)
    text = emit_cuda(pipelines.cuda(func, "sm_90a", SMEM, shared_rows))[0]
    consumer = text[text.index("} else {"):]
    loop = consumer[consumer.index("for (int k = 0;"):]
    loop = loop[:loop.index("make_smem_desc((&S_shared")]
    lines = loop.splitlines()
    barriers = [i for i, line in enumerate(lines) if "tc::named_barrier_sync(1, 256)" in line]
    assert len(barriers) == 3
    before = [lines[i - 2] + lines[i - 1] for i in barriers]
    assert ["fence_proxy" in b for b in before] == [True, False, True]
    assert all("tma_store_wait" in b for b in before)
    # The emulator's checker (unfenced writes the async proxy reads, stores not waited for)
    # finds nothing in the kernel.
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(shape).astype(np.float16) for shape in
            ((2, 64, 128), (2, 64, 64), (2, 200, 1, 128), (2, 200, 1, 64))]
    out = np.zeros((2, 64, 128), np.float16)
    assert list(E.run(E.lower(func, "sm_90a", shared_rows), args + [out])) == []
    assert np.isfinite(out).all() and np.abs(out).max() > 0


def test_a_fragment_not_made_of_8x8_blocks_keeps_paired_stores():
    @T.prim_func
    def cast(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            frag = T.alloc_fragment((64, 64), "float32")
            tile = T.alloc_shared((64, 64), "float16")
            T.copy(X[0, 0], frag)
            T.copy(frag, tile)
            T.copy(tile, Y[0, 0])
    text = emit_cuda(pipelines.cuda(cast, "sm_90a", SMEM))[0]
    assert "stmatrix" not in text
    X = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    Y = np.zeros((64, 64), np.float16)
    assert list(E.run(E.lower(cast, "sm_90a"), [X, Y])) == []
    np.testing.assert_array_equal(Y, X.astype(np.float16))


# --- the emulator ------------------------------------------------------------------------------
@pytest.mark.parametrize("M, N, K, tiles", [
    pytest.param(200, 136, 72, dict(block_M=128, block_N=128, threads=256, num_stages=3),
                 id="ragged-200x136x72"),
    pytest.param(64, 64, 40, {}, id="64x64x40"),
    pytest.param(130, 264, 96, dict(block_M=128, block_N=256, block_K=64, threads=256,
                                    num_stages=2), id="ragged-130x264x96"),
])
def test_gemm_with_tma_stores_agrees_with_numpy(example, M, N, K, tiles):
    _, lowered, A, B = gemm_case(example, M, N, K, **tiles)
    text = lowered.script()
    assert "tc::tma_store_2d" in text and "tc::stmatrix_x4" in text
    err, reports = run_gemm(lowered, A, B)
    assert reports == [] and err < 1e-2


def test_persistent_gemm_with_tma_stores_agrees_with_numpy(example):
    _, lowered, A, B = gemm_case(example, 200, 136, 72, {"tl.enable_persistent_tiles": 1},
                                 block_M=64, block_N=64)
    assert "tc::tma_store_2d" in lowered.script()
    err, reports = run_gemm(lowered, A, B)
    assert reports == [] and err < 1e-2


def test_a_store_never_waited_for(example):
    gemm, lowered, A, B = gemm_case(example, 64, 64, 40)
    bad = _without_all(lowered, "tc::tma_store_wait<0>")
    err, reports = run_gemm(bad, A, B)
    assert err < 1e-2      # the data arrived; what is wrong is the block ending under it
    assert [r.kind for r in reports] == ["async-not-waited"]
    assert reports[0].buffer == "C_local_staged"
    assert reports[0].lines == (line_of(gemm.matmul, "T.copy(C_local, C["),)


def test_a_tile_overwritten_while_its_store_reads_it(example):
    # Persistent: the next tile's epilogue rewrites the staged tile; without the wait in front
    # of its barrier the previous store may still be reading it.
    _, lowered, A, B = gemm_case(example, 200, 136, 72, {"tl.enable_persistent_tiles": 1},
                                 block_M=64, block_N=64)
    bad = _without_all(lowered, "tc::tma_store_wait<0>")
    _, reports = run_gemm(bad, A, B)
    races = [r for r in reports if r.kind == "race" and "TMA store" in r.message]
    assert races and races[0].buffer == "C_local_staged"
    assert "cp.async.bulk.wait_group.read" in races[0].message


def test_a_store_reading_unfenced_writes(example):
    _, lowered, A, B = gemm_case(example, 64, 64, 40)
    # The epilogue's fences are the last ones; drop the one that publishes the staged tile.
    fences = sum(1 for _ in _matches(lowered, "tc::fence_proxy_async_shared"))
    bad = plant(lowered, calls("tc::fence_proxy_async_shared"), dropped, fences - 1)
    _, reports = run_gemm(bad, A, B)
    assert [r.kind for r in reports] == ["proxy-fence"]
    assert reports[0].buffer == "C_local_staged" and "tma store" in reports[0].message


def _matches(func, name):
    return [n for n in walk(func.body) if calls(name)(n)]


def _without_all(func, name):
    for _ in range(len(_matches(func, name))):
        func = plant(func, calls(name), dropped, 0)
    return func
