"""A shared tile of bool (one byte an element, as C++ stores bool): written by per-thread code,
read back through a T.Parallel mask, on the interpreter and the emulators (which stored a bool
as zero bytes)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T


def masked_copy(n=96):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), Lim: T.Tensor((1,), "float32"),
             B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128):
            keep = T.alloc_shared((n,), "bool")
            tx = T.get_thread_binding()
            if tx < n:
                keep[tx] = A[tx] < Lim[0]
            for i in T.Parallel(n):
                B[i] = T.if_then_else(keep[i], A[i], -1.0)
    return main


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_a_bool_tile(target):
    a = np.random.default_rng(2).standard_normal(96).astype(np.float32)
    b = np.full(96, np.nan, np.float32)
    kernel = tilecraft.compile(masked_copy(), target=target)
    kernel(a, np.array([0.25], np.float32), b)
    np.testing.assert_array_equal(b, np.where(a < 0.25, a, -1.0).astype(np.float32))
    assert getattr(kernel, "reports", []) == []
