"""Warp-specialized pipelines run as clusters of two blocks sharing tiles by TMA multicast
(sm_90a, pass config tl.enable_tma_multicast): GEMMs whose blocks pair along y (shared B) or x (shared A), ragged edges, rasterized
grids, trip counts below the stage count; attention and MLA examples; against float64 torch
references on random inputs with poisoned outputs."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from tilecraft.backends.cuda.runtime import current_arch, has_cuda_device  # noqa: E402

if not has_cuda_device() or not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU and torch with CUDA", allow_module_level=True)
if current_arch() != "sm_90a":
    pytest.skip("clusters and TMA multicast are used on sm_90 (Hopper) GPUs", allow_module_level=True)

from gpu_helpers import poisoned, rel_error, run_gemm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


MULTICAST = {"tl.enable_tma_multicast": True}


def cluster_of(kernel):
    text = kernel.get_kernel_source()
    for dims in ("(1, 2, 1)", "(2, 1, 1)"):
        if f"__cluster_dims__{dims}" in text:
            return dims
    return None


@pytest.mark.parametrize("M,N,K,bm,bn,bk,threads,stages,dims", [
    (512, 512, 512, 128, 256, 64, 256, 3, "(1, 2, 1)"),   # 2 x 4 grid: pairs along y share B
    (200, 136, 72, 64, 64, 32, 128, 2, "(1, 2, 1)"),      # ragged tiles, grid (3, 4)
    (192, 256, 96, 64, 64, 32, 128, 4, "(2, 1, 1)"),      # grid (4, 3): pairs along x share A
    (256, 256, 32, 64, 128, 32, 128, 3, "(1, 2, 1)"),     # one k-step, fewer than the stages
])
def test_clustered_gemm(M, N, K, bm, bn, bk, threads, stages, dims):
    kernel = run_gemm(M, N, K, bm=bm, bn=bn, bk=bk, threads=threads, num_stages=stages,
                      pass_configs=MULTICAST)
    assert cluster_of(kernel) == dims
    assert "tma_load_2d_multicast" in kernel.get_kernel_source()


@pytest.mark.parametrize("M,N,K", [(4352, 2048, 328), (4300, 2040, 200)])
def test_clusters_over_several_waves_walk_k_in_the_same_order(M, N, K):
    """Over 270 clusters of two (four waves of 66 on an H100) odd waves walk K downwards: the
    two blocks of a cluster must take the same k at once, or each would receive the other's
    multicast tile of another k and the product would be wrong; ragged M, N and K too."""
    kernel = run_gemm(M, N, K, bm=128, bn=128, bk=64, threads=256, num_stages=3,
                      pass_configs=MULTICAST)
    assert cluster_of(kernel) is not None
    assert "tc::launch_wave_parity()" in kernel.get_kernel_source()


def test_odd_grids_are_not_clustered():
    kernel = run_gemm(192, 192, 64, bm=64, bn=64, bk=32, threads=128, num_stages=2,
                      pass_configs=MULTICAST)  # grid 3 x 3
    assert cluster_of(kernel) is None


def test_multicast_only_when_asked_for():
    kernel = run_gemm(256, 256, 128, bm=64, bn=64, bk=32, threads=128, num_stages=2)
    assert cluster_of(kernel) is None and "multicast" not in kernel.get_kernel_source()


@pytest.mark.parametrize("panel", [2, 3])
def test_rasterized_clusters_keep_their_shared_tiles(panel):
    import gemm
    M, N, K = 1000, 768, 256
    kernel = tilecraft.compile(gemm.matmul.__wrapped__(
        M, N, K, block_M=128, block_N=256, block_K=64, threads=256, num_stages=3,
        swizzle_panel=panel), pass_configs=MULTICAST)
    assert cluster_of(kernel) == "(1, 2, 1)"
    assert "rasterize_row_clustered<1, 2>" in kernel.get_kernel_source()
    a = torch.rand(M, K, device="cuda").sub_(0.5).half()
    b = torch.rand(K, N, device="cuda").sub_(0.5).half()
    c = poisoned(M, N, dtype=torch.float16)
    kernel(a, b, c)
    assert not torch.isnan(c).any()
    assert rel_error(c, a.double() @ b.double()) < 5e-3


def test_attention_blocks_share_key_and_value_tiles():
    import flash_attention as fa
    B, H, S, D = 2, 4, 512, 128
    kernel = tilecraft.compile(fa.flash_attention.__wrapped__(
        B, H, S, D, False, block_M=128, block_N=128, num_stages=2, threads=256),
        pass_configs=MULTICAST)
    assert cluster_of(kernel) == "(2, 1, 1)"
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    out = poisoned(B, S, H, D, dtype=torch.float16)
    kernel(q, k, v, out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(1, 2).double() for x in (q, k, v))).transpose(1, 2)
    assert rel_error(out, ref) < 5e-3


def test_mla_head_blocks_share_the_kv_cache():
    import mla_decode
    B, H, S, D, PE = 4, 128, 640, 512, 64
    kernel = tilecraft.compile(mla_decode.flash_mla_decode.__wrapped__(
        B, H, 1, S, D, PE, block_N=64, block_H=64, num_stages=2, threads=256),
        pass_configs=MULTICAST)
    assert cluster_of(kernel) is not None
    q = torch.randn(B, H, D, device="cuda", dtype=torch.float16)
    q_pe = torch.randn(B, H, PE, device="cuda", dtype=torch.float16)
    kv = torch.randn(B, S, 1, D, device="cuda", dtype=torch.float16)
    k_pe = torch.randn(B, S, 1, PE, device="cuda", dtype=torch.float16)
    out = poisoned(B, H, D, dtype=torch.float16)
    kernel(q, q_pe, kv, k_pe, out)
    scores = (torch.einsum("bhd,bsd->bhs", q.double(), kv[:, :, 0].double()) +
              torch.einsum("bhd,bsd->bhs", q_pe.double(), k_pe[:, :, 0].double()))
    ref = torch.einsum("bhs,bsd->bhd", torch.softmax(scores * (D + PE) ** -0.5, -1),
                       kv[:, :, 0].double())
    assert rel_error(out, ref) < 5e-3
