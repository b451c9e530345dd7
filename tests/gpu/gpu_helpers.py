"""Shared by the GPU tests: poisoned outputs, relative errors and CUDA graph capture."""
import torch

import tilecraft
import tilecraft.language as T
import kernels


def poisoned(*shape, dtype=None):
    """An output tensor full of NaN (or -1 for integers), so unwritten elements show."""
    dtype = dtype or torch.float16
    t = torch.empty(*shape, dtype=dtype, device="cuda")
    t.fill_(float("nan") if dtype.is_floating_point else -1)
    return t


def capture(fn):
    """fn run once on a side stream (torch's warm-up recipe), then captured in a CUDA graph, on
    the current device; (graph, result)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def rel_error(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def run_gemm(M, N, K, dtype="float16", trans_A=False, trans_B=False, bm=64, bn=64, bk=32,
             threads=128, a_in_registers=False, policy=T.GemmWarpPolicy.Square, num_stages=0,
             pass_configs=None, eviction=None):
    func = kernels.gemm(M, N, K, bm, bn, bk, dtype, "float32", trans_A, trans_B, threads,
                        a_in_registers, policy, num_stages, eviction)
    kernel = tilecraft.compile(func, target="cuda", pass_configs=pass_configs)
    t = TORCH[dtype]
    a = torch.rand((K, M) if trans_A else (M, K), device="cuda").sub_(0.5).to(t)
    b = torch.rand((N, K) if trans_B else (K, N), device="cuda").sub_(0.5).to(t)
    c = poisoned(M, N, dtype=t)
    kernel(a, b, c)
    ref = (a.double().T if trans_A else a.double()) @ (b.double().T if trans_B else b.double())
    assert not torch.isnan(c).any(), "unwritten output elements"
    err = rel_error(c, ref)
    assert err < (2e-2 if dtype == "bfloat16" else 5e-3), err
    return kernel
