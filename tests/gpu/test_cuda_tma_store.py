"""TMA stores and stmatrix epilogues on the GPU (sm_90a): the GEMM, attention (4-d output) and MLA
(3-d output) examples at ragged sizes, against torch in float64 / float32 on random inputs into
poisoned outputs. The output is a view into a larger poisoned buffer, so a store that wrote past
the tensor's edge (TMA must drop what falls outside the map) shows up in the rows after it.
The split-K GEMM's TMA stores that add (T.atomic_add(..., use_tma=True)) are checked the same
way, adding into a random C."""
import pytest

from gpu_requirements import require_hopper

torch = require_hopper("TMA stores need")

import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402
from test_cuda_rotation import reference  # noqa: E402

NO_STORE = {"tl.disable_tma_store": True}
PERSISTENT = {"tl.enable_persistent_tiles": 3}


def _stores(kernel, expected: bool):
    source = kernel.get_kernel_source()
    assert ("tc::tma_store_" in source) == expected
    assert "tc::stmatrix_x4(" in source
    return source


@pytest.mark.parametrize("M, N, K, tiles", [
    (1000, 776, 520, dict(block_M=128, block_N=256, block_K=64, num_stages=3)),
    (300, 136, 64, dict(block_M=128, block_N=128, block_K=64, num_stages=3)),
    (129, 264, 72, dict(block_M=128, block_N=256, block_K=64, num_stages=2)),
])
@pytest.mark.parametrize("configs", [{}, PERSISTENT, NO_STORE],
                         ids=["tma_store", "persistent", "thread_stores"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_gemm_stores_exactly_the_output(example, M, N, K, tiles, configs, dtype):
    gemm = example("gemm")
    name = "float16" if dtype == torch.float16 else "bfloat16"
    kernel = tilecraft.compile(underlying(gemm.matmul)(M, N, K, threads=256, dtype=name,
                                                       **tiles), pass_configs=configs)
    _stores(kernel, configs is not NO_STORE)
    a = torch.rand(M, K, device="cuda").sub_(0.5).to(dtype)
    b = torch.rand(K, N, device="cuda").sub_(0.5).to(dtype)
    room = poisoned(M + 9, N, dtype=dtype)
    c = room[:M]
    kernel(a, b, c)
    assert not torch.isnan(c).any(), "unwritten output elements"
    assert torch.isnan(room[M:]).all(), "a store wrote past the tensor's last row"
    assert rel_error(c, a.double() @ b.double()) < (2e-2 if dtype == torch.bfloat16 else 5e-3)


@pytest.mark.parametrize("B, H, S, D, causal", [(2, 4, 1000, 128, True), (1, 3, 333, 64, False)])
@pytest.mark.parametrize("configs", [{}, NO_STORE], ids=["tma_store", "thread_stores"])
def test_attention_output_through_tma(example, B, H, S, D, causal, configs):
    fa = example("flash_attention")
    tiles = dict(block_M=128, block_N=128, threads=256) if D == 128 else \
        dict(block_M=64, block_N=64, threads=128)
    kernel = tilecraft.compile(underlying(fa.flash_attention)(B, H, S, D, causal, num_stages=2,
                                                              **tiles), pass_configs=configs)
    _stores(kernel, configs is not NO_STORE)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    room = poisoned(B + 1, S, H, D)
    out = room[:B]
    kernel(q, k, v, out)
    assert not torch.isnan(out).any() and torch.isnan(room[B:]).all()
    assert rel_error(out, reference(q, k, v, causal)) < 5e-3
    assert kernel.n_spills == 0


def test_mla_decode_output_through_tma(example):
    mla = example("mla_decode")
    B, H, S, D, PE = 3, 128, 1000, 512, 64
    kernel = tilecraft.compile(underlying(mla.flash_mla_decode)(B, H, 1, S, D, PE),
                               out_idx=[-1])
    _stores(kernel, True)
    q = torch.randn(B, H, D, device="cuda", dtype=torch.float16)
    q_pe = torch.randn(B, H, PE, device="cuda", dtype=torch.float16)
    kv = torch.randn(B, S, 1, D, device="cuda", dtype=torch.float16)
    k_pe = torch.randn(B, S, 1, PE, device="cuda", dtype=torch.float16)
    out = kernel(q, q_pe, kv, k_pe)
    scores = (torch.einsum("bhd,bsd->bhs", q.float(), kv[:, :, 0].float()) +
              torch.einsum("bhd,bsd->bhs", q_pe.float(), k_pe[:, :, 0].float()))
    p = torch.softmax(scores * (D + PE) ** -0.5, dim=-1)
    want = torch.einsum("bhs,bsd->bhd", p, kv[:, :, 0].float())
    assert rel_error(out, want) < 5e-3


@pytest.mark.parametrize("M, N, K, split_k, tiles", [
    (1000, 776, 520, 3, dict(block_M=128, block_N=256, block_K=64, num_stages=3)),
    (300, 136, 130, 4, dict(block_M=128, block_N=128, block_K=64, num_stages=2)),  # one split
    (129, 264, 2048, 2, dict(block_M=128, block_N=256, block_K=64, num_stages=4)),  # past K
])
@pytest.mark.parametrize("configs", [{}, NO_STORE], ids=["tma_add", "element_atomics"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_split_k_gemm_adds_exactly_into_the_output(example, M, N, K, split_k, tiles, configs,
                                                   dtype):
    gemm = example("gemm")
    name = "float16" if dtype == torch.float16 else "bfloat16"
    func = underlying(gemm.matmul_splitk)(M, N, K, split_k=split_k, threads=256, dtype=name,
                                          **tiles)
    if configs:
        with pytest.warns(UserWarning, match="runs as element-wise atomics, not TMA"):
            kernel = tilecraft.compile(func, pass_configs=configs)
    else:
        kernel = tilecraft.compile(func)
    assert ("tc::tma_store_add_2d(" in kernel.get_kernel_source()) == (not configs)
    a = torch.rand(M, K, device="cuda").sub_(0.5).to(dtype)
    b = torch.rand(K, N, device="cuda").sub_(0.5).to(dtype)
    room = poisoned(M + 9, N, dtype=dtype)
    c = room[:M]
    c.copy_(torch.rand(M, N, device="cuda").sub_(0.5))
    want = c.double() + a.double() @ b.double()
    kernel(a, b, c)
    assert torch.isnan(room[M:]).all(), "an add wrote past the tensor's last row"
    assert rel_error(c, want) < (2e-2 if dtype == torch.bfloat16 else 5e-3)
    assert kernel.n_spills == 0


def test_an_output_off_a_16_byte_boundary_is_refused_by_name(example):
    gemm = example("gemm")
    M, N, K = 256, 256, 64
    kernel = tilecraft.compile(underlying(gemm.matmul)(M, N, K, block_M=128, block_N=256,
                                                       block_K=64, threads=256, num_stages=2))
    _stores(kernel, True)
    a = torch.rand(M, K, device="cuda").half()
    b = torch.rand(K, N, device="cuda").half()
    c = poisoned(M * N + 1)[1:].view(M, N)          # contiguous, 2 bytes off the boundary
    with pytest.raises(tilecraft.TileError, match=r"argument C cannot be copied by TMA.*16"):
        kernel(a, b, c)
    c = c.clone()                                    # a fresh allocation is aligned
    kernel(a, b, c)
    assert rel_error(c, a.double() @ b.double()) < 5e-3
