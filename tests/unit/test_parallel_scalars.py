"""T.alloc_var inside a T.Parallel body: each iteration has a variable of its own (TileLang's
meaning), which the frontend makes an element per iteration of a fragment over the loop: in
registers of the thread that runs the iteration on the GPU. Checked against numpy on the
interpreter and both emulators, and in the CUDA source (no shared memory, no per-thread copy
of the whole loop)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda


@T.prim_func
def relu_grad(A: T.Tensor((64, 32), "float32"), G: T.Tensor((64, 32), "float32"),
              B: T.Tensor((64, 32), "float32")):
    with T.Kernel(1, threads=128):
        a = T.alloc_fragment((64, 32), "float32")
        T.copy(A, a)
        for i, j in T.Parallel(64, 32):
            d = T.alloc_var("float32")
            if a[i, j] > 0:
                d = 1.0
            else:
                d = 0.0
            scale = T.alloc_var("float32", init=2.0)
            scale += d
            B[i, j] = G[i, j] * d * scale


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_each_iteration_has_its_own_variable(target):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 32)).astype(np.float32)
    g = rng.uniform(-1, 1, (64, 32)).astype(np.float32)
    got = tilecraft.compile(relu_grad, out_idx=[2], target=target)(a, g)
    np.testing.assert_allclose(got, np.where(a > 0, g * 3, 0), rtol=1e-6)


def test_the_variables_are_registers_of_the_iterations_thread():
    text = emit_cuda(pipelines.cuda(relu_grad, "sm_90a"))[0]
    assert "float d[16];" in text and "float scale[16];" in text   # 2048 iterations / 128
    assert "tc_smem +" not in text


@T.prim_func
def masked_rows(A: T.Tensor((32, 16), "float32"), n: T.int32, B: T.Tensor((16,), "float32")):
    """TileLang's dsa pooling form: nested T.parallel loops zero the rows past n, then a
    reduction over the rows."""
    with T.Kernel(1, threads=64):
        a = T.alloc_fragment((32, 16), "float32")
        s = T.alloc_fragment((16,), "float32")
        T.copy(A, a)
        for i in T.parallel(32):
            for j in T.parallel(16):
                if i >= n:
                    a[i, j] = T.cast(0, "float32")
        T.reduce_sum(a, s, dim=0)
        T.copy(s, B)


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_nested_tvmscript_parallel_loops_are_one_element_wise_nest(target):
    a = np.random.default_rng(2).uniform(-1, 1, (32, 16)).astype(np.float32)
    got = tilecraft.compile(masked_rows, out_idx=[2], target=target)(a, 21)
    np.testing.assert_allclose(got, a[:21].sum(0), rtol=1e-5, atol=1e-5)
