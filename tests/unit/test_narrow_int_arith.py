"""Integers narrower than int keep their width through arithmetic: a uint16 shifted left past
its 16 bits, a uint8 negated or bit-inverted, an int8 sum that overflows wrap as their type
does (numpy's result), on the interpreter and in the generated CUDA, where C would compute
them in int; the fp4 -> float16 unpacking of TileLang's dequantize examples, which reads such a
shifted uint16 as a half, compiles and gives numpy's bits. The GPU runs the same program in
tests/gpu/test_narrow_int_gpu.py."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc
from tilecraft.tvm import tirx

needs_nvcc = pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
N = 300   # not a multiple of the block: the tail is guarded


def fp4_to_half(val, pos):
    """s1e2m1 in the low or high nibble of a byte, as a float16 (TileLang's example helper)."""
    u16 = T.uint16
    f4 = (val >> (pos.astype(u16) * tirx.const(4, u16))) & tirx.const(15, u16)
    s = f4 >> tirx.const(3, u16)
    e = ((f4 & tirx.const(6, u16)) >> tirx.const(1, u16)) + tirx.const(14, u16)
    m = f4 & tirx.const(1, u16)
    bits = (e | (s << tirx.const(5, u16))) << tirx.const(10, u16) | m << tirx.const(9, u16)
    return tirx.reinterpret(T.float16, bits)


def program():
    @T.prim_func
    def main(A: T.Tensor((N,), T.uint8), B: T.Tensor((N,), T.uint16),
             H: T.Tensor((N, 2), T.float16), W: T.Tensor((N, 5), T.int32)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i, j in T.Parallel(128, 2):
                n = bx * 128 + i
                if n < N:
                    H[n, j] = fp4_to_half(A[n], j)
            for i in T.Parallel(128):
                n = bx * 128 + i
                if n < N:
                    W[n, 0] = T.cast((B[n] << T.uint16(7)) >> T.uint16(9), T.int32)
                    W[n, 1] = T.cast((~A[n]) >> T.uint8(4), T.int32)
                    W[n, 2] = T.cast((A[n] + T.uint8(200)) >> T.uint8(1), T.int32)
                    W[n, 3] = T.cast(T.reinterpret(A[n] * T.uint8(3), T.int8) >> T.int8(1),
                                     T.int32)
                    W[n, 4] = T.cast(T.min(B[n] + T.uint16(300), tirx.const(255, T.uint16)),
                                     T.int32)
    return main


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, N, dtype=np.uint8)
    b = rng.integers(0, 65536, N, dtype=np.uint16)
    b[:4] = [65535, 65300, 65236, 65235]   # b + 300 wraps for the first three
    return a, b, np.full((N, 2), np.nan, np.float16), np.full((N, 5), -7, np.int32)


def expected(a, b):
    nib = np.stack([a & 15, a >> 4], axis=1).astype(np.uint16)
    s, e, m = nib >> 3, ((nib & 6) >> 1) + 14, nib & 1
    h = (((e | (s << 5)) << 10) | (m << 9)).astype(np.uint16).view(np.float16)
    w = np.stack([((b << np.uint16(7)).astype(np.uint16) >> 9).astype(np.int32),
                  ((~a).astype(np.uint8) >> 4).astype(np.int32),
                  ((a + np.uint8(200)).astype(np.uint8) >> 1).astype(np.int32),
                  ((a * np.uint8(3)).astype(np.uint8).view(np.int8) >> 1).astype(np.int32),
                  np.minimum((b + np.uint16(300)).astype(np.uint16), 255).astype(np.int32)],
                 axis=1)
    return h, w


@pytest.mark.parametrize("target", ["interp", "emulator"])
def test_narrow_integers_wrap(target):
    """On the interpreter, and on the emulator running the lowered code (whose integer
    simplification must not take a uint16 sum past its range)."""
    a, b, h, w = inputs()
    tilecraft.compile(program(), target=target)(a, b, h, w)
    want_h, want_w = expected(a, b)
    np.testing.assert_array_equal(h.view(np.uint16), want_h.view(np.uint16))
    np.testing.assert_array_equal(w, want_w)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_generated_cuda_keeps_the_width(arch):
    kernel = tilecraft.compile(program(), target=arch)
    source = kernel.get_kernel_source()
    # the bits read as a half are a uint16 expression, not the int C promotes it to
    assert "tc::bit_cast<half_t>((unsigned short)" in source
    assert "((unsigned short)(" in source and "((unsigned char)(~" in source
