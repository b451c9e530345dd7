"""Attention whose consumer loop is rotated (rotate_wgmma_loop: the next QK^T batch in flight
beside the PV batch, the softmax between them) against torch in float32, on random inputs
with poisoned outputs, at ragged and causal sizes, rotated and not."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402

FAST = {tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True}
UNROTATED = {**FAST, tilecraft.PassConfigKey.TL_DISABLE_WGMMA_ROTATION: True}


def reference(q, k, v, causal):
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
    scores = qt @ kt.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        S = q.shape[1]
        keep = torch.ones(S, S, device="cuda", dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return (torch.softmax(scores, -1) @ vt).transpose(1, 2)


def check_attention(kernel, B, H, S, D, causal):
    """Runs the attention kernel on random inputs into a poisoned output; every element is
    written and matches torch in float32, with no register spills."""
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    out = poisoned(B, S, H, D)
    kernel(q, k, v, out)
    assert not torch.isnan(out).any()
    assert rel_error(out, reference(q, k, v, causal)) < 5e-3
    assert kernel.n_spills == 0


@pytest.mark.parametrize("B, H, S, D, causal, tiles", [
    (2, 4, 1000, 128, False, dict(block_M=128, block_N=128, threads=256)),
    (2, 4, 1000, 128, True, dict(block_M=128, block_N=128, threads=256)),
    (1, 3, 333, 64, True, dict(block_M=64, block_N=64, threads=128)),
    (1, 2, 100, 64, False, dict(block_M=64, block_N=64, threads=128)),   # 2 iterations
    (1, 2, 50, 64, False, dict(block_M=64, block_N=64, threads=128)),    # 1 iteration
])
@pytest.mark.parametrize("configs", [FAST, UNROTATED], ids=["rotated", "unrotated"])
def test_attention_with_a_three_stage_ring(example, B, H, S, D, causal, tiles, configs):
    fa = example("flash_attention")
    kernel = tilecraft.compile(underlying(fa.flash_attention)(B, H, S, D, causal, num_stages=3,
                                                              **tiles), pass_configs=configs)
    rotated = "wgmma_wait_group<1>" in kernel.get_kernel_source()
    assert rotated == (configs is FAST)
    check_attention(kernel, B, H, S, D, causal)
