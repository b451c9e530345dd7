"""The vertical-slash example's MInference-shaped index sets (what its benchmark times): the
counts asked for, distinct in-range columns and diagonals, the first tokens and the local band
always selected, and a kernel over them that agrees with its reference on the emulator."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import vertical_slash_sparse_attention as vs  # noqa: E402


@pytest.mark.parametrize("seq_len, num_vertical, num_slash", [(8192, 1000, 600), (300, 40, 12)])
def test_index_sets_have_the_shape_minference_selects(seq_len, num_vertical, num_slash):
    vertical, slash = vs.minference_indices(np.random.default_rng(1), 2, 3, seq_len,
                                            num_vertical, num_slash)
    assert vertical.shape == (2, 3, num_vertical) and slash.shape == (2, 3, num_slash)
    for b in range(2):
        for h in range(3):
            v, s = vertical[b, h], slash[b, h]
            assert len(np.unique(v)) == num_vertical and len(np.unique(s)) == num_slash
            assert v.min() >= 0 and v.max() < seq_len and s.min() >= 0 and s.max() < seq_len
            assert set(range(min(64, num_vertical // 4))) <= set(v.tolist())
            assert set(range(num_slash * 4 // 5)) <= set(s.tolist())


def test_kernel_over_minference_indices_matches_the_reference():
    seq_len, num_vertical, num_slash = 200, 24, 10
    vertical, slash = vs.minference_indices(np.random.default_rng(2), 1, 2, seq_len,
                                            num_vertical, num_slash)
    rng = np.random.default_rng(3)
    Q, K, V = (rng.standard_normal((1, seq_len, 2, 16)).astype(np.float16) for _ in range(3))
    func = vs.vertical_slash_attention.__wrapped__(1, 2, seq_len, 16, num_vertical, num_slash,
                                                   block_M=32, block_N=32, num_stages=2,
                                                   threads=64)
    kernel = tilecraft.compile(func, out_idx=[-1], target="emulator")
    out = kernel(Q, K, V, vertical, slash)
    assert kernel.reports == []
    ref = vs.ref_program(Q, K, V, vertical, slash, 32, 32)
    np.testing.assert_allclose(out.astype(np.float64), ref, atol=1e-2, rtol=1e-2)
