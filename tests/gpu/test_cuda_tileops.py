"""Element-wise loops, reductions, cumsum, atomics, softmax, layernorm and attention compiled
for the GPU, against torch on random inputs with poisoned outputs."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
import kernels  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def rand(*shape, dtype=torch.float32):
    return (torch.rand(*shape, device="cuda") * 2 - 1).to(dtype)


def cuda(func):
    return tilecraft.compile(func, target="cuda")


@pytest.mark.parametrize("M,N", [(256, 256), (100, 77)])
def test_elementwise_with_bounds(M, N):
    k = cuda(kernels.elementwise(M, N))
    a, b, c = rand(M, N, dtype=torch.float16), rand(M, N, dtype=torch.float16), poisoned(M, N)
    k(a, b, c)
    torch.testing.assert_close(c, (a * 2).clamp_min(0) + b, atol=2e-3, rtol=2e-3)


def test_workspace_carries_data_between_launches():
    """T.alloc_global of a symbolic size, allocated by the launcher at each call: the first
    launch writes the row sums into it, the second adds them up. Three sizes (ragged
    included) through one compiled program."""
    k = cuda(kernels.workspace_rows())
    for n in (19, 8, 300):
        a = rand(n, 4)
        b, tot = poisoned(n, 4, dtype=torch.float32), poisoned(1, dtype=torch.float32)
        k(a, b, tot)
        a64 = a.double()
        torch.testing.assert_close(b.double(), a64 - a64.mean(1, keepdim=True), atol=1e-5,
                                   rtol=1e-5)
        torch.testing.assert_close(tot.double(), a64.sum().reshape(1), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_isnan_isinf_isfinite_and_clamp(dtype):
    N = 200
    k = cuda(kernels.float_tests(N, str(dtype).split(".")[1]))
    x = rand(N, dtype=dtype) * 3
    x[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, 1.0, -1.0])
    if dtype == torch.float64:
        x[6:8] = torch.tensor([1e300, -1e300])  # finite, though past float32's range
    flags, y = poisoned(3, N, dtype=torch.int32), poisoned(N, dtype=dtype)
    k(x, flags, y)
    want = torch.stack([x.isnan(), x.isinf(), x.isfinite()]).to(torch.int32)
    assert torch.equal(flags, want)
    torch.testing.assert_close(y, torch.where(x.isnan(), x, x.clamp(-1, 1)), equal_nan=True,
                               atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("M,N", [(64, 64), (32, 48)])
def test_reduce_every_kind_and_dim(kind, dim, M, N):
    out_shape = (N,) if dim == 0 else (M,)
    k = cuda(kernels.reduce(kind, dim, M, N))
    x, y = rand(M, N), poisoned(*out_shape, dtype=torch.float32)
    k(x, y)
    ref = {"sum": lambda t: t.sum(dim), "max": lambda t: t.amax(dim), "min": lambda t: t.amin(dim),
           "abssum": lambda t: t.abs().sum(dim), "absmax": lambda t: t.abs().amax(dim)}[kind](x)
    torch.testing.assert_close(y, ref, atol=1e-4, rtol=1e-4)


def test_reduce_max_accumulates_when_not_cleared():
    M, N = 64, 32
    k = cuda(kernels.reduce_max_accumulate(M, N))
    x, y = rand(M, N), poisoned(M, dtype=torch.float32)
    k(x, y)
    torch.testing.assert_close(y, x.amax(1).clamp_min(0.25))


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(reverse):
    M, N = 32, 48
    k = cuda(kernels.cumsum(M, N, reverse))
    x, y = rand(M, N), poisoned(M, N, dtype=torch.float32)
    k(x, y)
    ref = x.flip(1).cumsum(1).flip(1) if reverse else x.cumsum(1)
    torch.testing.assert_close(y, ref, atol=1e-4, rtol=1e-4)


def test_atomics_scalar_and_tile():
    M, N, blocks = 64, 32, 8
    k = cuda(kernels.atomics(M, N, blocks))
    x = rand(blocks, M, N)
    s = torch.zeros(M, N, device="cuda")
    h = torch.zeros(16, dtype=torch.int32, device="cuda")
    mx = torch.full((N,), -10.0, device="cuda")
    k(x, s, h, mx)
    torch.testing.assert_close(s, x.sum(0), atol=1e-4, rtol=1e-4)
    assert h.tolist() == [blocks * M * N // 16] * 16
    torch.testing.assert_close(mx, x.amax(dim=(0, 1)))


@pytest.mark.parametrize("M,N", [(256, 128), (100, 96)])
def test_softmax_rows(M, N):
    k = cuda(kernels.softmax(M, N))
    x, y = rand(M, N, dtype=torch.float16) * 4, poisoned(M, N)
    k(x, y)
    torch.testing.assert_close(y, torch.softmax(x.float(), 1).half(), atol=2e-3, rtol=1e-2)


def test_layernorm():
    M, N = 128, 256
    k = cuda(kernels.layernorm(M, N))
    x, w, y = rand(M, N), rand(N), poisoned(M, N, dtype=torch.float32)
    k(x, w, y)
    ref = torch.nn.functional.layer_norm(x, (N,), eps=1e-5) * w
    torch.testing.assert_close(y, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [256, 200, 64, 40])
@pytest.mark.parametrize("stages,block,threads", [(0, 64, 128), (2, 64, 128), (2, 128, 256)])
def test_flash_attention(causal, seq, stages, block, threads):
    from flash_attention import flash_attention
    B, H, D = 2, 4, 64
    func = flash_attention.__wrapped__(B, H, seq, D, causal, block_M=block, block_N=block,
                                       num_stages=stages, threads=threads)
    k = tilecraft.compile(func, out_idx=[3], target="cuda")
    q, kk, v = (torch.randn(B, seq, H, D, device="cuda").half() for _ in range(3))
    out = k(q, kk, v)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), kk.transpose(1, 2).float(), v.transpose(1, 2).float(),
        is_causal=causal).transpose(1, 2)
    assert not torch.isnan(out).any()
    assert rel_error(out, ref) < 1e-2


@pytest.mark.parametrize("M,N", [(64, 48), (37, 29)])
def test_reductions_of_and_into_shared_tiles(M, N):
    """T.reduce_* whose operand is a shared tile, staged through fragments (stage_tile_operands)."""
    half = (M + 1) // 2
    k = cuda(kernels.shared_reductions(M, N, half))
    a = rand(M, N)
    r, c, h = (poisoned(n, dtype=torch.float32) for n in (M, N, half))
    k(a, r, c, h)
    torch.testing.assert_close(r, a.double().sum(1).float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(c, a.max(0).values.clamp_min(-1.0))
    torch.testing.assert_close(h, a[:half].double().sum(1).float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("M,N,K,transpose_B", [(64, 64, 32, False), (50, 37, 29, False),
                                               (64, 64, 32, True)])
def test_gemm_with_b_computed_in_registers(M, N, K, transpose_B):
    """T.gemm whose B is a fragment, staged through a shared tile (stage_tile_operands)."""
    k = cuda(kernels.gemm_with_computed_b(M, N, K, transpose_B))
    a = rand(M, K, dtype=torch.float16)
    b = rand(*((N, K) if transpose_B else (K, N)), dtype=torch.float16)
    c = poisoned(M, N, dtype=torch.float32)
    k(a, b, c)
    w = (b * 2 - 1).double()
    torch.testing.assert_close(c.double(), a.double() @ (w.T if transpose_B else w),
                               atol=2e-3, rtol=2e-3)
