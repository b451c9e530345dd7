"""A cast of an operator expression keeps the whole expression under the cast in the CUDA
text: `(float)(a / b)` divides integers and converts the quotient, where `(float)a / b` would
divide in float (an integer index // 4 stored into a float tensor came out as i / 4.0), and
`(int)(x * 2.5f)` truncates the product, not x."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.runtime import has_nvcc


def casts():
    @T.prim_func
    def main(X: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32"),
             C: T.Tensor((32,), "int32"), D: T.Tensor((32,), "float64")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                B[i] = i // 4
                C[i] = T.cast(X[i] * 2.5, "int32") + 1
                D[i] = i % 7
    return main


def test_cast_covers_the_whole_operand():
    text = emit_cuda(pipelines.cuda_sm80(casts()))[0]
    # The index is a small non-negative integer, so it becomes a float through its bits
    # (codegen's small_int_cast), the whole quotient inside the conversion all the same.
    assert "= tc::biased_int_to_float((uint32_t)(l * 8 + tx / 4), 8388608.0f);" in text
    assert "= ((int)(X[l * 32 + tx] * 2.5f)) + 1;" in text
    assert "= ((double)((l * 32 + tx) % 7));" in text


def test_casts_compute_what_the_interpreter_does():
    x = np.linspace(-3, 3, 32, dtype=np.float32)
    want = [np.zeros(32, np.float32), np.zeros(32, np.int32), np.zeros(32, np.float64)]
    got = [w.copy() for w in want]
    tilecraft.compile(casts(), target="interp")(x, *want)
    tilecraft.compile(casts(), target="emulator")(x, *got)
    i = np.arange(32)
    np.testing.assert_array_equal(want[0], i // 4)
    np.testing.assert_array_equal(want[1], np.trunc(x * 2.5).astype(np.int32) + 1)
    np.testing.assert_array_equal(want[2], i % 7)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_casts_compile(arch):
    assert tilecraft.compile(casts(), target=arch).n_regs > 0
