"""Repeated calls of one compiled kernel on the GPU: after the first call with a given look of
arguments, calls take the prepared path (call_cache.py, runtime/program.py PreparedCall), which
keeps the packed arguments, TMA tensor maps included, until a tensor's address changes. Each
call here gets fresh random inputs at new addresses, or earlier ones again, and every result is
compared with float64 torch; outputs the caller passes are poisoned first."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402


def _inputs(M, N, K):
    a = torch.rand(M, K, device="cuda").sub_(0.5).half()
    b = torch.rand(K, N, device="cuda").sub_(0.5).half()
    return a, b


def test_gemm_follows_its_inputs_across_calls(example):
    """The example GEMM (TMA loads through tensor maps on sm_90) at a ragged shape: new inputs,
    then the first ones again, each result against its own reference."""
    M, N, K = 777, 520, 200
    kernel = tilecraft.compile(underlying(example("gemm").matmul)(
        M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=256),
        out_idx=[-1])
    first, second = _inputs(M, N, K), _inputs(M, N, K)
    for a, b in (first, second, first, second, _inputs(M, N, K)) + (first, second) * 4:
        c = kernel(a, b)
        assert not torch.isnan(c).any() and rel_error(c, a.double() @ b.double()) < 5e-3
    # The loop keeps each output until the next is made: outputs take turns between blocks of
    # torch's allocator, and once the C call plan was taught their maps it makes the calls.
    from tilecraft.backends.cuda.runtime import fastlaunch
    if fastlaunch.module() is not None:
        assert kernel._fast is not None and kernel._fast.hits >= 4


def _scale(N):
    M = T.symbolic("M")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), s: T.float32, B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
            A_shared = T.alloc_shared((64, N), "float16")
            T.copy(A[bx * 64, 0], A_shared)
            for i, j in T.Parallel(64, N):
                A_shared[i, j] = A_shared[i, j] * s
            T.copy(A_shared, B[bx * 64, 0])
    return main


def test_outputs_the_caller_passes_and_scalars_across_calls():
    """Outputs given by the caller at new addresses, a scalar that changes (another plan) and a
    symbolic size that changes (another plan), each call checked."""
    kernel = tilecraft.compile(_scale(128))
    for rows, scale in ((300, 2.0), (300, 2.0), (300, -0.5), (130, 2.0), (300, 2.0)):
        a = torch.randn(rows, 128, device="cuda").half()
        out = poisoned(rows, 128)
        kernel(a, scale, out)
        assert rel_error(out, a.double() * scale) < 1e-3


def test_calls_of_a_seen_look_run_in_c_and_follow_their_inputs():
    """From the second call of a look on, the call is made by the C FastCall
    (runtime/fastcall.c): fresh inputs at new addresses, an output made each call, each result
    checked; another look (a changed scalar) goes back through Python and gets its own."""
    from tilecraft.backends.cuda.runtime import fastlaunch
    if fastlaunch.module() is None:
        pytest.skip("the C launch module cannot be built here")
    kernel = tilecraft.compile(_scale(128), out_idx=[-1])
    for call in range(6):
        scale = 2.0 if call < 4 else -0.5
        a = torch.randn(300, 128, device="cuda").half()
        out = kernel(a, scale)
        assert rel_error(out, a.double() * scale) < 1e-3
        if call == 3:
            assert kernel._fast.hits == 2   # calls 2 and 3; call 1 ran the plan and made it
        if call == 5:
            assert kernel._fast.hits == 0   # the -0.5 look's own, just made
    kernel(a, -0.5)
    assert kernel._fast.hits == 1
    grads = torch.randn(300, 128, device="cuda").half().requires_grad_()
    assert rel_error(kernel(grads, 2.0).detach(), grads.detach().double() * 2.0) < 1e-3
