"""T.gemm on the mma.sync path (float32 operands as TF32, and on the FMA path under
tl.exact_float32_gemm), against torch."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
import gpu_helpers  # noqa: E402

# This file checks the mma.sync + cp.async path ([C]), which sm_90a also keeps for the gemms
# WGMMA cannot take and the loops TMA cannot feed; test_cuda_wgmma.py checks the same kernels
# where sm_90a picks wgmma and warp specialization.
MMA_SYNC = {"tl.disable_wgmma": True, "tl.disable_warp_specialized": True}


def run_gemm(*args, **kwargs):
    return gpu_helpers.run_gemm(*args, pass_configs=MMA_SYNC, **kwargs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("shape", [(256, 256, 128), (200, 136, 72), (64, 320, 512)])
def test_gemm_layouts_and_ragged_sizes(dtype, trans_A, trans_B, shape):
    run_gemm(*shape, dtype=dtype, trans_A=trans_A, trans_B=trans_B)


@pytest.mark.parametrize("bm,bn,bk,threads", [(128, 128, 32, 128), (128, 256, 64, 256),
                                              (64, 128, 32, 256), (128, 64, 64, 128)])
def test_gemm_tile_configs(bm, bn, bk, threads):
    run_gemm(384, 512, 256, bm=bm, bn=bn, bk=bk, threads=threads)


@pytest.mark.parametrize("policy", [T.GemmWarpPolicy.FullRow, T.GemmWarpPolicy.FullCol])
def test_gemm_policies(policy):
    run_gemm(256, 256, 128, bm=128, bn=128, policy=policy)


@pytest.mark.parametrize("trans_B", [False, True])
def test_gemm_with_a_in_registers(trans_B):
    run_gemm(192, 128, 96, trans_B=trans_B, a_in_registers=True, policy=T.GemmWarpPolicy.FullRow)


def test_float32_gemm_runs_tf32_mma_or_exact_fma():
    kernel = run_gemm(100, 70, 48, dtype="float32", bm=32, bn=32, bk=16)
    assert "mma_m16n8k8_tf32" in kernel.get_kernel_source()
    exact = gpu_helpers.run_gemm(100, 70, 48, dtype="float32", bm=32, bn=32, bk=16,
                                 pass_configs={**MMA_SYNC, "tl.exact_float32_gemm": True})
    assert "mma" not in exact.get_kernel_source()


def test_gemm_reports_registers_and_no_spills():
    kernel = run_gemm(256, 256, 64, bm=128, bn=128, bk=32)
    assert kernel.n_regs > 0
    assert kernel.n_spills == 0
    source = kernel.get_kernel_source()
    assert "ldmatrix" in source and "mma_m16n8k16" in source


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("shape", [(256, 256, 512), (200, 136, 72), (64, 64, 32), (96, 64, 40)])
@pytest.mark.parametrize("trans_B", [False, True])
def test_pipelined_gemm_any_trip_count(stages, shape, trans_B):
    """cp.async pipelines with K tiles fewer than, equal to and more than the stages."""
    kernel = run_gemm(*shape, trans_B=trans_B, num_stages=stages)
    assert "cp_async_cg_16" in kernel.get_kernel_source() or shape[2] % 8
    assert "if (kk == 1)" in kernel.get_kernel_source()  # rotate_mma_loop's schedule
