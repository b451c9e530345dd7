"""T.alloc_global at the prim_func's top level: one workspace, made for each call, that every
T.Kernel of the program reads and writes (a split kernel hands its partial results to the
combine kernel through it)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft import TileError
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect


def split_then_combine(parts=4, allocate=T.alloc_global):
    """Y[r] = sum of X[r, :]: the first launch sums each of `parts` column slices of a row
    into the workspace, the second adds the slices up; the rows are a symbolic size.
    allocate: T.alloc_global, or T.alloc_buffer with TVM's default scope (global)."""
    n = T.symbolic("n")
    width = 8

    @T.prim_func
    def main(X: T.Tensor((n, parts * width), "float32"), Y: T.Tensor((n,), "float32")):
        partial = allocate((n, parts), "float32")
        with T.Kernel(n, parts, threads=32) as (row, part):
            tile = T.alloc_fragment((1, width), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.copy(X[row, part * width:(part + 1) * width], tile)
            T.reduce_sum(tile, total, dim=1)
            partial[row, part] = total[0]
        with T.Kernel(n, threads=32) as row:
            acc = T.alloc_var("float32", init=0.0)
            for p in T.serial(parts):
                acc += partial[row, p]
            Y[row] = acc

    return main


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("allocate", [T.alloc_global, T.alloc_buffer])
def test_a_top_level_workspace_passes_data_between_launches(target, allocate):
    kernel = tilecraft.compile(split_then_combine(allocate=allocate), out_idx=-1, target=target)
    for rows in (5, 40):   # its size follows the call's
        x = np.random.default_rng(rows).standard_normal((rows, 32)).astype(np.float32)
        np.testing.assert_allclose(kernel(x), x.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
def test_the_workspace_is_a_parameter_of_every_launch_on_sm90a():
    kernel = tilecraft.compile(split_then_combine(), out_idx=-1, target="sm_90a")
    heads = [line for line in kernel.get_kernel_source().splitlines() if "__global__" in line]
    assert len(heads) == 2
    assert all("float* __restrict__ partial" in h for h in heads), heads
    assert kernel.n_regs > 0


def test_a_workspace_outside_a_prim_func_is_refused():
    def program():
        return T.alloc_global((4,), "float32")  # <- here

    expect(program, "T.alloc_global can only be used inside a @T.prim_func", "T.alloc_global")


def test_a_workspace_needs_compile_time_or_symbolic_sizes():
    def program():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            W = T.alloc_global((4, 2.5), "float32")  # <- here
            with T.Kernel(1, threads=32):
                W[0, 0] = A[0]

    err = expect(program, "T.alloc_global: dimension 1 must be a compile-time int",
                 "T.alloc_global")
    assert isinstance(err, TileError)
