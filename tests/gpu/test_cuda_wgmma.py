"""T.gemm on WGMMA (sm_90a): the compiler's wgmma lowering against torch, random inputs,
poisoned outputs, float64 references; ragged sizes, every operand orientation, A in registers,
one or several m64 instructions per warpgroup, warpgroups split along M or N, pipelined loops."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft.language as T  # noqa: E402
from tilecraft.backends.cuda.runtime import current_arch, has_cuda_device  # noqa: E402

if not has_cuda_device() or not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU and torch with CUDA", allow_module_level=True)
if current_arch() != "sm_90a":
    pytest.skip("wgmma needs an sm_90 (Hopper) GPU", allow_module_level=True)

import kernels  # noqa: E402
import tilecraft  # noqa: E402
from gpu_helpers import poisoned, rel_error, run_gemm  # noqa: E402


def uses_wgmma(kernel) -> bool:
    return "tc::wgmma_m64n" in kernel.get_kernel_source()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (False, True), (True, False),
                                             (True, True)])
@pytest.mark.parametrize("shape", [(256, 256, 128), (200, 136, 72), (64, 320, 512)])
def test_wgmma_orientations_and_ragged_sizes(dtype, trans_A, trans_B, shape):
    kernel = run_gemm(*shape, dtype=dtype, trans_A=trans_A, trans_B=trans_B, bm=64, bn=64,
                      bk=64, threads=128, num_stages=2)
    assert uses_wgmma(kernel)


@pytest.mark.parametrize("bm,bn,bk,threads", [
    (128, 256, 64, 256),   # two warpgroups along M, N = 256 per instruction
    (128, 128, 64, 128),   # one warpgroup issuing two m64 instructions
    (64, 256, 64, 256),    # two warpgroups along N (N = 128 each)
    (192, 128, 32, 384),   # three warpgroups, 64-byte swizzled A
    (128, 64, 32, 128),    # narrow N, 64-byte swizzle
    (256, 128, 64, 256)])  # two warpgroups, two instructions each
@pytest.mark.parametrize("trans_B", [False, True])
def test_wgmma_tile_configs(bm, bn, bk, threads, trans_B):
    kernel = run_gemm(456, 520, 264, bm=bm, bn=bn, bk=bk, threads=threads, trans_B=trans_B,
                      num_stages=3)
    assert uses_wgmma(kernel)
    assert kernel.n_spills == 0


@pytest.mark.parametrize("trans_B", [False, True])
def test_wgmma_with_a_in_registers(trans_B):
    kernel = run_gemm(192, 128, 96, bm=64, bn=128, bk=32, threads=128, trans_B=trans_B,
                      a_in_registers=True)
    assert "_rs<" in kernel.get_kernel_source()


@pytest.mark.parametrize("stages", [0, 2, 4])
@pytest.mark.parametrize("shape", [(256, 256, 512), (96, 64, 40), (64, 64, 32)])
def test_wgmma_pipelined_any_trip_count(stages, shape):
    assert uses_wgmma(run_gemm(*shape, bm=64, bn=64, bk=32, threads=128, num_stages=stages))


def test_gemm_that_wgmma_cannot_take_stays_on_mma_sync():
    kernel = run_gemm(128, 128, 64, bm=32, bn=64, bk=32, threads=128)  # M < 64
    source = kernel.get_kernel_source()
    assert "mma_m16n8k16" in source and not uses_wgmma(kernel)


def test_policy_full_col_splits_warpgroups_along_n():
    kernel = run_gemm(256, 256, 128, bm=128, bn=128, bk=32, threads=256,
                      policy=T.GemmWarpPolicy.FullCol)
    assert "wgmma_m64n64k16" in kernel.get_kernel_source()


def is_warp_specialized(kernel) -> bool:
    source = kernel.get_kernel_source()
    return "tc::tma_load_" in source and "tc::is_producer_thread" in source


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("shape", [(512, 512, 1024), (200, 136, 72), (64, 64, 32), (96, 64, 40),
                                   (320, 192, 200)])
def test_warp_specialized_tma_pipeline_any_trip_count(stages, shape):
    kernel = run_gemm(*shape, bm=128, bn=128, bk=64, threads=256, num_stages=stages)
    # One k-step (K <= 64) has nothing to overlap and keeps the block to its own threads.
    assert is_warp_specialized(kernel) == (shape[2] > 64)


@pytest.mark.parametrize("eviction", ["evict_first", "evict_last"])
@pytest.mark.parametrize("configs", [None, {"tl.disable_tma_lower": True}], ids=["tma", "cp.async"])
def test_l2_eviction_hints_ride_on_tma_and_cp_async(eviction, configs):
    kernel = run_gemm(200, 136, 72, bm=128, bn=128, bk=64, threads=256, num_stages=3,
                      pass_configs=configs, eviction=eviction)
    source = kernel.get_kernel_source()
    assert f"tc::l2_{eviction}()" in source
    assert ("tc::tma_load_2d_hint(" if configs is None else "tc::cp_async_cg_16_hint(") in source


def test_warp_specialization_can_be_turned_off():
    kernel = run_gemm(256, 256, 256, bm=128, bn=128, bk=64, threads=256, num_stages=3,
                      pass_configs={"tl.disable_warp_specialized": True})
    assert uses_wgmma(kernel) and not is_warp_specialized(kernel)
    kernel = run_gemm(256, 256, 256, bm=128, bn=128, bk=64, threads=256, num_stages=3,
                      pass_configs={"tl.disable_tma_lower": True})
    assert not is_warp_specialized(kernel)


@pytest.mark.parametrize("shape", [(256, 256, 512), (200, 136, 72)])
def test_warp_specialized_loop_feeding_mma_sync(shape):
    kernel = run_gemm(*shape, bm=64, bn=64, bk=32, threads=128, num_stages=3,
                      pass_configs={"tl.disable_wgmma": True})
    assert is_warp_specialized(kernel) and not uses_wgmma(kernel)


@pytest.mark.parametrize("a_dtype,b_dtype", [("float8_e4m3", "float8_e4m3"),
                                             ("float8_e5m2", "float8_e5m2"),
                                             ("float8_e4m3", "float8_e5m2")])
@pytest.mark.parametrize("shape,tiles", [
    ((256, 256, 512), dict()),
    ((200, 136, 96), dict(bm=64, bn=64, bk=32, threads=128, num_stages=3)),       # ragged
    ((320, 264, 384), dict(bm=128, bn=256, bk=128, threads=256, num_stages=3)),   # 128B rows
])
def test_fp8_wgmma(a_dtype, b_dtype, shape, tiles):
    M, N, K = shape
    kernel = tilecraft.compile(kernels.k_major_gemm(M, N, K, a_dtype=a_dtype, b_dtype=b_dtype,
                                                **tiles), target="cuda")
    assert "k32_f32_" in kernel.get_kernel_source()
    names = {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
    a = (torch.rand(M, K, device="cuda") * 4 - 2).to(names[a_dtype])
    b = (torch.rand(N, K, device="cuda") * 4 - 2).to(names[b_dtype])
    c = poisoned(M, N, dtype=torch.float32)
    kernel(a, b, c)
    ref = a.double() @ b.double().T
    assert not torch.isnan(c).any(), "unwritten output elements"
    # fp8 tensor cores add products with fewer mantissa bits than float32; a wrong layout or
    # descriptor is off by O(1)
    assert rel_error(c, ref) < 5e-3


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
def test_wgmma_over_sub_tiles_split_along_k(b_layout):
    """Q[:, :D] and Q[:, D:] of one shared tile (and KV likewise) on wgmma, both gemms into one
    accumulator (the sub-tile descriptors: tests/unit/test_wgmma_subtiles.py)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "unit" / "test_wgmma_subtiles.py"
    spec = importlib.util.spec_from_file_location("wgmma_subtiles", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = tilecraft.compile(module.split_k(b_layout))
    assert kernel.get_kernel_source().count("wgmma_m64n") >= 2
    M, N, D, DT = module.M, module.N, module.D, module.DT
    q = torch.randn(M, D + DT, device="cuda").half()
    kv = torch.randn(N, D + DT, device="cuda").half()
    p = poisoned(M, N, dtype=torch.float32)
    kernel(q, kv, kv.t().contiguous(), p)
    assert rel_error(p, q.double() @ kv.double().t()) < 1e-3
