"""T.gemm on tfloat32 operands: the TF32 tensor-core paths (wgmma m64nNk8 on sm_90a where both
operands are K-major in shared memory, mma.sync m16n8k8 otherwise), in every operand
orientation and with A in registers, run on the thread-level emulator against a float64
product of the same float32 data (TF32 keeps 10 mantissa bits, so agreement to ~1e-3); and
tfloat32 as a dtype: stored as float32, given float32 tensors."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T


def tf32_gemm(M, N, K, trans_a, trans_b, a_in_registers=False, block=(64, 64, 32),
              threads=128, stages=2, dtype=T.tfloat32):
    bm, bn, bk = block
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    a_tile = (bk, bm) if trans_a else (bm, bk)
    b_tile = (bn, bk) if trans_b else (bk, bn)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_f = T.alloc_fragment((bm, bn), T.float32)
            if a_in_registers:
                A_f = T.alloc_fragment(a_tile, dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                if a_in_registers:
                    T.copy(A_s, A_f)
                    T.gemm(A_f, B_s, C_f, transpose_B=trans_b)
                else:
                    T.gemm(A_s, B_s, C_f, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_f, C[by * bm, bx * bn])
    return main


CASES = [(False, True, False), (False, False, False), (True, True, False), (True, False, False),
         (False, True, True), (False, False, True)]


@pytest.mark.parametrize("dtype", [T.tfloat32, T.float32])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("trans_a,trans_b,regs", CASES,
                         ids=["NT", "NN", "TT", "TN", "NT-regs", "NN-regs"])
def test_tf32_gemm_on_the_tensor_cores(trans_a, trans_b, regs, arch, dtype):
    """tfloat32 operands, and float32 ones (TileLang multiplies those as tf32 too)."""
    M, N, K = 80, 72, 96   # ragged: partial tiles along M and N
    func = tf32_gemm(M, N, K, trans_a, trans_b, regs, dtype=dtype)
    source = tilecraft.compile(func, target=arch).get_kernel_source()
    if arch == "sm_90a" and not trans_a and trans_b and not regs:
        assert "k8_f32_tf32" in source and "mma_m16n8k8" not in source
    else:
        assert "mma_m16n8k8_tf32_f32" in source and "k8_f32_tf32" not in source
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (K, M) if trans_a else (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (N, K) if trans_b else (K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    kernel = tilecraft.compile(func, target=f"emulator:{arch}" if arch != "sm_80" else "emulator")
    kernel(a, b, c)
    assert kernel.reports == []
    want = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
    err = np.linalg.norm(c - want) / np.linalg.norm(want)
    assert err < 2e-3, err
    # rounded to tf32, not computed in float32: the error is TF32's, far above float32's
    assert err > 1e-5


def test_tfloat32_is_stored_as_float32():
    assert T.tfloat32.bits == 32 and T.tfloat32.storage is T.float32
    assert T.tfloat32 != T.float32 and T.tfloat32.c_type == "float"
    func = tf32_gemm(64, 64, 64, False, True)
    a = np.ones((64, 64), np.float32)
    out = np.zeros((64, 64), np.float32)
    tilecraft.compile(func, target="interp")(a, a, out)   # float32 arrays for tfloat32 tensors
    assert np.allclose(out, 64.0)
    with pytest.raises(tilecraft.TileError, match="expected dtype tfloat32, got float16"):
        tilecraft.compile(func, target="interp")(a.astype(np.float16), a, out)


def test_float32_tensors_fill_tfloat32_tiles_by_vector_copies():
    """A float32 tensor copied into a tfloat32 tile moves its bits unchanged: the copy stays
    asynchronous and 16 bytes wide (cp.async on sm_80, TMA on sm_90a) as between equal types."""
    import tilecraft.language as T

    @T.prim_func
    def main(A: T.Tensor((256, 256), T.float32), B: T.Tensor((256, 256), T.float32),
             C: T.Tensor((256, 256), T.float32)):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), T.tfloat32)
            B_s = T.alloc_shared((128, 32), T.tfloat32)
            C_f = T.alloc_fragment((128, 128), T.float32)
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[bx * 128, k * 32], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * 128, bx * 128])
    assert "cp_async_cg_16" in tilecraft.compile(main, target="sm_80").get_kernel_source()
    assert "tma_load" in tilecraft.compile(main, target="sm_90a").get_kernel_source()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_exact_float32_gemm_multiplies_in_float32(arch):
    """tl.exact_float32_gemm keeps a float32 gemm off the tensor cores: scalar float32
    multiply-adds, accurate to float32's rounding; explicit tfloat32 tiles stay TF32."""
    M, N, K = 40, 24, 64   # ragged along M and N; the scalar path is slow to emulate
    configs = {"tl.exact_float32_gemm": True}
    func = tf32_gemm(M, N, K, False, True, dtype=T.float32)
    source = tilecraft.compile(func, target=arch, pass_configs=configs).get_kernel_source()
    assert "tf32_f32" not in source and "f32_tf32" not in source
    tf32 = tilecraft.compile(tf32_gemm(M, N, K, False, True), target=arch,
                             pass_configs=configs).get_kernel_source()
    assert "tf32_f32" in tf32 or "f32_tf32" in tf32
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (N, K)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    want = a.astype(np.float64) @ b.T.astype(np.float64)
    for target in ("interp", f"emulator:{arch}" if arch != "sm_80" else "emulator"):
        c[:] = np.nan
        tilecraft.compile(func, target=target, pass_configs=configs)(a, b, c)
        assert np.linalg.norm(c - want) / np.linalg.norm(want) < 1e-6, target


def test_float32_gemm_with_k_off_the_tf32_grid_multiplies_in_float32():
    """TF32 instructions step k by 8: a float32 gemm over 12 columns keeps scalar float32
    multiply-adds (and the interpreter does not round its operands)."""
    M, N, K = 40, 24, 36
    func = tf32_gemm(M, N, K, False, True, block=(64, 64, 12), stages=0, dtype=T.float32)
    source = tilecraft.compile(func, target="sm_80").get_kernel_source()
    assert "mma_m16n8k8_tf32" not in source and "to_tf32" not in source
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (N, K)).astype(np.float32)
    want = a.astype(np.float64) @ b.T.astype(np.float64)
    for target in ("interp", "emulator"):
        c = np.full((M, N), np.nan, np.float32)
        tilecraft.compile(func, target=target)(a, b, c)
        assert np.linalg.norm(c - want) / np.linalg.norm(want) < 1e-6, target


def test_the_cost_model_prices_a_float32_gemm_on_the_tensor_cores():
    from tilecraft.analysis.counts import NodeCount
    from tilecraft.ir.tileop import Gemm, contract_of
    from tilecraft.ir.visitor import walk
    for dtype, k, tensor in ((T.float32, 32, True), (T.float32, 12, False),
                             (T.tfloat32, 32, True)):
        func = tf32_gemm(128, 128, 128, False, True, block=(64, 64, k), dtype=dtype)
        gemm = next(n for n in walk(func.body) if isinstance(n, Gemm))
        assert (gemm.multiply_dtype() == "tfloat32") == tensor
        count = NodeCount(0, "tileop")
        contract_of(gemm).charge(gemm, count, lambda g, m, n: ("mma", 2, 2))
        assert bool(count.tensor_flops) == tensor and bool(count.cuda_ops) != tensor


def test_float32_operand_rows_off_16_byte_chunks_stay_float32():
    """ldmatrix reads 16-byte rows: an operand slice starting 2 floats into its tile keeps
    scalar float32 FMAs (a TF32 load there would be misaligned)."""
    @T.prim_func
    def main(A: T.Tensor((64, 40), T.float32), B: T.Tensor((64, 32), T.float32),
             C: T.Tensor((64, 64), T.float32)):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 40), T.float32)
            B_s = T.alloc_shared((64, 32), T.float32)
            C_f = T.alloc_fragment((64, 64), T.float32)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s[:, 2:34], B_s, C_f, transpose_B=True, clear_accum=True)
            T.copy(C_f, C)
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, (64, 40)).astype(np.float32)
    b = rng.uniform(-1, 1, (64, 32)).astype(np.float32)
    want = a[:, 2:34].astype(np.float64) @ b.T.astype(np.float64)
    for target in ("interp", "emulator", "emulator:sm_90a"):
        c = np.full((64, 64), np.nan, np.float32)
        kernel = tilecraft.compile(main, target=target)
        kernel(a, b, c)
        assert getattr(kernel, "reports", []) == []
        assert np.linalg.norm(c - want) / np.linalg.norm(want) < 1e-6, target
