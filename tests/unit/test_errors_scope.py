"""Malformed programs that use a name outside the block that declares it: a loop variable
after its loop, a block index or a buffer of a previous T.Kernel, a buffer allocated under a
device-side `if` or in a loop after it ends, and shared tiles allocated inside a T.Pipelined
loop. Python would go on with the stale value (and nvcc would reject the generated CUDA);
each must be an error at the use. The last tests check that what stays in scope still works."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect


# --- loop variables after their loop -----------------------------------------------------

def test_parallel_variable_after_its_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = A[i]
                B[i] = 1.0  # <- here
    expect(program, "name 'i' is the loop variable of the T.Parallel loop at line", "i]")


def test_parallel_variable_after_its_loop_in_a_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = A[i]
                B[0] = A[0] + i  # <- here
    err = expect(program, "name 'i' is the loop variable of the T.Parallel loop", "i  #")
    assert "it does not exist after the loop" in err.message


def test_second_parallel_variable_after_the_nest():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i, j in T.Parallel(8, 8):
                    A[i, j] = 0.0
                A[0, j] = 1.0  # <- here
    expect(program, "name 'j' is the loop variable of the T.Parallel loop", "j]")


def test_serial_variable_after_its_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(4):
                    A[k] = 0.0
                A[k + 1] = 2.0  # <- here
    expect(program, "name 'k' is the loop variable of the T.serial loop", "k + 1")


def test_range_variable_after_its_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in range(bx, 4):
                    A[k] = 0.0
                A[k] = 2.0  # <- here
    expect(program, "name 'k' is the loop variable of the T.serial loop", "k]")


def test_stepped_serial_variable_after_its_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(0, 16, 4):
                    A[k] = 0.0
                A[k] = 2.0  # <- here
    expect(program, "name 'k' uses k, the loop variable of the T.serial loop", "k]")


def test_unroll_variable_after_its_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for u in T.unroll(4):
                    A[u] = 0.0
                A[u] = 2.0  # <- here
    expect(program, "name 'u' is the loop variable of the T.unroll loop", "u]")


def test_pipelined_variable_after_its_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((128, 32), "float16"), B: T.Tensor((32, 32), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((32, 32), "float16")
                for k in T.Pipelined(4, num_stages=2):
                    T.copy(A[k * 32:(k + 1) * 32, :], A_s)
                T.copy(A[k * 32, 0], B)  # <- here
    expect(program, "name 'k' is the loop variable of the T.Pipelined loop", "k * 32")


def test_expression_of_a_loop_variable_after_the_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(4):
                    row = k * 16 + bx
                    A[row] = 0.0
                A[row] = 1.0  # <- here
    expect(program, "name 'row' uses k, the loop variable of the T.serial loop", "row]")


def test_element_loaded_in_a_loop_after_the_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    v = A[i]
                    B[i] = v
                B[0] = v  # <- here
    expect(program, "name 'v' uses i, the loop variable of the T.Parallel loop", "v  #")


def test_loop_variable_after_its_loop_in_a_macro():
    def program():
        @T.macro
        def zero_then_mark(buf):
            for i in T.Parallel(32):
                buf[i] = 0.0
            buf[i] = 1.0  # <- here

        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                zero_then_mark(A)
    expect(program, "name 'i' is the loop variable of the T.Parallel loop", "i]")


# --- block indices and buffers of a previous T.Kernel ---------------------------------------

def test_block_index_of_a_previous_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(4, threads=32) as bx:
                B[bx] = A[bx]
            with T.Kernel(1, threads=32) as by:
                B[bx] = 1.0  # <- here
    err = expect(program, "name 'bx' is the block index of the T.Kernel at line", "bx]")
    assert "each T.Kernel is a launch of its own" in err.message


def test_second_block_index_of_a_previous_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(8, 8, threads=32) as (bx, by):
                A[bx, by] = 0.0
            with T.Kernel(1, threads=32) as bz:
                A[bz, by] = 1.0  # <- here
    expect(program, "name 'by' is the block index of the T.Kernel", "by]")


def test_offset_computed_from_a_previous_kernels_block_index():
    def program():
        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(4, threads=32) as bx:
                base = bx * 32
                A[base] = 0.0
            with T.Kernel(1, threads=32) as bx2:
                A[base + bx2] = 1.0  # <- here
    expect(program, "name 'base' uses bx, the block index of the T.Kernel", "base + bx2")


def test_fragment_of_a_previous_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                T.copy(A, f)
            with T.Kernel(1, threads=32) as by:
                T.copy(f, B)  # <- here
    err = expect(program, "name 'f' is the fragment allocated in the T.Kernel at line", "f,")
    assert "global tensors" in err.message and "internal" not in err.message


def test_shared_tile_of_a_previous_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32, 32), "float16"), B: T.Tensor((32, 32), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((32, 32), "float16")
                T.copy(A, A_s)
            with T.Kernel(1, threads=128) as by:
                T.copy(A_s, B)  # <- here
    expect(program, "name 'A_s' is the shared tile allocated in the T.Kernel", "A_s,")


def test_element_of_a_previous_kernels_fragment():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                T.copy(A, f)
            with T.Kernel(1, threads=32) as by:
                for i in T.Parallel(32):
                    B[i] = f[i] * 2.0  # <- here
    expect(program, "name 'f' is the fragment allocated in the T.Kernel", "f[i]")


# --- buffers allocated in a device-side `if` or a loop ---------------------------------------

def test_fragment_allocated_under_a_device_if():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                if bx == 0:
                    f = T.alloc_fragment((32,), "float32")
                    T.copy(A, f)
                T.copy(f, B)  # <- here
    err = expect(program, "name 'f' is the fragment allocated in the device-side `if` at line",
                 "f,")
    assert "allocate it before the `if`" in err.message


def test_fragment_allocated_in_the_else_branch():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                if bx == 0:
                    T.copy(A, B)
                else:
                    g = T.alloc_fragment((32,), "float32")
                    T.fill(g, 1.0)
                T.copy(g, B)  # <- here
    expect(program, "name 'g' is the fragment allocated in the `else` of the device-side `if`",
           "g,")


def test_shared_tile_allocated_under_a_device_if():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                if bx > 0:
                    s = T.alloc_shared((32,), "float32")
                    T.copy(A, s)
                for i in T.Parallel(32):
                    B[i] = s[i]  # <- here
    expect(program, "name 's' is the shared tile allocated in the device-side `if`", "s[i]")


def test_variable_allocated_in_a_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(4):
                    total = T.alloc_var("float32")
                    total = A[k]
                A[0] = total  # <- here
    expect(program, "name 'total' is the variable allocated in the T.serial loop", "total  #")


def test_slice_of_a_fragment_allocated_in_a_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32, 32), "float32"), B: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for k in T.serial(2):
                    f = T.alloc_fragment((32, 32), "float32")
                    T.copy(A, f)
                    top = f[0:16, :]
                T.copy(top, B)  # <- here
    expect(program, "name 'top' uses f, the fragment allocated in the T.serial loop", "top,")


# --- shared tiles allocated inside a T.Pipelined loop: one tile of the block, as in TileLang -

@T.prim_func
def _tile_allocated_in_pipelined_loop(A: T.Tensor((128, 32), "float16"),
                                      B: T.Tensor((32, 32), "float32")):
    with T.Kernel(1, threads=128) as bx:
        acc = T.alloc_fragment((32, 32), "float32")
        T.clear(acc)
        for k in T.Pipelined(4, num_stages=2):
            s = T.alloc_shared((32, 32), "float16")
            T.copy(A[k * 32:(k + 1) * 32, :], s)
            for i, j in T.Parallel(32, 32):
                acc[i, j] += s[i, j]
        T.copy(acc, B)


@T.prim_func
def _tile_allocated_in_nested_loop(A: T.Tensor((128, 32), "float16"),
                                   B: T.Tensor((32, 32), "float16")):
    with T.Kernel(1, threads=128) as bx:
        for k in T.Pipelined(4, num_stages=2):
            for h in T.serial(2):
                s = T.alloc_buffer((16, 32), "float16", scope="shared")
                T.copy(A[k * 32 + h * 16, 0], s)
                T.copy(s, B[h * 16, 0])


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_shared_tiles_allocated_inside_a_pipelined_loop(target):
    a = np.random.default_rng(3).uniform(-1, 1, (128, 32)).astype(np.float16)
    got = tilecraft.compile(_tile_allocated_in_pipelined_loop, out_idx=[1], target=target)(a)
    np.testing.assert_allclose(got, a.astype(np.float32).reshape(4, 32, 32).sum(0), rtol=1e-3,
                               atol=1e-3)
    got = tilecraft.compile(_tile_allocated_in_nested_loop, out_idx=[1], target=target)(a)
    np.testing.assert_array_equal(got, a[96:])


# --- what stays in scope -------------------------------------------------------------------

def two_launches():
    @T.prim_func
    def main(A: T.Tensor((4, 32), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            sums = T.alloc_global((4,), "float32")
            rows = T.alloc_fragment((4, 32), "float32")
            total = T.alloc_fragment((4,), "float32")
            T.copy(A, rows)
            T.reduce_sum(rows, total, dim=1)
            T.copy(total, sums)
        with T.Kernel(1, threads=32) as bx:  # a new launch may take the same names
            for i in T.Parallel(4):
                B[i] = sums[i] * 2.0
            for i in T.Parallel(4):  # and a later loop its variable's name
                B[i] = B[i] + 1.0
            i = 3
            B[i] = B[i] - 1.0
    return main


def test_workspaces_names_and_rebound_names_stay_usable():
    a = np.arange(128, dtype=np.float32).reshape(4, 32)
    b = np.zeros(4, np.float32)
    tilecraft.compile(two_launches(), target="interp")(a, b)
    want = a.sum(axis=1) * 2 + 1
    want[3] -= 1
    np.testing.assert_allclose(b, want)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_programs_that_reuse_names_compile(arch):
    assert tilecraft.compile(two_launches(), target=arch).n_regs > 0
