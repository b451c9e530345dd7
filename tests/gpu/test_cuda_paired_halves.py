"""16-bit float element-wise loops computed two elements at a time (codegen/pairs.py) give
what the scalar loop gives: random inputs, poisoned outputs, ragged shapes, a float32
reference; the unpacked nibbles times the scale exactly (one rounding either way)."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels  # noqa: E402
from gpu_helpers import TORCH, poisoned  # noqa: E402


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N", [(64, 128), (50, 100), (33, 258)])
def test_paired_elementwise_matches_float32(dtype, M, N):
    kernel = tilecraft.compile(kernels.paired_elementwise(M, N, dtype))
    assert "tc::st_pair" in kernel.get_kernel_source()
    gen = torch.Generator(device="cuda").manual_seed(M * N)
    t = TORCH[dtype]
    X = (torch.rand(M, N, device="cuda", generator=gen) * 2 - 1).to(t)
    Z = (torch.rand(M, N, device="cuda", generator=gen) * 2 - 1).to(t)
    S = (torch.rand(M, device="cuda", generator=gen) + 0.5).to(t)
    P = torch.randint(0, 256, (M, N // 2), device="cuda", generator=gen, dtype=torch.uint8)
    Y, W = poisoned(M, N, dtype=t), poisoned(M, N, dtype=t)
    kernel(X, Z, S, P, Y, W)
    x, z, s = X.float(), Z.float(), S.float()[:, None]
    tol = 1e-2 if dtype == "float16" else 4e-2   # a rounding per operation
    torch.testing.assert_close(Y.float(), x * s + z - x * x, rtol=tol, atol=tol)
    q = torch.stack((P & 0xF, P >> 4), dim=-1).view(M, N).float() - 8
    assert torch.equal(W, (q * s).to(t))


@pytest.mark.parametrize("src", ["uint8", "int8", "uint16"])
@pytest.mark.parametrize("M,N", [(40, 120), (16, 64)])
def test_nibble_fields_convert_exactly(src, M, N):
    """Nibbles of bytes (signed or not) and of 16-bit words, converted two at a time."""
    kernel = tilecraft.compile(kernels.nibble_fields(M, N, src))
    assert "tc::int_fields_to_half2" in kernel.get_kernel_source()
    per = {"uint8": 2, "int8": 2, "uint16": 4}[src]
    gen = torch.Generator(device="cuda").manual_seed(N)
    raw = torch.randint(0, 1 << (4 * per), (M, N // per), device="cuda", generator=gen,
                        dtype=torch.int32)
    if src == "uint16":
        P = torch.where(raw >= 1 << 15, raw - (1 << 16), raw).to(torch.int16).view(torch.uint16)
    else:
        P = raw.to(torch.uint8).view(getattr(torch, src))
    W = poisoned(M, N, dtype=torch.float16)
    kernel(P, W)
    q = torch.stack([(raw >> (4 * k)) & 0xF for k in range(per)], dim=-1).view(M, N)
    assert torch.equal(W, (q - 8).half())
