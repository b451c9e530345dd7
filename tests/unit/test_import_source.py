"""T.import_source puts device functions in the kernel's CUDA module, for T.call_extern to call
with T.access_ptr pointers, as TileLang's fast-dequantize examples do: per thread, a local
array unpacked by the imported function into another. The interpreter runs the registered
Python twin; the generated CUDA holds the source once, ahead of the kernel, and nvcc builds it.
The GPU runs it in tests/gpu/test_import_source_gpu.py."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc
from tilecraft.errors import TileError

needs_nvcc = pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
N = 200   # bytes; 4 a thread, the last block's tail guarded

SOURCE = """
template <typename T>
__device__ void unpack_nibbles(const unsigned char* in, T* out, int n) {
  for (int i = 0; i < n; ++i) {
    out[2 * i] = T((in[i] & 15) - 8);
    out[2 * i + 1] = T((in[i] >> 4) - 8);
  }
}
"""


def unpack_nibbles(src, dst, n):
    b = src.read(n).astype(np.int32)
    dst.write(np.stack([(b & 15) - 8, (b >> 4) - 8], axis=1).reshape(-1))


def program():
    @T.prim_func
    def main(A: T.Tensor((N,), T.uint8), B: T.Tensor((N * 2,), T.float32)):
        with T.Kernel(T.ceildiv(N, 128), threads=32) as bx:
            packed = T.alloc_local((4,), T.uint8)
            values = T.alloc_local((8,), T.float32)
            tx = T.get_thread_binding()
            base = bx * 128 + tx * 4
            T.import_source(SOURCE)
            for i in T.serial(4):
                packed[i] = T.if_then_else(base + i < N, A[T.min(base + i, N - 1)], 0)
            T.call_extern("unpack_nibbles", T.access_ptr(packed, "r"),
                          T.access_ptr(values[0:8], "w", 8), 4)
            for i in T.serial(8):
                if base * 2 + i < N * 2:
                    B[base * 2 + i] = values[i]
    return main


def inputs(seed=0):
    a = np.random.default_rng(seed).integers(0, 256, N, dtype=np.uint8)
    return a, np.full(N * 2, np.nan, np.float32)


def expected(a):
    b = a.astype(np.int32)
    return np.stack([(b & 15) - 8, (b >> 4) - 8], axis=1).reshape(-1).astype(np.float32)


def test_the_interpreter_runs_the_registered_twin():
    tilecraft.register_extern("unpack_nibbles", unpack_nibbles)
    a, b = inputs()
    tilecraft.compile(program(), target="interp")(a, b)
    np.testing.assert_array_equal(b, expected(a))


@needs_nvcc
def test_the_module_holds_the_source_once_ahead_of_the_kernel():
    kernel = tilecraft.compile(program(), target="sm_80")
    source = kernel.get_kernel_source()
    assert source.count("__device__ void unpack_nibbles") == 1
    assert source.index("unpack_nibbles(const") < source.index("__global__")
    assert "unpack_nibbles((&packed[0]), (&values[0]), 4)" in source


def test_access_ptr_offsets_and_refusals():
    from tilecraft.ir.expr import Call
    from tilecraft.ir.visitor import walk

    @T.prim_func
    def main(A: T.Tensor((4, 8), T.float32)):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((4, 8), T.float32)
            T.evaluate(T.call_extern("f", T.access_ptr(s[1, 2], "rw", offset=3),
                                     T.access_ptr(A[2:4, :], "r")))
    (p, q) = [n.args[0] for n in walk(main.body) if isinstance(n, Call) and
              n.name == "address_of"]
    assert p.buffer.name == "s" and [int(i.value) for i in p.indices] == [1, 5]
    assert q.buffer.name == "A" and [int(i.value) for i in q.indices] == [2, 0]
    with pytest.raises(TileError, match="access_type is 'r', 'w' or 'rw', got 'q'"):
        @T.prim_func
        def bad(A: T.Tensor((4, 8), T.float32)):
            with T.Kernel(1, threads=32):
                T.evaluate(T.call_extern("f", T.access_ptr(A, "q")))


def pipelined_program():
    """The dequantize examples' form: inside a T.Pipelined loop each thread unpacks its
    slice of a shared tile with the imported function."""
    K = 4 * 128

    @T.prim_func
    def main(A: T.Tensor((K,), T.uint8), B: T.Tensor((K * 2,), T.float32)):
        with T.Kernel(1, threads=32) as bx:
            tile = T.alloc_shared((128,), T.uint8)
            packed = T.alloc_local((4,), T.uint8)
            values = T.alloc_local((8,), T.float32)
            tx = T.get_thread_binding()
            T.import_source(SOURCE)
            for k in T.Pipelined(K // 128, num_stages=2):
                T.copy(A[k * 128:(k + 1) * 128], tile)
                for i in T.vectorized(4):
                    packed[i] = tile[tx * 4 + i]
                T.call_extern("unpack_nibbles", T.access_ptr(packed, "r"),
                              T.access_ptr(values, "w"), 4)
                for i in T.serial(8):
                    B[k * 256 + tx * 8 + i] = values[i]
    return main


def test_a_pipelined_loop_calling_the_function():
    tilecraft.register_extern("unpack_nibbles", unpack_nibbles)
    a = np.random.default_rng(1).integers(0, 256, 512, dtype=np.uint8)
    b = np.full(1024, np.nan, np.float32)
    tilecraft.compile(pipelined_program(), target="interp")(a, b)
    np.testing.assert_array_equal(b, expected(a))
    if has_nvcc():
        source = tilecraft.compile(pipelined_program(), target="sm_90a").get_kernel_source()
        assert "unpack_nibbles((&packed[0]), (&values[0]), 4)" in source
