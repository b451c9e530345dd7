"""Every example of the paper, lowered through the full sm_80 pipeline (layouts, pipelining,
shared-memory planning, barriers, ldmatrix / mma.sync / cp.async) and run on the thread-level
emulator, computes what the tile-level interpreter computes on the same random inputs, and the
checker finds no race, unwritten read or out-of-bounds access in it.

The tile configurations are ones the GPU accepts (gemm tiles that split into 16x8 mma atoms over
the block's warps), the problem sizes small and mostly not multiples of the tiles. Each case
names its config in its id: b<tiles>-t<threads>-s<stages>."""
import numpy as np
import pytest

import tilecraft
from tilecraft.backends.cuda.emulator import EmulatorError

# The emulator target the cases compile for (test_emulator_sm90_examples runs them again on
# "emulator:sm_90a").
EMULATOR_TARGET = "emulator"
FP16 = dict(rtol=1e-2, atol=1e-2)
FP32 = dict(rtol=1e-4, atol=1e-4)


def compare(jitted, args, config, inputs):
    """Build the example's prim_func, run it on the emulator and on the interpreter, check that
    they agree and that the checker was silent; returns the interpreter's outputs."""
    func = jitted.__wrapped__(*args, **config)
    options = dict(out_idx=jitted.out_idx, pass_configs=jitted.options["pass_configs"])
    emulated = tilecraft.compile(func, target=EMULATOR_TARGET, **options)
    try:
        got = emulated(*inputs)
    except EmulatorError as e:
        pytest.fail("the emulator's checker reported:\n" + "\n".join(map(str, e.reports)))
    assert emulated.reports == []
    want = tilecraft.compile(func, target="interp", **options)(*inputs)
    got, want = as_list(got), as_list(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert not np.isnan(g.astype(np.float32)).any()
        tol = FP16 if g.dtype == np.float16 else FP32
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tol)
    return want


def as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def half(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float16)


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


# --- GEMM family -----------------------------------------------------------------------------
@pytest.mark.parametrize("M, N, K, config", [
    pytest.param(64, 64, 64, dict(block_M=64, block_N=64, block_K=32, num_stages=3, threads=128),
                 id="64x64x64-b64x64x32-t128-s3"),
    pytest.param(72, 40, 56, dict(block_M=32, block_N=32, block_K=32, num_stages=2, threads=64),
                 id="72x40x56-b32x32x32-t64-s2"),
    pytest.param(33, 70, 24, dict(block_M=64, block_N=32, block_K=16, num_stages=0, threads=128,
                                  swizzle_panel=2), id="33x70x24-b64x32x16-t128-s0-swizzle"),
])
def test_gemm(example, M, N, K, config):
    mod = example("gemm")
    rng = np.random.default_rng(1)
    compare(mod.matmul, (M, N, K), config, (half(rng, M, K), half(rng, K, N)))


@pytest.mark.parametrize("M, N, K, group_size, config", [
    pytest.param(64, 64, 128, 32, dict(block_M=64, block_N=64, block_K=32, num_stages=2,
                                       threads=128), id="64x64x128-g32-b64x64x32-t128-s2"),
    pytest.param(37, 70, 90, 16, dict(block_M=32, block_N=32, block_K=32, num_stages=3,
                                      threads=64), id="37x70x90-g16-b32x32x32-t64-s3"),
    pytest.param(37, 70, 90, 16, dict(block_M=32, block_N=64, block_K=32, num_stages=3,
                                      threads=128, weight_in_registers=True),
                 id="37x70x90-g16-b32x64x32-t128-s3-weight-in-registers"),
])
def test_dequant_gemm(example, M, N, K, group_size, config):
    mod = example("dequant_gemm")
    inputs = mod.make_inputs(M, N, K, group_size, seed=2)
    compare(mod.dequant_gemm, (M, N, K), dict(group_size=group_size, **config), inputs)


@pytest.mark.parametrize("M, N, K, group_size, config", [
    pytest.param(1, 70, 600, 32, dict(block_N=4, block_K=256, threads=64, num_stages=2),
                 id="1x70x600-g32-b4x256-t64-s2"),
    # One row a block: the fragments are (1, n), which their copies and fills move as n
    # elements laid out like the fragment.
    pytest.param(2, 9, 1000, 32, dict(block_N=1, block_K=512, threads=32, num_stages=2),
                 id="2x9x1000-g32-b1x512-t32-s2"),
    # A K tile inside one group of 64: one scale a row and tile.
    pytest.param(1, 40, 200, 64, dict(block_N=4, block_K=32, threads=32, num_stages=2),
                 id="1x40x200-g64-b4x32-t32-s2"),
    # Tiles staged in shared memory by asynchronous copies, then copied into registers with
    # vector loads; ragged N and K, three tiles in flight.
    pytest.param(1, 70, 1800, 32, dict(block_N=4, block_K=256, threads=64, num_stages=3,
                                       through_shared=True),
                 id="1x70x1800-g32-b4x256-t64-s3-shared"),
    pytest.param(2, 9, 1000, 32, dict(block_N=1, block_K=512, threads=32, num_stages=2,
                                      through_shared=True),
                 id="2x9x1000-g32-b1x512-t32-s2-shared"),
])
def test_dequant_gemv_fast(example, M, N, K, group_size, config):
    mod = example("dequant_gemm")
    inputs = mod.make_inputs(M, N, K, group_size, seed=5)
    compare(mod.dequant_gemv_fast, (M, N, K), dict(group_size=group_size, **config), inputs)


@pytest.mark.parametrize("M, N, K, group_size, config", [
    pytest.param(1, 64, 128, 32, dict(block_N=64, block_K=64, threads=128),
                 id="1x64x128-g32-b64x64-t128"),
    # block_K < threads: the activation row covers only some threads (a replicated sum over
    # a partial partition, which layout inference once mislaid).
    pytest.param(2, 40, 70, 16, dict(block_N=32, block_K=32, threads=64),
                 id="2x40x70-g16-b32x32-t64"),
])
def test_dequant_gemv(example, M, N, K, group_size, config):
    mod = example("dequant_gemm")
    inputs = mod.make_inputs(M, N, K, group_size, seed=3)
    compare(mod.dequant_gemv, (M, N, K), dict(group_size=group_size, **config), inputs)


@pytest.mark.parametrize("shape, conv, config", [
    pytest.param((2, 8, 8, 8, 16, 3, 3), (1, 1, 1), dict(block_M=64, block_N=64, block_K=32,
                                                         num_stages=2, threads=128),
                 id="n2c8h8w8f16k3-b64x64x32-t128-s2"),
    pytest.param((1, 5, 11, 9, 7, 3, 2), (2, 2, 2), dict(block_M=32, block_N=32, block_K=32,
                                                         num_stages=3, threads=64),
                 id="ragged-stride2-dil2-b32x32x32-t64-s3"),
])
def test_conv2d(example, shape, conv, config):
    mod = example("conv2d")
    N, C, H, W, F, KH, KW = shape
    stride, padding, dilation = conv
    rng = np.random.default_rng(4)
    inputs = (half(rng, N, H, W, C), half(rng, KH * KW * C, F))
    compare(mod.convolution, shape, dict(stride=stride, padding=padding, dilation=dilation,
                                         **config), inputs)


# --- attention -------------------------------------------------------------------------------
ATTENTION = [
    pytest.param(40, True, dict(block_M=32, block_N=32, num_stages=2, threads=64),
                 id="seq40-causal-b32x32-t64-s2"),
    pytest.param(77, False, dict(block_M=64, block_N=32, num_stages=1, threads=128),
                 id="seq77-b64x32-t128-s1"),
    # 32 query rows per warp: the scores go into the second gemm by a register permutation.
    pytest.param(77, True, dict(block_M=64, block_N=32, num_stages=2, threads=64),
                 id="seq77-causal-b64x32-t64-s2"),
]


def qkv(rng, batch, seq_len, heads, dim):
    return tuple(normal(rng, batch, seq_len, heads, dim) for _ in range(3))


@pytest.mark.parametrize("seq_len, is_causal, config", ATTENTION)
def test_flash_attention(example, seq_len, is_causal, config):
    mod = example("flash_attention")
    inputs = qkv(np.random.default_rng(5), 1, seq_len, 2, 16)
    compare(mod.flash_attention, (1, 2, seq_len, 16, is_causal), config, inputs)


@pytest.mark.parametrize("seq_len, dim, is_causal, config", [
    pytest.param(70, 16, False, dict(block_M=32, block_N=32, num_stages=2, threads=64),
                 id="seq70-b32x32-t64-s2"),
    pytest.param(100, 16, True, dict(block_M=64, block_N=64, num_stages=2, threads=128),
                 id="seq100-causal-b64x64-t128-s2"),
    # The LSE's rows are whole 16-byte units: on sm_90a its one-row tiles go by TMA, into
    # 128-byte aligned shared memory (the checker reports a misaligned bulk copy).
    pytest.param(260, 64, True, dict(block_M=64, block_N=64, num_stages=2, threads=128),
                 id="seq260-d64-causal-b64x64-t128-s2"),
])
def test_flash_attention_bwd(example, seq_len, dim, is_causal, config):
    fwd, mod = example("flash_attention"), example("flash_attention_bwd")
    rng = np.random.default_rng(9)
    q, k, v, do = qkv(rng, 1, seq_len, 2, dim) + (normal(rng, 1, seq_len, 2, dim),)
    o, lse = fwd.flash_attention_lse(1, 2, seq_len, dim, is_causal)(q, k, v)
    compare(mod.flash_attention_bwd, (1, 2, seq_len, dim, is_causal), config,
            (q, k, v, o, do, lse))


@pytest.mark.parametrize("seq_len, window, config", [
    pytest.param(40, None, dict(block_M=32, block_N=32, num_stages=2, threads=64),
                 id="seq40-b32x32-t64-s2"),
    pytest.param(77, 24, dict(block_M=64, block_N=32, num_stages=1, threads=128),
                 id="seq77-window24-b64x32-t128-s1"),
])
def test_attention_sink(example, seq_len, window, config):
    mod = example("attention_sink")
    rng = np.random.default_rng(6)
    sinks = (2.0 * rng.standard_normal(2)).astype(np.float32)
    inputs = qkv(rng, 1, seq_len, 2, 16) + (sinks,)
    compare(mod.attention_sink, (1, 2, seq_len, 16, window), config, inputs)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_attention_sink_grouped_query(example, kv_heads):
    # four query heads over kv_heads K/V heads; checked against the float64 reference too
    mod = example("attention_sink")
    rng = np.random.default_rng(9)
    q = normal(rng, 1, 45, 4, 16)
    k, v = (normal(rng, 1, 45, kv_heads, 16) for _ in range(2))
    sinks = (2.0 * rng.standard_normal(4)).astype(np.float32)
    config = dict(block_M=32, block_N=32, num_stages=2, threads=64, kv_heads=kv_heads)
    out, = compare(mod.attention_sink, (1, 4, 45, 16, None), config, (q, k, v, sinks))
    np.testing.assert_allclose(out.astype(np.float64), mod.ref_program(q, k, v, sinks),
                               atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("seq_len, is_causal, config", ATTENTION)
def test_blocksparse_attention(example, seq_len, is_causal, config):
    mod = example("blocksparse_attention")
    rng = np.random.default_rng(7)
    blocks = (1, 2, -(-seq_len // config["block_M"]), -(-seq_len // config["block_N"]))
    inputs = qkv(rng, 1, seq_len, 2, 16) + (rng.random(blocks) < 0.5,)
    compare(mod.blocksparse_attention, (1, 2, seq_len, 16, is_causal), config, inputs)


@pytest.mark.parametrize("seq_len, num_vertical, num_slash, config", [
    pytest.param(77, 8, 3, dict(block_M=32, block_N=32, num_stages=1, threads=64),
                 id="seq77-v8-s3-b32x32-t64-s1"),
    # K_shared / V_shared are filled in two pipelined loops: a tile each (split_loop_tiles)
    pytest.param(70, 12, 2, dict(block_M=32, block_N=32, num_stages=2, threads=64),
                 id="seq70-v12-s2-b32x32-t64-s2"),
    pytest.param(130, 20, 3, dict(block_M=32, block_N=32, num_stages=3, threads=64),
                 id="seq130-v20-s3-b32x32-t64-s3"),
])
def test_vertical_slash_sparse_attention(example, seq_len, num_vertical, num_slash, config):
    mod = example("vertical_slash_sparse_attention")
    rng = np.random.default_rng(8)
    indices = mod.make_indices(rng, 1, 2, seq_len, num_vertical, num_slash)
    inputs = qkv(rng, 1, seq_len, 2, 16) + indices
    compare(mod.vertical_slash_attention, (1, 2, seq_len, 16, num_vertical, num_slash), config,
            inputs)


@pytest.mark.parametrize("batch, heads, kv_heads, seqlen_kv, block_H, config", [
    pytest.param(2, 16, 1, 37, 16, dict(block_N=32, num_stages=2, threads=64),
                 id="b2-h16-kv1-seq37-bh16-bn32-t64-s2"),
    pytest.param(1, 32, 2, 70, 16, dict(block_N=32, num_stages=1, threads=128),
                 id="b1-h32-kv2-seq70-bh16-bn32-t128-s1"),
    pytest.param(1, 8, 2, 37, 4, dict(block_N=32, num_stages=2, threads=32),
                 id="b1-h8-kv2-seq37-bh4-bn32-t32-s2", marks=pytest.mark.xfail(
                     strict=True, raises=tilecraft.TileError,
                     reason="T.gemm lowering: an M extent below the 16-row mma atom is not "
                            "padded, so fewer than 16 query heads per KV head (block_H < 16) "
                            "cannot be lowered")),
])
def test_mla_decode(example, batch, heads, kv_heads, seqlen_kv, block_H, config):
    mod = example("mla_decode")
    rng = np.random.default_rng(9)
    dim, pe_dim = 32, 16
    inputs = (normal(rng, batch, heads, dim), normal(rng, batch, heads, pe_dim),
              normal(rng, batch, seqlen_kv, kv_heads, dim),
              normal(rng, batch, seqlen_kv, kv_heads, pe_dim))
    compare(mod.flash_mla_decode, (batch, heads, kv_heads, seqlen_kv, dim, pe_dim),
            dict(block_H=block_H, **config), inputs)


# --- chunked gated delta net: three kernels, each fed the interpreter's outputs of the last ---
GDN_SIZES = (1, 40, 1, 32, 48)  # B, seq_len (ragged: one full chunk, one of 8), H, DK, DV
GDN_CONFIG = dict(chunk_size=32, threads=128)


@pytest.mark.parametrize("kernel", ["chunk_prepare", "chunk_state", "chunk_output"])
def test_chunk_gated_delta_net(example, kernel):
    """chunk 32, block_DV 32 (DV = 48: one ragged value tile), 128 threads, chunk_state's scan
    pipelined with 2 stages from an initial state."""
    mod = example("chunk_gated_delta_net")
    q, k, v, g, beta = mod.make_inputs(*GDN_SIZES, seed=10)
    B, _, H, DK, DV = GDN_SIZES
    h0 = np.random.default_rng(11).standard_normal((B, H, DK, DV)).astype(np.float32)
    state_config = dict(block_DV=32, num_stages=2, use_initial_state=True, **GDN_CONFIG)
    ref = dict(target="interp")
    if kernel == "chunk_prepare":
        compare(mod.chunk_prepare, GDN_SIZES, GDN_CONFIG, (k, v, g, beta))
        return
    prepare = mod.chunk_prepare.__wrapped__(*GDN_SIZES, **GDN_CONFIG)
    g_cum, w, u = tilecraft.compile(prepare, out_idx=[-3, -2, -1], **ref)(k, v, g, beta)
    if kernel == "chunk_state":
        compare(mod.chunk_state, GDN_SIZES, state_config, (k, w, u, g_cum, h0))
        return
    state = mod.chunk_state.__wrapped__(*GDN_SIZES, **state_config)
    h, v_new, _ = tilecraft.compile(state, out_idx=[-3, -2, -1], **ref)(k, w, u, g_cum, h0)
    compare(mod.chunk_output, GDN_SIZES, dict(block_DV=32, **GDN_CONFIG), (q, k, v_new, h, g_cum))


@pytest.mark.parametrize("seq_len, is_causal, config", [
    pytest.param(100, False, dict(block_M=32, block_N=32, num_stages=2, threads=64),
                 id="seq100-b32x32-t64-s2"),
    pytest.param(77, True, dict(block_M=32, block_N=16, num_stages=3, threads=128),
                 id="seq77-causal-b32x16-t128-s3"),
])
def test_blocksparse_attention_listed(example, seq_len, is_causal, config):
    # the mask as flex_attention's BlockMask lists it; against the float64 reference too
    mod = example("blocksparse_attention")
    rng = np.random.default_rng(11)
    bm, bn = config["block_M"], config["block_N"]
    mask = rng.random((1, 2, -(-seq_len // bm), -(-seq_len // bn))) < 0.5
    q, k, v = qkv(rng, 1, seq_len, 2, 16)
    num, indices = mod.listed_tiles(mask, is_causal, bm, bn)
    out, = compare(mod.blocksparse_attention_listed, (1, 2, seq_len, 16, is_causal), config,
                   (q, k, v, num, indices))
    want = mod.ref_program(q, k, v, mask, is_causal, bm, bn)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=1e-2, rtol=1e-2)
