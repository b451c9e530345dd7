"""examples/flash_attention_bwd.py on the GPU: the forward with its LSE, then the backward, at
ragged sizes, causal and not, against float64 torch gradients; every output poisoned before the
call (the program's two workspaces, T.alloc_global, are made by the launcher, uninitialized).
On sm_90a the backward's loop is warp-specialized (and persistent over more than one
wave); the cp.async + mma.sync path is checked too."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402

SM80_PATH = {"tl.disable_warp_specialized": True, "tl.disable_tma_lower": True,
             "tl.disable_wgmma": True}


def grads64(q, k, v, do, causal):
    """(dQ, dK, dV) of softmax(Q K^T / sqrt(d)) V in float64, [batch, seq, heads, dim]."""
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(),
                          float("-inf"))
    o = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v)
    return torch.autograd.grad(o, (q, k, v), do.double())


@pytest.mark.parametrize("B,H,S,D,causal,config,extra", [
    # S 130 and 333: the LSE's rows (S floats) are not whole 16-byte units, so TMA cannot
    # load them and the loop runs on cp.async; S 260 is ragged too, its rows TMA-aligned.
    (2, 3, 130, 64, False, dict(block_M=64, block_N=64, threads=128, num_stages=2), {}),
    (2, 3, 260, 64, True, dict(block_M=64, block_N=64, threads=128, num_stages=2), {}),
    (1, 4, 333, 128, True, dict(block_M=64, block_N=128, threads=256, num_stages=2), {}),
    (1, 4, 260, 128, False, dict(block_M=64, block_N=128, threads=256, num_stages=2),
     {"tl.enable_persistent_tiles": 3}),
    (2, 2, 200, 64, True, dict(block_M=64, block_N=64, threads=128, num_stages=2), SM80_PATH),
])
def test_backward_matches_float64_gradients(example, B, H, S, D, causal, config, extra):
    fwd, bwd = example("flash_attention"), example("flash_attention_bwd")
    shape = (B, S, H, D)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(4))
    o, lse = fwd.flash_attention_lse(B, H, S, D, causal)(q, k, v)
    kernel = tilecraft.compile(underlying(bwd.flash_attention_bwd)(B, H, S, D, causal, **config),
                               target="cuda", pass_configs={**bwd.FAST_MATH, **extra})
    dq, dk, dv = (poisoned(*shape) for _ in range(3))
    kernel(q, k, v, o, do, lse, dq, dk, dv)   # Delta and dQ_accum: workspaces of the call
    for name, got, want in zip(("dQ", "dK", "dV"), (dq, dk, dv), grads64(q, k, v, do, causal)):
        assert not got.isnan().any(), f"{name}: unwritten elements"
        assert rel_error(got, want) < 5e-3, (name, rel_error(got, want))
    warp_specialized = extra is not SM80_PATH and S * 4 % 16 == 0
    assert ("tma_load" in kernel.get_kernel_source()) == warp_specialized


def test_workspaces_are_made_at_every_call_and_calls_repeat(example):
    """Two calls of one prepared program (the second on new inputs) both match: the launcher
    makes the workspaces afresh and the dQ accumulator is zeroed by the program itself."""
    fwd, bwd = example("flash_attention"), example("flash_attention_bwd")
    B, H, S, D = 1, 2, 192, 64
    kernel = bwd.flash_attention_bwd(B, H, S, D, True)
    for _ in range(2):
        q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16)
                       for _ in range(4))
        o, lse = fwd.flash_attention_lse(B, H, S, D, True)(q, k, v)
        for got, want in zip(kernel(q, k, v, o, do, lse), grads64(q, k, v, do, True)):
            assert rel_error(got, want) < 5e-3
