"""T.reduce_* of a shared tile, or into one, as TileLang allows: the CUDA pipeline copies the
tile into a fragment and back (schedule/reduce_through_fragments.py). The emulators (sm_80 and
sm_90a lowering, race checker on) agree with numpy and the interpreter on random inputs with
poisoned outputs, ragged sizes and a sub-tile of the shared buffer."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline


def shared_reductions(M, N, half):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32"),
             C: T.Tensor((N,), "float32"), H: T.Tensor((half,), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            c_s = T.alloc_shared((N,), "float32")
            h = T.alloc_fragment((half,), "float32")
            T.copy(A, A_s)
            T.reduce_sum(A_s, r, dim=1)                     # shared -> fragment
            T.fill(c_s, -1.0)
            T.reduce_max(A_s, c_s, dim=0, clear=False)      # shared -> shared, accumulated
            T.reduce_sum(A_s[0:half, :], h, dim=1)          # a sub-tile of the shared buffer
            T.copy(r, R)
            T.copy(c_s, C)
            T.copy(h, H)
    return main


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("M, N", [(64, 48), (37, 29)])
def test_reductions_of_and_into_shared_tiles_agree_with_numpy(target, M, N):
    half = (M + 1) // 2
    A = np.random.default_rng(M * N).standard_normal((M, N)).astype(np.float32)
    R, C, H = (np.full(n, np.nan, np.float32) for n in (M, N, half))
    kernel = tilecraft.compile(shared_reductions(M, N, half), target=target)
    kernel(A, R, C, H)
    if target != "interp":
        assert kernel.reports == []
    np.testing.assert_allclose(R, A.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(C, np.maximum(A.max(0), -1.0))
    np.testing.assert_allclose(H, A[:half].astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_the_reductions_run_on_fragments_after_the_pass():
    from tilecraft.ir.tileop import Reduce
    from tilecraft.ir.visitor import walk
    after = pipeline.lower(shared_reductions(64, 48, 32), "sm_90a",
                           stop_after="reduce_through_fragments")
    reduces = [n for n in walk(after.body) if isinstance(n, Reduce)]
    assert len(reduces) == 3
    assert all(r.src.buffer.scope == "local.fragment" and r.dst.buffer.scope ==
               "local.fragment" for r in reduces)
