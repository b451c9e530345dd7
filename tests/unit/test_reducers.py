"""TileLang's reducer buffers: T.Parallel iterations accumulate into a T.alloc_reducer together
(TileLang's gemv_alloc_reducer: `o[i] += a[i, j] * x[j]` inside a pipelined loop), the result
whole after T.finalize_reducer, on the interpreter and the emulators against numpy; forms it
cannot take are refused at their line."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError


def gemv_reducer(M=96, N=200, block_M=32, block_N=64, op="sum"):
    @T.prim_func
    def main(a: T.Tensor((M, N), "float16"), x: T.Tensor((N,), "float16"),
             o: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bm:
            r = T.alloc_reducer(block_M, "float32", op=op, replication="all")
            T.fill(r, 0 if op == "sum" else -1e30)
            for bn in T.Pipelined(T.ceildiv(N, block_N), num_stages=2):
                a_s = T.alloc_shared((block_M, block_N), "float16")
                T.copy(a[bm * block_M, bn * block_N], a_s)
                a_f = T.alloc_fragment((block_M, block_N), "float16")
                T.copy(a_s, a_f)
                x_f = T.alloc_fragment(block_N, "float16")
                T.copy(x[bn * block_N], x_f)
                for i, j in T.Parallel(block_M, block_N):
                    if op == "sum":
                        r[i] += a_f[i, j] * x_f[j]
                    else:
                        r[i] = T.max(r[i], a_f[i, j] * x_f[j])
            T.finalize_reducer(r)
            T.copy(r, o[bm * block_M])
    return main


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_reducer_gathers_the_nest_s_terms(target, op):
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (96, 200)).astype(np.float16)
    x = rng.uniform(-1, 1, 200).astype(np.float16)
    o = np.full(96, np.nan, np.float32)
    kernel = tilecraft.compile(gemv_reducer(op=op), target=target)
    kernel(a, x, o)
    assert getattr(kernel, "reports", []) == []
    terms = (a.astype(np.float16) * x.astype(np.float16)).astype(np.float64)  # fp16 products
    want = terms.sum(1) if op == "sum" else terms.max(1)
    np.testing.assert_allclose(o, want, rtol=2e-3, atol=2e-3)


def test_forms_a_reducer_cannot_take():
    def program(kind):
        @T.prim_func
        def main(a: T.Tensor((8, 8, 8), "float32"), o: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=64):
                r = T.alloc_reducer(8, "float32")
                T.clear(r)
                if kind == "two-left":
                    for i, j, k in T.Parallel(8, 8, 8):
                        r[i] += a[i, j, k]
                elif kind == "not-a-sum":
                    for i, j in T.Parallel(8, 8):
                        r[i] = r[i] * a[i, j, 0]
                else:
                    T.finalize_reducer(o)
                T.copy(r, o)
        return main
    for kind, message in (("two-left", "leave out exactly one loop variable"),
                          ("not-a-sum", "a sum reducer \\(r\\) is accumulated as r\\[i\\] \\+= v"),
                          ("finalize", "T.finalize_reducer takes a buffer of T.alloc_reducer")):
        with pytest.raises(TileError, match=message):
            program(kind)
