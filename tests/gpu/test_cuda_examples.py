"""The paper's nine examples and the attention backward on the GPU (their own numpy references,
at small and ragged sizes), the profiler on the GPU, and block rasterization."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402

NAMES = ["gemm", "dequant_gemm", "conv2d", "mla_decode", "chunk_gated_delta_net",
         "flash_attention", "blocksparse_attention", "vertical_slash_sparse_attention",
         "attention_sink", "flash_attention_bwd"]


@pytest.mark.parametrize("name", NAMES)
def test_example_runs_on_gpu_at_its_default_size(example, name):
    module = example(name)
    err = module.run()
    assert err == err, "NaN in the output"  # run() asserts closeness itself


@pytest.mark.parametrize("name,kwargs", [
    ("gemm", dict(M=200, N=136, K=72, block_M=64, block_N=64)),
    ("mla_decode", dict(batch=2, heads=64, kv_heads=1, seqlen_kv=300, dim=128, pe_dim=32)),
    ("flash_attention", dict(batch=2, heads=2, seq_len=130, dim=64, is_causal=True)),
    ("conv2d", dict(N=2, C=32, H=13, W=11, F=40)),
    ("dequant_gemm", dict(M=72, N=200, K=256)),
    ("attention_sink", dict(batch=2, heads=8, kv_heads=2, seq_len=150, dim=64, window_size=40,
                            block_M=64, block_N=64, num_stages=2)),
    ("vertical_slash_sparse_attention", dict(seq_len=300, num_vertical=40, num_slash=6,
                                             block_M=64, block_N=64, num_stages=2)),
])
def test_examples_at_ragged_sizes(example, name, kwargs):
    example(name).run(**kwargs)


def test_profiler_on_gpu(example):
    gemm = example("gemm")
    kernel = gemm.matmul(512, 512, 256, block_M=64, block_N=64, swizzle_panel=4)
    assert kernel.backend == "cuda"
    profiler = kernel.get_profiler()
    profiler.assert_allclose(lambda a, b: (a.float() @ b.float()).half(), atol=1e-2, rtol=1e-2)
    ms = profiler.do_bench(warmup=3, rep=10)
    assert 0 < ms < 100
    with pytest.raises(AssertionError):
        profiler.assert_allclose(lambda a, b: (a.float() @ b.float()).half() + 1)


def test_rasterized_blocks_cover_the_grid(example):
    gemm = example("gemm")
    for panel in (1, 3, 8):
        kernel = gemm.matmul(640, 384, 128, block_M=64, block_N=64, swizzle_panel=panel)
        assert "rasterize_row" in kernel.get_kernel_source()
        a = torch.randn(640, 128, device="cuda").half()
        b = torch.randn(128, 384, device="cuda").half()
        torch.testing.assert_close(kernel(a, b).float(), a.float() @ b.float(), atol=5e-2,
                                   rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("listed,S", [(False, 4096), (True, 4096), (True, 1000)])
def test_blocksparse_attention_at_the_benchmark_size(example, causal, listed, S):
    """B8 H32 D128 through the pipelined path, against dense attention with the mask; the
    listed form takes the mask as flex_attention's (KVNum, KVIndices), also at a ragged S."""
    module = example("blocksparse_attention")
    B, H, D, tile = 8, 32, 128, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    n = -(-S // tile)
    mask = torch.rand(B, H, n, n, device="cuda") < 0.5
    mask[..., torch.arange(n), torch.arange(n)] = True
    if listed:
        kernel = module.blocksparse_attention_listed(B, H, S, D, causal)
        num, indices = (torch.from_numpy(x).cuda()
                        for x in module.listed_tiles(mask.cpu().numpy(), causal, tile, tile))
        out = kernel(q, k, v, num, indices)
    else:
        kernel = module.blocksparse_attention(B, H, S, D, causal, block_M=tile, block_N=tile,
                                              num_stages=2, threads=256)
        out = kernel(q, k, v, mask)
    keep = mask.repeat_interleave(tile, 2).repeat_interleave(tile, 3)[..., :S, :S]
    if causal:
        keep &= torch.ones(S, S, device="cuda", dtype=torch.bool).tril()
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
    scores = (qt @ kt.transpose(-1, -2) / D ** 0.5).masked_fill(~keep, float("-inf"))
    ref = (torch.softmax(scores, -1) @ vt).transpose(1, 2)
    assert not torch.isnan(out).any()
    assert float((out.float() - ref).norm() / ref.norm()) < 1e-2
    assert kernel.n_spills == 0


@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_two_row_tiles_a_warp_on_the_cp_async_path(example, causal):
    """128 query rows on four warps (the config whose ldmatrix offsets are rewritten to fit the
    registers, tileops.lowering.hoistable_offset), through cp.async + mma.sync, at a ragged
    length: against float32 attention, the output poisoned with NaN first."""
    from tilecraft.carver.recommend import underlying
    module = example("flash_attention")
    B, H, S, D = 2, 4, 1000, 128
    func = underlying(module.flash_attention)(B, H, S, D, causal, block_M=128, block_N=64,
                                              num_stages=2, threads=128)
    kernel = tilecraft.compile(func, pass_configs={
        "tl.enable_fast_math": True, "tl.disable_warp_specialized": True,
        "tl.disable_tma_lower": True, "tl.disable_wgmma": True})
    assert "^ kk * 16 % 64 / 8" in kernel.get_kernel_source()
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.full((B, S, H, D), float("nan"), device="cuda", dtype=torch.float16)
    kernel(q, k, v, out)
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    ref = ref.transpose(1, 2)
    assert not torch.isnan(out).any()
    assert float((out.float() - ref).norm() / ref.norm()) < 1e-2
