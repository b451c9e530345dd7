"""A T.copy from global memory into a fragment inside a T.Pipelined loop is issued num_stages - 1
iterations ahead into extra register versions (schedule/prefetch_fragments.py), and inside a
T.serial loop one iteration ahead when the copies are few registers: the results stay those of
the loop as written (short, ragged and empty trip counts, a fragment updated in place, read
after the loop), and copies whose source the loop computes stay in place."""
import re

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

ROWS, BLOCK = 8, 64


def row_sums(K, stages, after_loop=False, scale_in_place=False):
    """out[r] = sum over k of X[r, k] * (2 if scale_in_place else 1) (+ the last tile's
    elements again, after_loop), the tiles copied into a fragment in a pipelined loop (a
    T.serial loop where stages is None)."""
    @T.prim_func
    def main(X: T.Tensor((ROWS, K), "float32"), out: T.Tensor((ROWS,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            tile = T.alloc_fragment((ROWS, BLOCK), "float32")
            total = T.alloc_fragment((ROWS, BLOCK), "float32")
            acc = T.alloc_fragment((ROWS,), "float32")
            T.clear(total)
            steps = T.ceildiv(K, BLOCK)
            for k in T.serial(steps) if stages is None else T.Pipelined(steps,
                                                                          num_stages=stages):
                T.copy(X[0, k * BLOCK], tile)
                if scale_in_place:
                    for i, j in T.Parallel(ROWS, BLOCK):
                        tile[i, j] = tile[i, j] * 2
                for i, j in T.Parallel(ROWS, BLOCK):
                    total[i, j] += tile[i, j]
            if after_loop:
                for i, j in T.Parallel(ROWS, BLOCK):
                    total[i, j] += tile[i, j]
            T.reduce_sum(total, acc, dim=1)
            T.copy(acc, out)
    return main


def expected(X, after_loop, scale_in_place):
    K = X.shape[1]
    padded = np.zeros((ROWS, -(-K // BLOCK) * BLOCK), np.float64)
    padded[:, :K] = X
    tiles = padded.reshape(ROWS, -1, BLOCK) * (2 if scale_in_place else 1)
    want = tiles.sum(axis=(1, 2))
    if after_loop and tiles.shape[1]:
        want = want + tiles[:, -1].sum(axis=1)
    return want


@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("stages", [2, 3, None])
@pytest.mark.parametrize("K", [64, 100, 128, 320])
def test_results_of_the_loop_as_written(target, stages, K):
    X = np.random.default_rng(K + (stages or 1)).standard_normal((ROWS, K)).astype(np.float32)
    for after_loop, scale_in_place in ((False, False), (True, False), (False, True)):
        kernel = tilecraft.compile(row_sums(K, stages, after_loop, scale_in_place),
                                   target=target)
        out = np.full(ROWS, np.nan, np.float32)
        kernel(X, out)
        assert not kernel.reports
        np.testing.assert_allclose(out, expected(X, after_loop, scale_in_place),
                                   rtol=1e-5, atol=1e-4)


def test_the_next_tiles_are_loaded_into_register_versions():
    source = tilecraft.compile(row_sums(320, 3), target="emulator").get_kernel_source()
    assert "tile_ahead1[" in source and "tile_ahead2[" in source
    assert "k + 2 < 5" in source      # iteration k + 2's tile, loaded while k computes
    # the versions shift by one: a register each for 32-bit elements
    assert "tile[7] = tile_ahead1[7]" in source and "tile_ahead1[7] = tile_ahead2[7]" in source
    one_stage = tilecraft.compile(row_sums(320, 1), target="emulator").get_kernel_source()
    assert "_ahead" not in one_stage      # num_stages=1 asks for no copy ahead


def test_a_serial_loop_loads_its_next_small_tile_ahead():
    # 8 x 64 float32 over 64 threads: 32 bytes a thread, under SERIAL_PREFETCH_BYTES
    source = tilecraft.compile(row_sums(320, None), target="emulator").get_kernel_source()
    assert "tile_ahead1[" in source and "tile_ahead2[" not in source
    assert "k + 1 < 5" in source


def test_a_serial_loop_keeps_a_large_tile_in_place():
    @T.prim_func
    def main(X: T.Tensor((64, 256), "float32"), out: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=32) as bx:
            tile = T.alloc_fragment((64, 64), "float32")    # 512 bytes a thread
            total = T.alloc_fragment((64, 64), "float32")
            T.clear(total)
            for k in T.serial(4):
                T.copy(X[0, k * 64], tile)
                for i, j in T.Parallel(64, 64):
                    total[i, j] += tile[i, j]
            T.copy(total, out)
    kernel = tilecraft.compile(main, target="emulator")
    assert "_ahead" not in kernel.get_kernel_source()
    X = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32)
    out = np.full((64, 64), np.nan, np.float32)
    kernel(X, out)
    np.testing.assert_allclose(out, X.reshape(64, 4, 64).sum(1), rtol=1e-5, atol=1e-5)


def test_a_copy_whose_source_the_loop_computes_stays_in_place():
    @T.prim_func
    def main(X: T.Tensor((ROWS, 256), "float32"), Order: T.Tensor((4,), "int32"),
             out: T.Tensor((ROWS, BLOCK), "float32")):
        with T.Kernel(1, threads=64) as bx:
            tile = T.alloc_fragment((ROWS, BLOCK), "float32")
            total = T.alloc_fragment((ROWS, BLOCK), "float32")
            T.clear(total)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(X[0, Order[k] * BLOCK], tile)
                for i, j in T.Parallel(ROWS, BLOCK):
                    total[i, j] += tile[i, j]
            T.copy(total, out)
    kernel = tilecraft.compile(main, target="emulator")
    assert "_ahead" not in kernel.get_kernel_source()
    X = np.random.default_rng(1).standard_normal((ROWS, 256)).astype(np.float32)
    out = np.full((ROWS, BLOCK), np.nan, np.float32)
    kernel(X, np.array([3, 0, 3, 1], np.int32), out)
    np.testing.assert_allclose(out, X.reshape(ROWS, 4, BLOCK)[:, [3, 0, 3, 1]].sum(1),
                               rtol=1e-5)


def test_byte_fragments_shift_in_16_byte_moves():
    # One register a byte would be what nvcc makes of a byte-by-byte move.
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "dequant_gemm.py"
    spec = importlib.util.spec_from_file_location("dequant_gemm_for_prefetch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    func = module.dequant_gemv_fast.__wrapped__(1, 256, 4096, 32, num_stages=2)
    source = tilecraft.compile(func, target="emulator").get_kernel_source()
    assert re.search(r"st_regs_128\(T\.address_of\(B_local\[q\w* \* 16\]\), "
                     r"T\.tc::ld_regs_128\(T\.address_of\(B_local_ahead1\[", source)
