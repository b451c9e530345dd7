"""`name = value` in a kernel's own statements, where value reads global memory, binds the
value read there (TileLang's let): a later store to that memory does not change it, and the
value is read once into a register that later indices use (a gather's row offsets stay small
expressions). A value that reads nothing stays its expression."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda


@T.prim_func
def read_then_overwrite(A: T.Tensor((4,), "int32"), B: T.Tensor((64,), "float32"),
                        C: T.Tensor((4,), "float32")):
    with T.Kernel(1, threads=32):
        start = A[0]            # read here, once
        stride = A[1] * 2 + 1
        A[0] = 0                # what start read is not read again
        C[0] = B[start]
        C[1] = B[start + stride]
        C[2] = start * 1.0
        C[3] = stride * 1.0


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_a_name_keeps_the_value_read_where_it_was_bound(target):
    a = np.array([7, 3, 0, 0], np.int32)
    b = np.random.default_rng(0).uniform(-1, 1, 64).astype(np.float32)
    c = np.zeros(4, np.float32)
    tilecraft.compile(read_then_overwrite, target=target)(a, b, c)
    np.testing.assert_allclose(c, [b[7], b[14], 7, 7])
    assert a[0] == 0


def test_the_value_is_one_register_the_indices_use():
    text = emit_cuda(pipelines.cuda_sm80(read_then_overwrite))[0]
    assert "int start[1];" in text and "int stride[1];" in text
    assert text.count("A[0]") == 1 + 1   # the read into start, the store of 0
