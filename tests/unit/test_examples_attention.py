"""The attention examples run on the interpreter and agree with their numpy references, including
sequence lengths that are not multiples of the tile sizes."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("seq_len, block_M, block_N", [
    (64, 32, 32),   # whole tiles
    (100, 64, 64),  # one ragged query tile and key tile
    (77, 32, 16),   # block_M != block_N, ragged
    (50, 16, 32),
])
def test_flash_attention(example, is_causal, seq_len, block_M, block_N):
    mod = example("flash_attention")
    err = mod.run(batch=1, heads=2, seq_len=seq_len, dim=16, is_causal=is_causal,
                  block_M=block_M, block_N=block_N)
    assert err < 1e-2


def test_flash_attention_batched(example):
    mod = example("flash_attention")
    assert mod.run(batch=2, heads=3, seq_len=40, dim=32, is_causal=True, block_M=16,
                   block_N=16, seed=3) < 1e-2


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("seq_len, block_M, block_N", [
    (64, 32, 32),   # whole tiles
    (100, 64, 32),  # ragged, key tiles smaller than query tiles
    (77, 16, 32),   # ragged, a causal key tile starts inside a query tile
])
def test_flash_attention_bwd(example, is_causal, seq_len, block_M, block_N):
    """The backward's gradients against float64 ones (run() asserts each is within 1e-2)."""
    mod = example("flash_attention_bwd")
    assert mod.run(batch=2, heads=2, seq_len=seq_len, dim=16, is_causal=is_causal,
                   block_M=block_M, block_N=block_N) < 1e-2


def test_flash_attention_lse_is_the_log2_sum_of_exp2_scores(example):
    mod = example("flash_attention")
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((1, 50, 2, 16)).astype(np.float16) for _ in range(3))
    out, lse = mod.flash_attention_lse(1, 2, 50, 16, True, block_M=32, block_N=16)(Q, K, V)
    scores = np.einsum("bqhd,bkhd->bhqk", Q.astype(np.float64), K.astype(np.float64)) / 4.0
    scores = np.where(np.tril(np.ones((50, 50), bool)), scores, -np.inf) * np.log2(np.e)
    np.testing.assert_allclose(lse, np.log2(np.exp2(scores).sum(-1)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.astype(np.float64), mod.ref_program(Q, K, V, True),
                               atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("seq_len, block_M, block_N, density", [
    (96, 32, 32, 0.5),
    (77, 32, 16, 0.3),
    (77, 16, 32, 0.2),  # sparse enough that some query tiles keep no key tile at all
    (50, 16, 16, 1.0),  # a full mask is plain attention
])
def test_blocksparse_attention(example, is_causal, seq_len, block_M, block_N, density):
    mod = example("blocksparse_attention")
    err = mod.run(batch=1, heads=2, seq_len=seq_len, dim=16, is_causal=is_causal,
                  density=density, block_M=block_M, block_N=block_N)
    assert err < 1e-2


def test_blocksparse_full_mask_matches_flash_attention(example):
    bsa, fa = example("blocksparse_attention"), example("flash_attention")
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal((1, 70, 2, 16)).astype(np.float16) for _ in range(3))
    mask = np.ones((1, 2, 3, 5), dtype=bool)
    got = bsa.blocksparse_attention(1, 2, 70, 16, True, block_M=32, block_N=16)(Q, K, V, mask)
    want = fa.flash_attention(1, 2, 70, 16, True, block_M=32, block_N=16)(Q, K, V)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-3)


@pytest.mark.parametrize("seq_len, block_M, block_N, num_vertical, num_slash", [
    (100, 32, 32, 8, 3),
    (77, 16, 32, 12, 2),
    (77, 32, 16, 20, 5),
    (64, 32, 32, 1, 1),   # few indices: some rows attend to nothing
    (50, 16, 16, 50, 2),  # every column vertical
])
def test_vertical_slash_sparse_attention(example, seq_len, block_M, block_N, num_vertical,
                                         num_slash):
    mod = example("vertical_slash_sparse_attention")
    for seed in (0, 1):
        err = mod.run(batch=1, heads=2, seq_len=seq_len, dim=16, num_vertical=num_vertical,
                      num_slash=num_slash, block_M=block_M, block_N=block_N, seed=seed)
        assert err < 1e-2


def test_vertical_slash_mask_is_causal_and_covers_selection(example):
    mod = example("vertical_slash_sparse_attention")
    vertical = np.array([[[3, 40]]], dtype=np.int32)
    slash = np.array([[[0, 10]]], dtype=np.int32)
    mask = mod.sparsity_mask(vertical, slash, 64, 16, 16)[0, 0]
    q, k = np.nonzero(mask)
    assert (k <= q).all()
    assert all(mask[i, i] for i in range(64))          # slash 0: the diagonal
    assert all(mask[i, i - 10] for i in range(10, 64))  # slash 10
    assert mask[63, 3] and mask[63, 40] and not mask[39, 40]


@pytest.mark.parametrize("window_size", [None, 1, 20, 64])
@pytest.mark.parametrize("seq_len, block_M, block_N", [(64, 32, 32), (100, 64, 64), (77, 16, 32),
                                                       (77, 32, 16)])
def test_attention_sink(example, window_size, seq_len, block_M, block_N):
    mod = example("attention_sink")
    err = mod.run(batch=1, heads=2, seq_len=seq_len, dim=16, window_size=window_size,
                  block_M=block_M, block_N=block_N)
    assert err < 1e-2


@pytest.mark.parametrize("heads, kv_heads, window_size", [(8, 1, None), (6, 2, 20), (4, 4, None)])
def test_attention_sink_grouped_query(example, heads, kv_heads, window_size):
    mod = example("attention_sink")
    err = mod.run(batch=2, heads=heads, seq_len=70, dim=16, window_size=window_size,
                  kv_heads=kv_heads, block_M=32, block_N=32)
    assert err < 1e-2


def test_flash_attention_script():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "examples/flash_attention.py"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
