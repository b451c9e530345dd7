"""T.Persistent: a grid of a few blocks walks every tile of a domain once, whatever the
domain's shape against the wave (ragged tiles, a last partial wave, a column group that
does not divide n), as TileLang's persistent GEMM writes it; checked against numpy on the
interpreter and both emulators (their race checkers included)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

BM, BN, BK = 32, 32, 32


def persistent_gemm(M, N, K, waves_of, group_size):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(waves_of, threads=128) as block_id:
            A_s = T.alloc_shared((BM, BK), "float16")
            B_s = T.alloc_shared((BK, BN), "float16")
            C_l = T.alloc_fragment((BM, BN), "float32")
            for bx, by in T.Persistent([T.ceildiv(M, BM), T.ceildiv(N, BN)], waves_of,
                                       block_id, group_size=group_size):
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, BK), num_stages=2):
                    T.copy(A[bx * BM, k * BK], A_s)
                    T.copy(B[k * BK, by * BN], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C[bx * BM, by * BN])
    return main


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("M, N, waves_of, group_size", [(100, 130, 5, 2), (64, 96, 4, 8),
                                                         (40, 200, 3, 3)])
def test_every_tile_once(target, M, N, waves_of, group_size):
    K = 64
    rng = np.random.default_rng(M + N)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float16)
    kernel = tilecraft.compile(persistent_gemm(M, N, K, waves_of, group_size), target=target)
    kernel(a, b, c)
    assert not kernel.reports
    np.testing.assert_allclose(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               rtol=2e-2, atol=2e-2)


def test_a_one_dimensional_domain_in_order():
    @T.prim_func
    def main(X: T.Tensor((10,), "int32")):
        with T.Kernel(3, threads=32) as block_id:
            for t in T.Persistent([10], 3, block_id):
                X[t] = block_id
    x = np.full(10, -1, np.int32)
    tilecraft.compile(main, target="interp")(x)
    np.testing.assert_array_equal(x, np.arange(10) % 3)


def test_names_must_match_the_domain():
    from tilecraft.errors import TileError
    with pytest.raises(TileError, match="walks a 2-D domain but the loop binds 1 name"):
        @T.prim_func
        def main(X: T.Tensor((10,), "int32")):
            with T.Kernel(3, threads=32) as block_id:
                for t in T.Persistent([2, 5], 3, block_id):
                    X[t] = 0
