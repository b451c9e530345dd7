"""Copies of part of an accumulator fragment (a band of its columns) into shared or global
memory: the registers that hold the band, one run or several per thread, are stored as packed
pairs or by stmatrix, and a persistent GEMM whose whole staging tile does not fit beside its
ring stages its epilogue in such bands. Checked in the CUDA source, on the emulator against
numpy (and a missing wait between two bands' stores found there), and for the parts that
cannot be stored so, a clear error at the user's line."""
import numpy as np
import pytest

import tilecraft
import tilecraft.backends.cuda.emulator as E
import tilecraft.language as T
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda import pipeline as pipelines

from error_expect import expect
from test_persistent_tiles import staging_elements

PERSISTENT = tilecraft.PassConfigKey.TL_ENABLE_PERSISTENT_TILES


def banded_gemm(M, N, K, block_M, block_N, block_K, threads, out="float16"):
    """A GEMM whose epilogue the user wrote in two column bands through one shared tile."""
    half = block_N // 2

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), out)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_band = T.alloc_shared((block_M, half), out)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_local)
            T.copy(C_local[0:block_M, 0:half], C_band)
            T.copy(C_band, C[by * block_M, bx * block_N])
            T.copy(C_local[0:block_M, half:block_N], C_band)
            T.copy(C_band, C[by * block_M, bx * block_N + half])
    return main


def random_operands(M, N, K):
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    return A, B, A.astype(np.float32) @ B.astype(np.float32)


def emulated(lowered, A, B, out=np.float16):
    C = np.full((A.shape[0], B.shape[1]), np.nan, out)
    reports = list(E.run(lowered, [A, B, C]))
    return C, reports


@pytest.mark.parametrize("block_M, threads", [(64, 128), (128, 128), (128, 256)],
                         ids=["one-run", "two-runs", "two-warpgroups"])
def test_user_bands_run_on_the_emulator(block_M, threads):
    # block_M 128 on one warpgroup: two m64 instructions, so each band is two register runs
    M, N, K = 200, 136, 72
    A, B, want = random_operands(M, N, K)
    lowered = E.lower(banded_gemm(M, N, K, block_M, 64, 32, threads), "sm_90a")
    C, reports = emulated(lowered, A, B)
    assert not reports
    assert np.abs(C.astype(np.float32) - want).max() < 2e-2


@pytest.mark.parametrize("block_M", [64, 128])
def test_bands_of_float32_leave_in_their_own_dtype(block_M):
    # no packing into halves: each thread's column pairs leave as 64-bit stores
    M, N, K = 200, 136, 72
    A, B, want = random_operands(M, N, K)
    func = banded_gemm(M, N, K, block_M, 64, 32, 128, out="float32")
    lowered = E.lower(func, "sm_90a")
    C, reports = emulated(lowered, A, B, np.float32)
    assert not reports
    assert np.abs(C - want).max() < 1e-3
    text = tilecraft.compile(func, target="sm_90a").get_kernel_source()
    assert "tc::st_shared_64(" in text and "tc::pack_half2" not in text


def float32_gemm(M, N, K, block_M, block_N, block_K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])
    return main


@pytest.mark.parametrize("bands", [2, 4])
def test_a_persistent_float32_gemm_stages_in_bands(bands):
    M, N, K = 150, 300, 100
    # the whole 64 x 128 float32 tile is 32 KiB: room beside the ring for one band only
    ring = 2 * (64 * 32 + 32 * 128) * 2
    lowered = pipelines.cuda(float32_gemm(M, N, K, 64, 128, 32), "sm_90a",
                             ring + 2048 + 32 * 1024 // bands + 1024, {PERSISTENT: True})
    assert staging_elements(lowered) == [64 * 128 // bands]
    A, B, want = random_operands(M, N, K)
    C, reports = emulated(lowered, A, B, np.float32)
    assert not reports
    assert np.abs(C - want).max() < 1e-3


def test_a_band_written_while_the_last_band_is_being_stored_is_a_race():
    from test_emulator_checker import calls, dropped, plant
    M, N, K = 200, 136, 72
    A, B, _ = random_operands(M, N, K)
    lowered = E.lower(banded_gemm(M, N, K, 64, 64, 32, 128), "sm_90a")
    # the third wait for the TMA store's reads: the one between the two bands
    _, reports = emulated(plant(lowered, calls("tc::tma_store_wait<0>"), dropped, 2), A, B)
    assert reports and reports[0].kind == "race" and reports[0].buffer == "C_band"
    assert "cp.async.bulk.wait_group.read" in reports[0].message


@pytest.mark.parametrize("stages, limit, bands", [(2, 10 * 1024, 2), (2, 6 * 1024, 4)])
def test_a_persistent_gemm_stages_in_bands_what_does_not_fit(example, stages, limit, bands):
    # ring: 2 stages x (64 x 32 + 32 x 128) halves = 24 KiB; the whole 64 x 128 tile 16 KiB
    M, N, K = 150, 300, 100
    func = underlying(example("gemm").matmul)(M, N, K, block_M=64, block_N=128, block_K=32,
                                              threads=128, num_stages=stages)
    ring = stages * (64 * 32 + 32 * 128) * 2
    lowered = pipelines.cuda(func, "sm_90a", ring + 2048 + limit, {PERSISTENT: True})
    assert staging_elements(lowered) == [64 * 128 // bands]
    A, B, want = random_operands(M, N, K)
    C, reports = emulated(lowered, A, B)
    assert not reports
    assert np.abs(C.astype(np.float32) - want).max() < 2e-2


def test_the_bands_are_stored_by_stmatrix_from_their_own_registers():
    kernel = tilecraft.compile(banded_gemm(256, 256, 64, 128, 256, 64, 256), target="sm_90a")
    stores = [line for line in kernel.get_kernel_source().splitlines()
              if "tc::stmatrix_x4(" in line]
    # each warpgroup's 64 x 256 accumulator: registers 0..63 hold columns 0..127
    assert len(stores) == 2
    assert "C_local[g * 8]" in stores[0] and "C_local[g * 8 + 64]" not in stores[0]
    assert "C_local[g_1 * 8 + 64]" in stores[1]


@T.prim_func
def _top_rows(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 256), "float16"),
              C: T.Tensor((64, 256), "float16")):
    with T.Kernel(1, 1, threads=256) as (bx, by):
        A_s = T.alloc_shared((128, 64), "float16")
        B_s = T.alloc_shared((64, 256), "float16")
        C_top = T.alloc_shared((64, 256), "float16")
        C_local = T.alloc_fragment((128, 256), "float32")
        T.clear(C_local)
        T.copy(A, A_s)
        T.copy(B, B_s)
        T.gemm(A_s, B_s, C_local)
        T.copy(C_local[0:64, 0:256], C_top)
        T.copy(C_top, C)


@T.prim_func
def _rows_by_loop(G: T.Tensor((4, 128), "float32"), O: T.Tensor((128,), "float32")):
    """flash decoding's combine: a row of a fragment picked by a loop variable each step."""
    with T.Kernel(2, threads=128) as bx:
        lse = T.alloc_fragment((4, 64), "float32")
        row = T.alloc_fragment((64,), "float32")
        top = T.alloc_fragment((64,), "float32")
        acc = T.alloc_fragment((64,), "float32")
        T.clear(acc)
        T.copy(G[:, bx * 64:(bx + 1) * 64], lse)
        T.reduce_max(lse, top, dim=0, clear=True)
        for k in T.Pipelined(4):
            T.copy(lse[k, :], row)
            for i in T.Parallel(64):
                acc[i] += T.exp2(row[i] - top[i])
        T.copy(acc, O[bx * 64])


@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
def test_parts_no_register_band_holds_go_through_shared_memory(target):
    """A part held by some threads only (the top rows of a wgmma accumulator split over two
    warpgroups) and a row picked by a loop variable: the whole fragment is staged in shared
    memory, where the part is an ordinary region."""
    rng = np.random.default_rng(9)
    a = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
    b = rng.uniform(-1, 1, (64, 256)).astype(np.float16)
    got = tilecraft.compile(_top_rows, out_idx=[2], target=target)(a, b)
    want = a[:64].astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    g = rng.uniform(-1, 1, (4, 128)).astype(np.float32)
    got = tilecraft.compile(_rows_by_loop, out_idx=[1], target=target)(g)
    want = np.exp2(g - g.reshape(4, 2, 64).max(0).reshape(-1)).sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_copy_into_part_of_a_fragment_is_refused():
    def program():
        @T.prim_func
        def main(A: T.Tensor((128, 64), "float32"), C: T.Tensor((128, 128), "float32")):
            with T.Kernel(1, threads=128) as bx:
                C_local = T.alloc_fragment((128, 128), "float32")
                T.clear(C_local)
                T.copy(A[0, 0], C_local[0:128, 0:64])  # <- here
                T.copy(C_local, C[0, 0])
        tilecraft.compile(main, target="sm_90a")
    expect(program, "part of fragment C_local is not supported", "T.copy(")
