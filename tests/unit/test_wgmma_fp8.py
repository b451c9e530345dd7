"""fp8 GEMMs on wgmma (m64nNk32, e4m3 / e5m2 in any pair, sm_90a): the instruction chosen, the
CUDA the compiler writes, the reasons a gemm stays off wgmma, and the numbers through the
emulator (which reads the operands through the descriptors as the hardware does)."""
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilecraft
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir.tileop import Gemm
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.schedule.infer_instructions import infer_instructions
from tilecraft.backends.cuda.tileops.wgmma import wgmma_unfit_reason

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402

NUMPY = {"float8_e4m3": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def source(func, configs=None):
    return emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024, configs))[0]


def test_fp8_gemm_runs_on_k32_wgmma_with_its_own_header():
    text = source(kernels.k_major_gemm(1024, 1024, 512))
    assert '#include "tilecraft/wgmma_fp8.h"' in text
    # 128 x 128 over two warpgroups: one m64n128k32 per warpgroup and k step, 2 k steps of 32
    assert "tc::wgmma_m64n128k32_f32_e4m3_e4m3((&C_f[0])" in text
    assert "k16" not in text
    # a 64-byte fp8 row: 64B swizzle, 8-row groups 512 bytes apart
    assert "2, 16, 512)" in text


def test_mixed_fp8_types_pick_the_mixed_instruction():
    text = source(kernels.k_major_gemm(256, 256, 256, a_dtype="float8_e5m2"))
    assert "tc::wgmma_m64n128k32_f32_e5m2_e4m3(" in text


def test_only_fp8_kernels_include_the_fp8_header():
    text = source(kernels.gemm(256, 256, 256, 128, 128, 64, "float16", "float32", threads=256,
                               num_stages=2))
    assert "wgmma_fp8.h" not in text and "k16_f32_f16" in text


def _reason(func, threads=256):
    op = next(n for n in walk(func) if isinstance(n, Gemm))
    return wgmma_unfit_reason(op, op.dims(), threads)


def test_reasons_an_fp8_gemm_stays_off_wgmma():
    assert _reason(kernels.k_major_gemm(256, 256, 256)) is None
    assert "multiple of 32" in _reason(kernels.k_major_gemm(256, 256, 256, bk=16))
    # B stored K x N (transpose_B=False) is N-major: fp8 wgmma reads K-major operands only
    func = kernels.gemm(256, 256, 256, 128, 128, 64, "float8_e4m3", "float32", threads=256)
    assert "K-major" in _reason(func)
    chosen = [n.instruction for n in walk(infer_instructions(func, "sm_90a"))
              if isinstance(n, Gemm)]
    assert chosen == ["mma"]


@pytest.mark.parametrize("a_dtype,b_dtype", [("float8_e4m3", "float8_e4m3"),
                                             ("float8_e5m2", "float8_e4m3"),
                                             ("float8_e4m3", "float8_e5m2")])
@pytest.mark.parametrize("M,N,K,tiles", [
    (130, 200, 96, dict()),                                                     # ragged
    (64, 72, 256, dict(bm=64, bn=64, bk=128, threads=128, num_stages=3)),     # 128B swizzle
])
def test_fp8_wgmma_numbers_on_the_emulator(a_dtype, b_dtype, M, N, K, tiles):
    func = kernels.k_major_gemm(M, N, K, a_dtype=a_dtype, b_dtype=b_dtype, **tiles)
    kernel = tilecraft.compile(func, target="emulator:sm_90a")
    assert "k32_f32" in kernel.get_kernel_source()
    rng = np.random.default_rng(0)
    A = rng.uniform(-3, 3, (M, K)).astype(NUMPY[a_dtype])
    B = rng.uniform(-3, 3, (N, K)).astype(NUMPY[b_dtype])
    C = np.full((M, N), np.nan, np.float32)
    kernel(A, B, C)
    want = A.astype(np.float64) @ B.astype(np.float64).T
    assert not np.isnan(C).any()
    np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-4)
