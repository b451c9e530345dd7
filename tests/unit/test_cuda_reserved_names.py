"""Tensors, buffers and variables named like C++ keywords, CUDA builtins, header macros or the
names the emitter itself declares compile: the generated CUDA renames them (a trailing
underscore) and leaves every other name as written. The nvcc builds are skipped where nvcc is
not installed."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda.codegen.reserved_names import c_identifier, is_reserved
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.runtime import has_nvcc

needs_nvcc = pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")


def keyword_params():
    @T.prim_func
    def main(new: T.Tensor((64,), "float32"), default: T.Tensor((64,), "float32"),
             int: T.Tensor((64,), "float32"), this: T.int32):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                int[i] = new[i] + default[i] * this
    return main


def builtin_locals():
    @T.prim_func
    def main(threadIdx: T.Tensor((32, 32), "float16"), tc: T.Tensor((32, 32), "float16")):
        with T.Kernel(1, threads=128) as blockIdx:
            tc_smem = T.alloc_shared((32, 32), "float16")
            half_t = T.alloc_fragment((32, 32), "float32")
            T.copy(threadIdx, tc_smem)
            T.copy(tc_smem, half_t)
            for NAN, expf in T.Parallel(32, 32):
                half_t[NAN, expf] = T.exp(half_t[NAN, expf]) + blockIdx
            T.copy(half_t, tc)
    return main


def plain_names():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), scale_out: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                scale_out[i] = A[i] * 2.0
    return main


def cuda_text(func) -> str:
    return emit_cuda(pipelines.cuda_sm80(func))[0]


def test_reserved_words_get_a_trailing_underscore():
    for name in ("new", "default", "int", "this", "threadIdx", "blockIdx", "tc_smem", "tc",
                 "half_t", "NAN", "expf", "TC_DEVICE", "class", "gridDim"):
        assert is_reserved(name) and c_identifier(name) == name + "_", name
    assert c_identifier("__syncthreads") == "v__syncthreads"
    assert c_identifier("_Tile") == "v_Tile"
    assert c_identifier("2d") == "v2d"
    for name in ("A", "A_s", "acc", "scale_out", "tc_tile", "bx", "new_", "integer", "tx"):
        assert not is_reserved(name) and c_identifier(name) == name, name


def test_keyword_parameters_are_renamed_in_the_signature_and_body():
    text = cuda_text(keyword_params())
    for name in ("new", "default", "int"):
        assert f"float* __restrict__ {name}_" in text
    assert "int this_)" in text and "* ((float)this_);" in text
    assert "float* __restrict__ new," not in text and "int this)" not in text


def test_builtin_and_prelude_names_are_renamed():
    text = cuda_text(builtin_locals())
    assert "half_t* __restrict__ threadIdx_, half_t* __restrict__ tc_)" in text
    assert "const int blockIdx_ = blockIdx.x;" in text
    assert "tc_smem_ = reinterpret_cast<half_t*>(tc_smem + " in text
    assert "float half_t_[" in text


def test_names_that_collide_with_nothing_are_kept():
    text = cuda_text(plain_names())
    assert "float* __restrict__ A, float* __restrict__ scale_out" in text


def test_reserved_names_run_on_the_interpreter():
    a, b = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    c = np.zeros(64, np.float32)
    tilecraft.compile(keyword_params(), target="interp")(a, b, c, 3)
    np.testing.assert_array_equal(c, a + 3)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("program", [keyword_params, builtin_locals])
def test_reserved_names_compile(arch, program):
    kernel = tilecraft.compile(program(), target=arch)
    assert kernel.n_regs > 0
