"""Tensors of 2^31 elements and more: copies, element-wise code, atomics, a GEMM and block-sparse
attention address them with 64-bit offsets (codegen/cuda.py wide_offsets), on the TMA path and
on the cp.async path. Each needs several GiB of GPU memory; each test frees its tensors.

Also a target of compute-sanitizer:
    compute-sanitizer --tool memcheck python3 -m pytest -q tests/gpu/test_wide_offsets.py -k "not attention"
"""
import gc

import pytest

from gpu_requirements import require_cuda

torch = require_cuda()

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402
import kernels  # noqa: E402

ROWS = (1 << 23) + 64 + 17   # x 256 columns: 2^31 + 20736 elements, a ragged last tile
SM80 = {"tl.disable_warp_specialized": True, "tl.disable_tma_lower": True,
        "tl.disable_wgmma": True}


@pytest.fixture(autouse=True)
def _free_memory():
    yield
    gc.collect()
    torch.cuda.empty_cache()


def free_bytes() -> int:
    return torch.cuda.mem_get_info()[0]


def need_gib(n: float):
    if free_bytes() < n * 2**30:
        pytest.skip(f"needs {n} GiB of free GPU memory")


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_elementwise_over_two_to_the_31_elements(symbolic):
    need_gib(13)
    kernel = tilecraft.compile(kernels.scale_rows(T.symbolic("M") if symbolic else ROWS, 256),
                               out_idx=[-1], target="cuda")
    x = torch.randn(ROWS, 256, device="cuda", dtype=torch.float16)
    y = kernel(x)
    assert y.shape == x.shape
    assert torch.equal(y[-4096:], x[-4096:] * 2), "the rows past 2^31 elements"
    assert torch.equal(y, x * 2)


@pytest.mark.parametrize("configs", [None, SM80], ids=["default", "cp_async"])
def test_copies_and_atomics_over_two_to_the_31_elements(configs):
    need_gib(26)
    rows = (1 << 21) + 40 + 3        # x 1024 float32 columns: 2^31 + 44032 elements
    kernel = tilecraft.compile(kernels.staged_copy(rows, 1024, block_M=16), target="cuda",
                               pass_configs=configs)
    x = torch.randn(rows, 1024, device="cuda")
    want = x.clone()
    y = torch.full_like(x, float("nan"))
    kernel(x, y)
    assert torch.equal(y, want)
    want.mul_(2)
    assert torch.equal(x, want), "the atomic adds"


@pytest.mark.parametrize("configs", [None, SM80], ids=["default", "cp_async"])
def test_gemm_with_an_operand_over_two_to_the_31_elements(configs):
    need_gib(6)
    M, N, K = (1 << 20) + 100, 136, 2048      # A: 2^31 + 204800 elements
    func = kernels.gemm(M, N, K, 128, 128, 64, "float16", "float32", num_stages=2,
                        threads=128)
    kernel = tilecraft.compile(func, target="cuda", pass_configs=configs)
    a = torch.rand(M, K, device="cuda", dtype=torch.float16).sub_(0.5)
    b = torch.rand(K, N, device="cuda", dtype=torch.float16).sub_(0.5)
    c = poisoned(M, N)
    kernel(a, b, c)
    assert not torch.isnan(c).any(), "unwritten output elements"
    for rows in (slice(0, 4096), slice(M - 4096, M), slice(M // 2, M // 2 + 4096)):
        ref = a[rows].double() @ b.double()
        assert rel_error(c[rows], ref) < 5e-3, rows


def test_blocksparse_attention_at_b64_s8192_h64_d128(example):
    """Q, K, V and the output of 2^32 elements each; a sparse mask keeps the work small, and
    the (batch, head) pairs checked include the last ones, whose offsets pass 2^32. Where less
    memory is free (under compute-sanitizer), batch 40: 2^31 * 1.25 elements each."""
    B = 64 if free_bytes() >= 34 * 2**30 else 40
    need_gib(22)
    print(f"block-sparse attention over 2^31 elements at batch {B}")
    module = example("blocksparse_attention")
    S, H, D, tile = 8192, 64, 128, 64
    kernel = module.blocksparse_attention(B, H, S, D, False, block_M=tile, block_N=tile)
    n = S // tile
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16, generator=gen)
               for _ in range(3))
    mask = torch.rand(B, H, n, n, device="cuda", generator=gen) < 0.02
    mask[..., torch.arange(n), torch.arange(n)] = True
    out = kernel(q, k, v, mask)
    assert out.shape == q.shape
    for b, h in ((0, 0), (17, 40), (B - 1, H - 1), (B - 1, 0)):
        keep = mask[b, h].repeat_interleave(tile, 0).repeat_interleave(tile, 1)
        qt, kt, vt = (x[b, :, h].float() for x in (q, k, v))
        scores = (qt @ kt.T / D ** 0.5).masked_fill(~keep, float("-inf"))
        ref = torch.softmax(scores, -1) @ vt
        got = out[b, :, h]
        assert not torch.isnan(got).any(), (b, h)
        assert rel_error(got, ref) < 1e-2, (b, h)
