"""choose_rasterization: a GEMM without T.use_swizzle over many waves gets the panel the L2
model prefers (and the model's HBM bytes drop by more than the threshold); attention, a grid of
one wave, a kernel that asked for any T.use_swizzle (even a disabled one) and a dynamic grid
keep their order; tl.disable_auto_rasterization turns it off. On the emulator the rastered
GEMM (waves of many blocks) agrees with numpy."""
import dataclasses

import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
import tilecraft.language as T
from tilecraft.carver.recommend import underlying
from tilecraft.target import get_target
from tilecraft.ir.tileop import UseSwizzle
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda.schedule import choose_rasterization as cr

H100 = get_target("h100")


def rasters(func, configs=None, arch="sm_90a"):
    out = cr.choose_rasterization(func, arch, configs)
    return [(n.panel_size, n.order) for n in walk(out.body) if isinstance(n, UseSwizzle)]


def gemm(example, M, N, K, **cfg):
    cfg = {**dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=4), **cfg}
    return underlying(example("gemm").matmul)(M, N, K, **cfg)


def test_a_gemm_over_many_waves_gets_the_models_panel(example):
    func = gemm(example, 8192, 28672, 8192)
    (panel, order), = rasters(func)
    kernel = func.kernels()[0]
    plain = cr._hbm_read(kernel, H100)
    chosen = cr._hbm_read(cr._with_raster(kernel, panel, order), H100)
    assert chosen <= cr.WORTH * plain
    assert order == "row" and all(chosen <= cr._hbm_read(cr._with_raster(kernel, p, "row"), H100)
                                  for p in cr.PANELS)
    assert rasters(func, arch="sm_80")  # the A100's model agrees there is something to save
    assert rasters(func, {"tl.disable_auto_rasterization": True}) == []


@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (8192, 8192, 28672)])
def test_rows_are_preferred_unless_columns_read_much_less(example, shape, monkeypatch):
    """The model reads these shapes' column panels of 8 a few percent below the best row panel
    (on the H100 they moved more, and ran slower): the rows are taken. A column panel the model
    reads far below every row panel is still taken."""
    func = gemm(example, *shape)
    kernel = func.kernels()[0]
    reads = {(p, o): cr._hbm_read(cr._with_raster(kernel, p, o), H100)
             for p in cr.PANELS for o in cr.ORDERS}
    best_row = min(v for (p, o), v in reads.items() if o == "row")
    assert reads[(8, "column")] < best_row       # the model alone would pick the columns
    (panel, order), = rasters(func)
    assert order == "row" and reads[(panel, order)] == best_row
    real = cr._hbm_read
    monkeypatch.setattr(cr, "_hbm_read", lambda k, t: real(k, t) * (
        0.5 if any(isinstance(n, UseSwizzle) and n.order == "column" and n.panel_size == 4
                   for n in walk(k.body)) else 1.0))
    assert rasters(func) == [(4, "column")]


def test_attention_keeps_its_order(example):
    fa = example("flash_attention")
    for causal in (False, True):
        func = underlying(fa.flash_attention)(8, 32, 4096, 128, causal, block_M=128,
                                              block_N=128, num_stages=3, threads=256)
        assert rasters(func) == []


def test_one_wave_and_explicit_choices_are_left_alone(example):
    assert rasters(gemm(example, 1024, 1024, 1024)) == []     # 32 blocks
    assert rasters(gemm(example, 8192, 28672, 8192, swizzle_panel=4)) == [(4, "row")]

    @T.prim_func
    def disabled(A: T.Tensor((8192, 8192), "float16"), C: T.Tensor((8192, 8192), "float16")):
        with T.Kernel(64, 64, threads=128) as (bx, by):
            T.use_swizzle(8, enable=False)
            s = T.alloc_shared((128, 128), "float16")
            T.copy(A[by * 128, bx * 128], s)
            T.copy(s, C[by * 128, bx * 128])
    assert rasters(disabled) == [(8, "row")]   # only the user's own, disabled one


def test_a_dynamic_grid_keeps_its_order():
    M = T.dynamic("M")

    @T.prim_func
    def copy(A: T.Tensor((M, 8192), "float16"), C: T.Tensor((M, 8192), "float16")):
        with T.Kernel(64, T.ceildiv(M, 128), threads=128) as (bx, by):
            s = T.alloc_shared((128, 128), "float16")
            T.copy(A[by * 128, bx * 128], s)
            T.copy(s, C[by * 128, bx * 128])
    assert rasters(copy) == []


def test_the_rastered_gemm_agrees_with_numpy_on_the_emulator(example, monkeypatch):
    # a GPU of 8 SMs and 8 KB of L2 for the model: 8 x 8 blocks of 32x32 tiles are 8 waves,
    # each over one whole row of tiles when not rastered
    small = dataclasses.replace(H100, num_sms=8, l2_bytes=8 * 1024)
    func = gemm(example, 256, 256, 256, block_M=32, block_N=32, block_K=32, threads=128,
                num_stages=2)
    assert rasters(func, arch=small) and not rasters(func)   # the Target passed down decides
    lowered = E.lower(func, small)
    rng = np.random.default_rng(5)
    A = rng.standard_normal((256, 256)).astype(np.float16)
    B = rng.standard_normal((256, 256)).astype(np.float16)
    C = np.full((256, 256), np.nan, np.float16)
    assert list(E.run(lowered, [A, B, C])) == []
    np.testing.assert_allclose(C.astype(np.float32), A.astype(np.float32) @ B.astype(np.float32),
                               rtol=2e-2, atol=5e-2)


def test_a_kernel_the_model_cannot_count_keeps_its_order(example):
    # the vertical-slash kernel's loop runs over a tile count it builds in memory
    vs = example("vertical_slash_sparse_attention")
    func = underlying(vs.vertical_slash_attention)(4, 32, 4096, 64, 64, 32)
    assert rasters(func) == []
    cr.choose_rasterization(func, "sm_90a")  # and says so without raising
