"""A T.Parallel nest that writes a T.alloc_local array runs whole in every thread: the array is
one copy per thread, and every thread that later reads it needs all of it (as T.copy and T.fill
into a local array already did). Its stores to global memory are made once. Checked on both
emulators (the race checker included) against the interpreter, at ragged extents."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

TARGETS = ["interp", "emulator:sm_80", "emulator:sm_90a"]


def table_lookup(n_rows=5, n_cols=3, threads=64, out=100):
    """loc = 2 * A[:n_rows, :n_cols] (also written to Copy), then every thread reads loc at
    positions of other threads' iterations."""

    @T.prim_func
    def main(A: T.Tensor((n_rows, n_cols), "float32"), Copy: T.Tensor((n_rows, n_cols), "float32"),
             B: T.Tensor((out,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            loc = T.alloc_local((n_rows, n_cols), "float32")
            for i, j in T.Parallel(n_rows, n_cols):
                loc[i, j] = A[i, j] * 2.0
                Copy[i, j] = loc[i, j]
            for t in T.Parallel(out):
                B[t] = loc[t % n_rows, t % n_cols] + loc[(t + 1) % n_rows, 0]

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n_rows, n_cols, threads", [(5, 3, 64), (4, 1, 128), (7, 9, 32)])
def test_every_thread_holds_the_whole_local_array(target, n_rows, n_cols, threads):
    a = np.random.default_rng(n_rows * n_cols).standard_normal((n_rows, n_cols)).astype(np.float32)
    loc = a * 2
    t = np.arange(100)
    want = loc[t % n_rows, t % n_cols] + loc[(t + 1) % n_rows, 0]
    copy = np.full((n_rows, n_cols), np.nan, np.float32)
    got = tilecraft.compile(table_lookup(n_rows, n_cols, threads), out_idx=[-1],
                            target=target)(a, copy)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(copy, loc, rtol=1e-6)
