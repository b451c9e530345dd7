"""examples/dequant_gemm.py on the GPU: dequant_gemv_fast, and dequant_gemm in both forms (the
weight tile through shared memory, and in registers: weight_in_registers). Random inputs, the output
poisoned with NaN before the launch, a float32 reference (unpack, scale, A @ W.T in float32), at
ragged shapes (N not a multiple of block_N, K not a multiple of block_K or of the group, K below
one tile, several rows of A)."""
import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GROUP = 32


def _example():
    spec = importlib.util.spec_from_file_location("dequant_gemm_example",
                                                  ROOT / "examples" / "dequant_gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference(A, B_packed, Scale, K):
    q = torch.stack((B_packed & 0xF, B_packed >> 4), dim=-1).view(B_packed.shape[0], -1)
    W = (q.float() - 8) * Scale.float().repeat_interleave(GROUP, dim=1)[:, :q.shape[1]]
    return A.float() @ W[:, :K].T


@pytest.mark.parametrize("M,N,K,config", [
    (1, 8192, 8192, {}),
    (1, 1000, 8200, {}),
    (1, 203, 1000, {}),
    (3, 77, 2050, dict(block_N=4)),
    (1, 300, 4104, dict(block_N=16, block_K=512)),
    (2, 37, 2050, dict(block_N=1, block_K=512, threads=32)),
])
def test_dequant_gemv_fast_matches_float32(M, N, K, config):
    C, ref = _launch(_example().dequant_gemv_fast.__wrapped__(M, N, K, GROUP, **config), M, N, K)
    # The kernel multiplies and sums per element in float16 (a product and its K / block_K
    # partial sums), the rest in float32: a few float16 roundings of the largest output.
    assert float((C.float() - ref).norm() / ref.norm()) < 2e-3
    torch.testing.assert_close(C.float(), ref, rtol=1e-2, atol=4e-3 * float(ref.abs().max()))


@pytest.mark.parametrize("in_registers", [False, True])
@pytest.mark.parametrize("M,N,K,config", [
    (16, 8192, 8192, dict(block_M=16, block_N=64, block_K=256, num_stages=3)),
    (64, 1000, 4104, dict(block_M=64, block_N=64, block_K=256, num_stages=3)),
    (37, 200, 520, dict(block_M=32, block_N=64, block_K=64, num_stages=2)),
])
def test_dequant_gemm_forms_match_float32(in_registers, M, N, K, config):
    func = _example().dequant_gemm.__wrapped__(M, N, K, GROUP, weight_in_registers=in_registers,
                                               **config)
    C, ref = _launch(func, M, N, K)
    torch.testing.assert_close(C.float(), ref, rtol=1e-2, atol=2e-3 * float(ref.abs().max()))


def _launch(func, M, N, K):
    """The kernel's output on random inputs (into a NaN-poisoned C, all of which it must
    write) and the float32 reference."""
    kernel = tilecraft.compile(func)
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N + K)
    A = (torch.rand(M, K, device="cuda", generator=gen) * 2 - 1).half()
    B_packed = torch.randint(0, 256, (N, K // 2), device="cuda", generator=gen,
                             dtype=torch.uint8)
    Scale = (torch.rand(N, -(-K // GROUP), device="cuda", generator=gen) * 0.015
             + 0.005).half()
    C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    kernel(A, B_packed, Scale, C)
    assert not torch.isnan(C).any()
    return C, _reference(A, B_packed, Scale, K)
