"""Malformed programs that index a fragment, shared tile or local buffer past its extent
where the compiler can bound the index (frontend/access_bounds.py): a T.Parallel nest larger
than the fragment it indexes, loop and block variables that outgrow a tile, offsets past
either end, tile-op regions that leave their buffer. On the GPU these read and write other
elements' registers and shared memory without any error. Indices guarded by an `if` or a
T.if_then_else the bounds can follow are accepted, as are those they cannot bound."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect


# --- T.Parallel nests larger than their fragment --------------------------------------------

def test_parallel_longer_than_the_fragment_it_writes():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                for i in T.Parallel(64):
                    f[i] = A[i]  # <- here
                T.copy(f, B[0:32])
    expect(program, "fragment f is written out of bounds: index 0 takes values in [0, 63] "
           "(where i in [0, 63]), but dimension 0 has extent 32", "f[i] =")


def test_parallel_longer_than_the_fragment_it_reads():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                f = T.alloc_fragment((64,), "float32")
                T.copy(A, f)
                for i in T.Parallel(96):
                    B[i % 64] = f[i] * 2.0  # <- here
    expect(program, "fragment f is read out of bounds: index 0 takes values in [0, 95]",
           "f[i]")


def test_parallel_wider_than_the_fragment_in_its_last_dimension():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((16, 8), "float32")
                for i, j in T.Parallel(16, 16):
                    f[i, j] = A[i, j]  # <- here
                T.copy(f, B)
    expect(program, "fragment f is written out of bounds: index 1 takes values in [0, 15] "
           "(where j in [0, 15]), but dimension 1 has extent 8", "f[i, j] =")


def test_parallel_taller_than_the_fragment_in_its_first_dimension():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32, 8), "float32"), B: T.Tensor((16, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((16, 8), "float32")
                T.clear(f)
                for i, j in T.Parallel(32, 8):
                    f[i, j] += A[i, j]  # <- here
                T.copy(f, B)
    expect(program, "index 0 takes values in [0, 31]", "f[i, j] +=")


def test_single_element_fragment_indexed_with_the_loop_variable():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((1,), "float32")
                T.fill(f, 2.0)
                for i in T.Parallel(32):
                    B[i] = A[i] * f[i]  # <- here
    expect(program, "fragment f is read out of bounds: index 0 takes values in [0, 31] "
           "(where i in [0, 31]), but dimension 0 has extent 1", "f[i]")


def test_fragment_index_one_past_the_end():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                T.copy(A, f)
                for i in T.Parallel(32):
                    B[i] = f[i + 1] - f[i]  # <- here
    expect(program, "index 0 takes values in [1, 32]", "f[i + 1]")


def test_fragment_index_before_the_start():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                T.copy(A, f)
                for i in T.Parallel(32):
                    B[i] = f[i - 1]  # <- here
    expect(program, "index 0 takes values in [-1, 30]", "f[i - 1]")


# --- loop and block variables that outgrow a tile ---------------------------------------------

def test_serial_and_parallel_variables_together():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((16,), "float32")
                T.clear(f)
                for k in T.serial(4):
                    for i in T.Parallel(8):
                        f[k * 8 + i] += A[k * 8 + i]  # <- here
                T.copy(f, B)
    expect(program, "index 0 takes values in [0, 31] (where i in [0, 7], k in [0, 3]), but "
           "dimension 0 has extent 16", "f[k * 8 + i] +=")


def test_serial_variable_past_a_shared_tile():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((32,), "float32")
                T.copy(A[0:32], s)
                total = T.alloc_var("float32", init=0.0)
                for k in T.serial(64):
                    total += s[k]  # <- here
                B[0] = total
    expect(program, "shared tile s is read out of bounds: index 0 takes values in [0, 63]",
           "s[k]")


def test_block_index_past_a_shared_tile():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(64, threads=32) as bx:
                s = T.alloc_shared((32,), "float32")
                s[bx] = A[bx]  # <- here
    expect(program, "shared tile s is written out of bounds: index 0 takes values in [0, 63] "
           "(where bx in [0, 63])", "s[bx] =")


def test_local_buffer_indexed_by_a_wider_modulus():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                regs = T.alloc_local((4,), "float32")
                for u in T.unroll(8):
                    regs[u % 8] = A[u]  # <- here
    expect(program, "local buffer regs is written out of bounds: index 0 takes values in "
           "[0, 7]", "regs[u % 8] =")


def test_unrolled_loop_with_a_step_past_the_end():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                regs = T.alloc_local((8,), "float32")
                for u in T.unroll(0, 16, 2):
                    regs[u] = A[u]  # <- here
    expect(program, "index 0 takes values in [0, 14]", "regs[u] =")


def test_atomic_into_a_shared_tile_past_its_end():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                s = T.alloc_shared((32,), "float32")
                T.fill(s, 0.0)
                for i in T.Parallel(64):
                    T.atomic_add(s[i], A[i])  # <- here
    expect(program, "shared tile s is used out of bounds: index 0 takes values in [0, 63]",
           "T.atomic_add(")


# --- tile-op regions -------------------------------------------------------------------------

def test_copy_of_a_region_that_outgrows_the_tile_in_a_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((16, 32), "float16")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((32, 32), "float16")
                T.copy(A[0:32, :], s)
                for k in T.serial(4):
                    T.copy(s[k * 16:(k + 1) * 16, :], B)  # <- here
    expect(program, "shared tile s is used out of bounds: index 0 takes values in [0, 63] "
           "(where k in [0, 3]), but dimension 0 has extent 32", "T.copy(")


def test_fill_of_a_region_that_outgrows_the_fragment():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                for k in T.serial(3):
                    T.fill(f[k * 16:k * 16 + 16], 1.0)  # <- here
                T.copy(f, A)
    expect(program, "fragment f is used out of bounds: index 0 takes values in [0, 47]",
           "T.fill(")


# --- guarded and unbounded indices are accepted -----------------------------------------------

def guarded():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), n: T.int32, B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((32,), "float32")
            s = T.alloc_shared((32,), "float32")
            T.clear(f)
            for i in T.Parallel(64):
                if i < 32:                       # narrowed: i in [0, 31]
                    f[i] = A[i]
            T.copy(f, s)
            for i in T.Parallel(64):
                B[i] = T.if_then_else(i >= 32, s[i - 32] * 2.0, 0.0)
            for i in T.Parallel(64):
                if i < n:                        # a bound the compiler cannot know
                    B[i] = B[i] + s[i]
    return main


def test_guarded_indices_run():
    a = np.arange(64, dtype=np.float32)
    b = tilecraft.compile(guarded(), out_idx=[-1], target="interp")(a, 16)
    np.testing.assert_array_equal(b[32:], a[:32] * 2)
    np.testing.assert_array_equal(b[:16], a[:16])
    np.testing.assert_array_equal(b[16:32], np.zeros(16))


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_guarded_indices_compile(arch):
    assert tilecraft.compile(guarded(), out_idx=[-1], target=arch).n_regs > 0
