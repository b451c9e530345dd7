"""T.disable_warp_group_reg_alloc, T.no_set_max_nreg, T.annotate_producer_reg_dealloc and
T.annotate_consumer_reg_alloc: a warp-specialized kernel of 256 consumer threads moves
registers from its producer to its consumers (setmaxnreg) unless told not to, and with the
counts the user gives; checked in the sm_90a CUDA source and on the sm_90a emulator, with the
error for a count setmaxnreg cannot take. T.annotate_min_blocks_per_sm: the second argument of
__launch_bounds__, in a plain kernel and a warp-specialized one (which then moves no
registers)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda

from error_expect import expect

M = N = 128
K = 256


def gemm(directive=None):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            if directive is not None:
                directive()
            a = T.alloc_shared((128, 64), "float16")
            b = T.alloc_shared((64, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // 64, num_stages=2):
                T.copy(A[0, k * 64], a)
                T.copy(B[k * 64, 0], b)
                T.gemm(a, b, acc)
            T.copy(acc, C)
    return main


def source(func):
    return emit_cuda(pipelines.cuda(func, "sm_90a"))[0]


@pytest.mark.parametrize("directive, inc, dec", [
    (None, "tc::setmaxnreg_inc<", "tc::setmaxnreg_dec<40>"),
    (T.disable_warp_group_reg_alloc, None, None),
    (T.no_set_max_nreg, None, None),
    (lambda: (T.annotate_producer_reg_dealloc(24), T.annotate_consumer_reg_alloc(232)),
     "tc::setmaxnreg_inc<232>", "tc::setmaxnreg_dec<24>"),
], ids=["default", "disabled", "no_set_max_nreg", "counts"])
def test_register_moving_follows_the_directives(directive, inc, dec):
    text = source(gemm(directive))
    assert "tc::is_producer_leader" in text   # warp-specialized
    assert ("setmaxnreg" in text) == (inc is not None)
    if inc is not None:
        assert inc in text and dec in text


def test_a_kernel_without_register_moving_computes_the_same():
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    got = tilecraft.compile(gemm(T.disable_warp_group_reg_alloc), out_idx=[2],
                            target="emulator:sm_90a")(a, b)
    np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3,
                               atol=1e-2)


def test_a_count_setmaxnreg_cannot_take():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=128):
                T.annotate_consumer_reg_alloc(250)  # <- here
        return main
    expect(program, "T.annotate_consumer_reg_alloc: setmaxnreg takes a register count that is a "
           "multiple of 8 in [24, 256], got 250", "T.annotate_consumer_reg_alloc(")


def elementwise(blocks):
    @T.prim_func
    def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            T.annotate_min_blocks_per_sm(blocks)
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0
    return main


def test_min_blocks_per_sm_is_the_launch_bounds_second_argument():
    assert "__launch_bounds__(128, 6)" in source(elementwise(6))
    assert "__launch_bounds__(128, 1)" in source(elementwise(1))
    a = np.arange(1024, dtype=np.float32)
    got = tilecraft.compile(elementwise(6), out_idx=[1], target="emulator:sm_90a")(a)
    np.testing.assert_array_equal(got, a * 2)


def test_min_blocks_per_sm_in_a_warp_specialized_kernel_moves_no_registers():
    text = source(gemm(lambda: T.annotate_min_blocks_per_sm(2)))
    assert "tc::is_producer_leader" in text and "setmaxnreg" not in text
    assert "__launch_bounds__(288, 2)" in text  # a producer warp: no registers to give


@pytest.mark.parametrize("n", [0, 33, 2.0, True])
def test_a_block_count_launch_bounds_cannot_take(n):
    def program():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=128):
                T.annotate_min_blocks_per_sm(n)  # <- here
        return main
    expect(program, f"T.annotate_min_blocks_per_sm: takes a number of blocks in [1, 32], got "
           f"{n!r}", "T.annotate_min_blocks_per_sm(")


def test_kernels_that_differ_only_in_a_directive_have_different_text():
    """The program cache is keyed by the tile IR's text: a directive must change it."""
    texts = {gemm(d).script() for d in (None, T.disable_warp_group_reg_alloc,
                                        lambda: T.annotate_min_blocks_per_sm(2),
                                        lambda: T.annotate_consumer_reg_alloc(232))}
    assert len(texts) == 4
