"""Malformed launches: grids over CUDA's limits (x up to 2^31 - 1 blocks, y and z up to
65535), refused where the T.Kernel is written when its extents are constants and at the call
that binds them otherwise (with a note at the T.Kernel), on every target; grids known when
written that go over 65535 along y or z run folded along x instead (grid_limits.py), unless
their blocks are more than x takes; and scalar arguments out of their parameter's range, which
numpy turned into a raw OverflowError (or silently into inf)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

from error_expect import expect


# --- grids known when written ------------------------------------------------------------------

def folding(grid):
    @T.prim_func
    def main(A: T.Tensor((32,), "float32")):
        with T.Kernel(*grid, threads=32) as blocks:
            A[0] = 1.0
    return main


@pytest.mark.parametrize("grid", [(1, 70000), (8, 8, 65536), (3, 65536, 2)])
def test_a_grid_over_65535_along_y_or_z_runs_folded_along_x(grid):
    from tilecraft.backends.cuda.runtime.program import _launch_grid
    kernel = folding(grid).kernels()[0]
    assert _launch_grid(kernel) == (int(np.prod(grid)),)
    source = tilecraft.compile(folding(grid), target="sm_80").get_kernel_source()
    x = grid[0]
    assert f"blockIdx.x % {x}u" in source and f"blockIdx.x / {x}u % {grid[1]}u" in source
    assert "blockIdx.y" not in source and "blockIdx.z" not in source


def test_a_persistent_kernel_keeps_its_own_grid_over_a_folded_one():
    """A kernel made persistent walks its tiles by a linear index of its own: its launch is
    one block per SM (PersistentGrid), not the folded grid."""
    from tilecraft.backends.cuda.runtime.program import PersistentGrid, _launch_grid
    from tilecraft.ir.annotations import PERSISTENT_BLOCKS
    import dataclasses
    kernel = folding((2, 70000)).kernels()[0]
    persistent = dataclasses.replace(kernel, attrs={**kernel.attrs, PERSISTENT_BLOCKS: 0})
    assert isinstance(_launch_grid(persistent), PersistentGrid)


def test_a_grid_within_the_limits_is_not_folded():
    from tilecraft.backends.cuda.runtime.program import _launch_grid
    assert _launch_grid(folding((4, 65535)).kernels()[0]) == (4, 65535)
    source = tilecraft.compile(folding((4, 65535)), target="sm_80").get_kernel_source()
    assert "blockIdx.y" in source


def test_a_folded_grid_over_what_x_takes():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(2 ** 16, 70000, threads=32) as (bx, by):  # <- here
                A[0] = 1.0
    expect(program, "T.Kernel: the grid has 4587520000 blocks; a launch takes at most "
           "2^31 - 1", "T.Kernel(")


def test_grid_x_over_the_limit():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(2 ** 31, threads=32) as bx:  # <- here
                A[0] = 1.0
    expect(program, "grid dimension x is 2147483648 blocks, over CUDA's limit of 2147483647",
           "T.Kernel(")


def test_the_largest_grids_are_accepted():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32")):
        with T.Kernel(2 ** 31 - 1, 65535, 65535, threads=32) as (bx, by, bz):
            A[0] = 1.0
    assert [g.value for g in main.kernels()[0].grid] == [2 ** 31 - 1, 65535, 65535]


# --- grids bound at the call ------------------------------------------------------------------

@tilecraft.jit
def rows_on_y():
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n, 4), "float32")):
        with T.Kernel(4, T.ceildiv(n, 2), threads=32) as (bx, by):
            if by * 2 < n:
                A[by * 2, bx] = 1.0
    return main


@tilecraft.jit
def split_launches():
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), parts: T.int32):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 0.0
        with T.Kernel(1, 1, parts, threads=32) as (bx, by, bz):
            B[0] = A[0]
    return main


def test_symbolic_grid_over_the_limit_at_the_call():
    kernel = rows_on_y()

    def program():
        a = np.zeros((140000, 4), np.float32)
        kernel(a)  # <- here
    err = expect(program, "kernel main: with these arguments its grid dimension y is 70000 "
                 "blocks, over CUDA's limit of 65535 along y", "kernel(a)")
    text, span = err.notes[0]
    assert "T.Kernel" in text and "T.Kernel(4, T.ceildiv(n, 2)" in span.source_line
    assert span.filename == __file__


def test_symbolic_grid_within_the_limit_runs():
    a = np.zeros((6, 4), np.float32)
    rows_on_y()(a)
    np.testing.assert_array_equal(a[::2], np.ones((3, 4)))


def test_grid_from_a_scalar_argument_over_the_limit():
    kernel = split_launches()

    def program():
        a = np.zeros(4, np.float32)
        kernel(a, a.copy(), 100000)  # <- here
    expect(program, "kernel launch 1 of main: with these arguments its grid dimension z is "
           "100000 blocks", "kernel(")


@pytest.mark.parametrize("target", ["emulator"])
def test_symbolic_grid_checked_on_the_emulator(target):
    kernel = tilecraft.compile(rows_on_y.__wrapped__(), target=target)

    def program():
        kernel(np.zeros((131072, 4), np.float32))  # <- here
    expect(program, "grid dimension y is 65536 blocks", "kernel(")


# --- scalar arguments out of range -------------------------------------------------------------

@tilecraft.jit
def add_offset(dtype="int32", scalar="int32"):
    @T.prim_func
    def main(A: T.Tensor((32,), dtype), offset: T.dtype(scalar)):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                A[i] = A[i] + offset
    return main


def test_int32_scalar_argument_over_the_range():
    kernel = add_offset()

    def program():
        kernel(np.zeros(32, np.int32), 2 ** 40)  # <- here
    err = expect(program, "argument offset is 1099511627776, out of the range of int32 "
                 "[-2147483648, 2147483647]", "kernel(")
    assert "OverflowError" not in str(err)


def test_int32_scalar_argument_under_the_range():
    kernel = add_offset()

    def program():
        kernel(np.zeros(32, np.int32), -2 ** 31 - 1)  # <- here
    expect(program, "argument offset is -2147483649, out of the range of int32", "kernel(")


def test_negative_argument_for_an_unsigned_parameter():
    kernel = add_offset("uint32", "uint32")

    def program():
        kernel(np.zeros(32, np.uint32), -1)  # <- here
    expect(program, "argument offset is -1, out of the range of uint32 [0, 4294967295]",
           "kernel(")


def test_int8_scalar_argument_over_the_range():
    kernel = add_offset("int8", "int8")

    def program():
        kernel(np.zeros(32, np.int8), 300)  # <- here
    expect(program, "argument offset is 300, out of the range of int8 [-128, 127]", "kernel(")


def test_numpy_integer_argument_over_the_range():
    kernel = add_offset()

    def program():
        kernel(np.zeros(32, np.int32), np.int64(2 ** 33))  # <- here
    expect(program, "argument offset is 8589934592, out of the range of int32", "kernel(")


def test_float16_scalar_argument_beyond_its_largest_value():
    kernel = add_offset("float16", "float16")

    def program():
        kernel(np.zeros(32, np.float16), 1e6)  # <- here
    expect(program, "argument offset is 1000000.0, beyond the largest float16 (65504)",
           "kernel(")


def test_scalars_at_the_edges_of_their_range_run():
    a = np.zeros(32, np.int32)
    add_offset()(a, 2 ** 31 - 1)
    assert (a == 2 ** 31 - 1).all()
    h = np.zeros(32, np.float16)
    add_offset("float16", "float16")(h, float("inf"))
    assert np.isinf(h).all()
