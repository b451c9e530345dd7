"""Compiled kernels inside CUDA graphs: called once (which loads the module and records the call's
plan), then captured with torch.cuda.graph and replayed on new data written into the captured
inputs; each replay is compared with float64 torch. Kernels launch on torch's current stream,
so the capture stream records them; the prepared path neither synchronizes nor allocates."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import capture as _capture, poisoned, rel_error  # noqa: E402


def _refill(*tensors):
    for t in tensors:
        t.copy_(torch.rand(t.shape, device="cuda").sub_(0.5).to(t.dtype))


def test_gemm_replays_on_new_inputs(example):
    """The example GEMM with TMA loads, persistent by default at this multi-wave ragged shape;
    its output allocated inside the capture (out_idx)."""
    M, N, K = 4000, 2100, 300
    kernel = tilecraft.compile(underlying(example("gemm").matmul)(
        M, N, K, block_M=128, block_N=256, block_K=64, num_stages=3, threads=256),
        out_idx=[-1])
    a = torch.empty(M, K, device="cuda", dtype=torch.float16)
    b = torch.empty(K, N, device="cuda", dtype=torch.float16)
    _refill(a, b)
    graph, c = _capture(lambda: kernel(a, b))
    for _ in range(3):
        _refill(a, b)
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(c).any() and rel_error(c, a.double() @ b.double()) < 5e-3


def _axpy(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), alpha: T.float32, Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 256), threads=256) as bx:
            for i in T.Parallel(256):
                Y[bx * 256 + i] = alpha * X[bx * 256 + i] + Y[bx * 256 + i]
    return main


def test_a_chain_of_calls_replays_in_order():
    """Two launches, the second reading what the first wrote (y = 2x + y, then y = -0.5y + y
    in place), into a buffer the caller passes: the replay keeps their order."""
    n = 1000
    kernel = tilecraft.compile(_axpy(n))
    x = torch.randn(n, device="cuda")
    y = poisoned(n, dtype=torch.float32)

    def chain():
        kernel(x, 2.0, y)
        kernel(y, -0.5, y)
    graph, _ = _capture(chain)
    for _ in range(2):
        x.copy_(torch.randn(n, device="cuda"))
        y0 = torch.randn(n, device="cuda")
        y.copy_(y0)
        graph.replay()
        torch.cuda.synchronize()
        first = 2.0 * x.double() + y0.double()
        assert rel_error(y, 0.5 * first) < 1e-6


def test_a_first_call_inside_the_capture():
    """No warm-up: the checked first call (argument checks, module load, plan) runs while the
    stream is capturing, and the graph still computes the kernel."""
    n = 777
    kernel = tilecraft.compile(_axpy(n))
    x, y = torch.randn(n, device="cuda"), poisoned(n, dtype=torch.float32)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(x, 3.0, y)
    y0 = torch.randn(n, device="cuda")
    y.copy_(y0)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(y, 3.0 * x.double() + y0.double()) < 1e-6
