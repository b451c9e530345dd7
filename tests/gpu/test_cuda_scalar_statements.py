"""On the GPU: single fragment elements outside T.Parallel, stores and atomics that run once, and
a loop reading a fragment laid out for other threads through shared memory (the programs of
the unit tests test_fragment_elements.py and test_relayout.py)."""
import pathlib
import sys
import warnings

import numpy as np
import pytest

from gpu_requirements import require_cuda

torch = require_cuda()

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
import test_fragment_elements as fe  # noqa: E402
import test_relayout as rl  # noqa: E402


def on_gpu(func, *arrays, configs=None):
    """Run func on the GPU with torch copies of numpy arrays; returns them as numpy."""
    kernel = tilecraft.compile(func, target="cuda", pass_configs=configs)
    tensors = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    kernel(*tensors)
    torch.cuda.synchronize()
    return [t.cpu().numpy() for t in tensors]


@pytest.mark.parametrize("threads", [32, 128])
def test_one_element_written_by_its_holder_and_read_from_it(threads):
    X = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    _, Y, P = on_gpu(fe.one_element_program(threads), X, np.full_like(X, np.nan),
                     np.full(2, np.nan, np.float32))
    want = X.copy()
    want[6, 29] = 2.0
    np.testing.assert_array_equal(Y, want)
    np.testing.assert_allclose(P, [X[1, 3], 2.0 + X[7, 31]], rtol=1e-6)


def test_elements_of_a_replicated_fragment_and_at_run_time_indices():
    X = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    _, Y, P = on_gpu(fe.replicated_program(), X, np.full_like(X, np.nan),
                     np.full(4, np.nan, np.float32))
    m = X.max(axis=1)
    m[5] = -100.0
    np.testing.assert_allclose(Y, X - m[:, None], rtol=1e-6)
    np.testing.assert_allclose(P[:2], [m[7], -100.0], rtol=1e-6)
    X = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)
    _, Y, P = on_gpu(fe.dynamic_index_program(), X, np.full_like(X, np.nan),
                     np.full(16, np.nan, np.float32))
    np.testing.assert_allclose(P, X[np.arange(16), 15 - np.arange(16)], rtol=1e-6)
    f = X.copy()
    for k in range(8):
        f[k, 2 * k] *= 3
    np.testing.assert_allclose(Y, f + (f[2, 4] if f[0, 0] > 0 else f[3, 6]), rtol=1e-6)


def test_stores_and_atomics_outside_parallel_run_once():
    X = np.array([1.5, 2.0, -3.0, 0.25], np.float32)
    _, P = on_gpu(fe.once_program(), X, np.zeros(3, np.float32))
    assert P[0] == 4.0 and P[1] == 1.5 + 2.0 - 3.0 + 0.25 + 1.5 and P[2] in (1.0, 2.0)


@pytest.mark.parametrize("policy", ["Square", "FullCol", "FullRow"])
@pytest.mark.parametrize("configs", [None, {"tl.disable_wgmma": True,
                                            "tl.disable_tma_lower": True}],
                         ids=["default", "mma_sync"])
def test_attention_chain_with_any_warp_policy(policy, configs):
    (Q, K, V), want = rl.inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        *_, O = on_gpu(rl.attention_chain(getattr(T.GemmWarpPolicy, policy)), Q, K, V,
                       np.full(want.shape, np.nan, np.float32), configs=configs)
    np.testing.assert_allclose(O, want, rtol=2e-3, atol=2e-3)
