"""A T.Parallel nest inside a T.serial loop that reads a fragment at indices using the serial
loop's variable (x[i, jj * 4 + j]), where the fragment's layout is fixed by a gemm that takes
it as its register A operand: whichever thread runs an iteration, what it reads at every jj
must be what it gets. (Such reads were once not checked at all and took another element's
register.) Run on the emulator against numpy, for a 16-bit and a tf32 operand."""
import ml_dtypes
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T


def squares_and_gemm(frag_dtype, tb=32, hb=64, H=128, N=64):
    @T.prim_func
    def main(x: T.Tensor((N, H), "bfloat16"), fn: T.Tensor((32, H), frag_dtype),
             out: T.Tensor((N, 32), "float32"), sq: T.Tensor((N,), "float32")):
        with T.Kernel(N // tb, threads=128) as px:
            acc = T.alloc_fragment((tb, 32), "float32")
            part = T.alloc_fragment((tb, 4), "float32")
            T.clear(acc)
            T.clear(part)
            for pz in T.Pipelined(H // hb, num_stages=2):
                xs = T.alloc_shared((tb, hb), "bfloat16")
                fs = T.alloc_shared((32, hb), frag_dtype)
                T.copy(x[px * tb, pz * hb], xs)
                T.copy(fn[0, pz * hb], fs)
                xf = T.alloc_fragment((tb, hb), frag_dtype)
                T.copy(xs, xf)
                for jj in T.serial(hb // 4):
                    for i, j in T.Parallel(tb, 4):
                        part[i, j] += T.cast(xf[i, jj * 4 + j], "float32") * \
                            T.cast(xf[i, jj * 4 + j], "float32")
                T.gemm(xf, fs, acc, transpose_B=True)
            s = T.alloc_fragment(tb, "float32")
            T.reduce_sum(part, s)
            for i in T.Parallel(tb):
                sq[px * tb + i] = s[i]
            T.copy(acc, out[px * tb, 0])
    return main


@pytest.mark.filterwarnings("ignore:.*through shared memory")
@pytest.mark.parametrize("frag_dtype", ["bfloat16", "tfloat32"])
def test_reads_at_a_serial_loops_variable_get_their_own_elements(frag_dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    fn = (rng.standard_normal((32, 128)) / 8).astype(
        np.float32 if frag_dtype == "tfloat32" else ml_dtypes.bfloat16)
    out = np.full((64, 32), np.nan, np.float32)
    sq = np.full((64,), np.nan, np.float32)
    kernel = tilecraft.compile(squares_and_gemm(frag_dtype), target="emulator")
    kernel(x, fn, out, sq)
    assert kernel.reports == []
    xf = x.astype(np.float64)
    np.testing.assert_allclose(sq, (xf ** 2).sum(1), rtol=1e-5)
    want = xf @ fn.astype(np.float64).T
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 2e-3


def squares_over(trip):
    """The squares of the first `trip` four-column chunks of a gemm's register operand, trip
    a scalar argument: the loop's range is not known when the kernel is compiled."""
    @T.prim_func
    def main(x: T.Tensor((64, 64), "bfloat16"), fn: T.Tensor((32, 64), "bfloat16"),
             out: T.Tensor((64, 32), "float32"), sq: T.Tensor((64,), "float32"),
             nj: T.int32):
        with T.Kernel(2, threads=128) as px:
            acc = T.alloc_fragment((32, 32), "float32")
            part = T.alloc_fragment((32, 4), "float32")
            T.clear(acc)
            T.clear(part)
            xs = T.alloc_shared((32, 64), "bfloat16")
            fs = T.alloc_shared((32, 64), "bfloat16")
            T.copy(x[px * 32, 0], xs)
            T.copy(fn[0, 0], fs)
            xf = T.alloc_fragment((32, 64), "bfloat16")
            T.copy(xs, xf)
            for jj in T.serial(trip if trip else nj):
                for i, j in T.Parallel(32, 4):
                    part[i, j] += T.cast(xf[i, jj * 4 + j], "float32") * \
                        T.cast(xf[i, jj * 4 + j], "float32")
            T.gemm(xf, fs, acc, transpose_B=True)
            s = T.alloc_fragment(32, "float32")
            T.reduce_sum(part, s)
            for i in T.Parallel(32):
                sq[px * 32 + i] = s[i]
            T.copy(acc, out[px * 32, 0])
    return main


@pytest.mark.filterwarnings("ignore:.*through shared memory")
def test_reads_at_a_variable_of_unknown_range_go_through_shared_memory():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    fn = rng.standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    out = np.zeros((64, 32), np.float32)
    sq = np.full((64,), np.nan, np.float32)
    kernel = tilecraft.compile(squares_over(None), target="emulator")
    assert "xf_relaid" in tilecraft.compile(squares_over(None), target="sm_80") \
        .get_kernel_source()
    kernel(x, fn, out, sq, 16)
    assert kernel.reports == []
    np.testing.assert_allclose(sq, (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)


def test_a_write_at_a_variable_of_unknown_range_is_refused():
    @T.prim_func
    def main(A: T.Tensor((32, 64), "float32"), n: T.int32):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((32, 64), "float32")
            T.copy(A, acc)
            for jj in T.serial(n):
                for i, j in T.Parallel(32, 4):
                    acc[i, jj * 4 + j] = acc[i, jj * 4 + j] * 2.0
            T.copy(acc, A)
    with pytest.raises(tilecraft.TileError, match="whose range is not known"):
        tilecraft.compile(main, target="sm_80")


def test_a_write_into_a_fragment_kept_in_every_thread_must_reach_every_copy():
    """A fragment no partition follows is kept whole in every thread; a loop that writes one
    copy of an element (its iterations spread over the threads) would leave the others stale:
    refused. (It used to compile, and a later read took a stale copy.)"""
    @T.prim_func
    def main(A: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((32, 64), "float32")
            T.copy(A, acc)
            for jj in T.serial(16):
                for i, j in T.Parallel(32, 4):
                    acc[i, jj * 4 + j] = acc[i, jj * 4 + j] * 2.0
            T.copy(acc, A)
    with pytest.raises(tilecraft.TileError, match="the other copies would keep the old value"):
        tilecraft.compile(main, target="sm_80")
