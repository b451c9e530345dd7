"""The GEMM-family examples (gemm, dequant_gemm, conv2d, mla_decode, chunk_gated_delta_net) run
and match their numpy references, including sizes that are not multiples of the tile sizes."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMALL = dict(block_M=32, block_N=32, block_K=32)


@pytest.mark.parametrize("M, N, K", [(64, 64, 64), (100, 70, 50), (1, 33, 17), (65, 31, 96)])
def test_gemm(example, M, N, K):
    mod = example("gemm")
    err = mod.run(M, N, K, **SMALL)
    assert err < 1e-2


def test_gemm_swizzle_and_stages(example):
    mod = example("gemm")
    mod.run(96, 80, 40, block_M=32, block_N=16, block_K=16, num_stages=1, swizzle_panel=2)


@pytest.mark.parametrize("M, N, K, group_size", [(64, 64, 128, 32), (37, 70, 90, 16),
                                                 (5, 40, 64, 64)])
def test_dequant_gemm(example, M, N, K, group_size):
    mod = example("dequant_gemm")
    mod.run(M, N, K, group_size=group_size, **SMALL)


@pytest.mark.parametrize("M, N, K, group_size", [(64, 64, 128, 32), (37, 70, 90, 16),
                                                 (5, 40, 64, 64)])
def test_dequant_gemm_weight_in_registers(example, M, N, K, group_size):
    mod = example("dequant_gemm")
    mod.run(M, N, K, group_size=group_size, weight_in_registers=True, **SMALL)


@pytest.mark.parametrize("M, N, K, group_size", [(1, 64, 128, 32), (1, 70, 90, 16),
                                                 (3, 33, 64, 128)])
def test_dequant_gemv(example, M, N, K, group_size):
    mod = example("dequant_gemm")
    mod.run(M, N, K, group_size=group_size, gemv=True, block_N=32, block_K=32)


def test_int4_packing_round_trip(example):
    mod = example("dequant_gemm")
    q = np.random.default_rng(0).integers(0, 16, (3, 8))
    packed = mod.pack_int4(q)
    assert packed.shape == (3, 4) and packed.dtype == np.uint8
    assert packed[0, 0] == q[0, 0] | (q[0, 1] << 4)
    assert (mod.unpack_int4(packed) == q).all()


@pytest.mark.parametrize("shape, conv", [
    ((2, 8, 8, 8, 16, 3, 3), (1, 1, 1)),
    ((1, 5, 11, 9, 7, 3, 2), (2, 2, 2)),     # ragged everything, stride, dilation
    ((2, 3, 7, 7, 40, 1, 1), (1, 0, 1)),     # 1x1 conv
    ((1, 8, 10, 10, 16, 5, 5), (3, 0, 1)),   # no padding, large stride
])
def test_conv2d(example, shape, conv):
    mod = example("conv2d")
    stride, padding, dilation = conv
    mod.run(*shape, stride=stride, padding=padding, dilation=dilation, **SMALL)


@pytest.mark.parametrize("batch, heads, kv_heads, seqlen_kv, block_H", [
    (2, 16, 1, 64, 16),   # seqlen a multiple of block_N
    (1, 8, 2, 37, 2),     # ragged tail, several KV heads, two blocks per KV head
    (3, 4, 4, 100, 8),    # one query head per KV head
    (1, 16, 1, 1, 8),     # a single cached token
])
def test_mla_decode(example, batch, heads, kv_heads, seqlen_kv, block_H):
    mod = example("mla_decode")
    mod.run(batch, heads, kv_heads, seqlen_kv, dim=32, pe_dim=16, block_N=32, block_H=block_H)


@pytest.mark.parametrize("B, seq_len, H, DK, DV, chunk_size, block_DV, initial_state", [
    (1, 64, 2, 32, 32, 32, 32, False),
    (1, 100, 2, 32, 48, 32, 32, True),    # ragged sequence and value tiles
    (2, 37, 1, 16, 16, 16, 16, True),
    (1, 5, 3, 16, 24, 32, 32, False),     # shorter than one chunk
    (1, 150, 1, 32, 32, 64, 32, True),    # two merge levels of the inverse (16 -> 32 -> 64)
])
def test_chunk_gated_delta_net(example, B, seq_len, H, DK, DV, chunk_size, block_DV,
                               initial_state):
    mod = example("chunk_gated_delta_net")
    mod.run(B, seq_len, H, DK, DV, chunk_size=chunk_size, block_DV=block_DV,
            initial_state=initial_state)


def test_gemm_script():
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "gemm.py")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
