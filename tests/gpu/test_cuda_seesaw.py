"""seesaw_warpgroups on the GPU (sm_90a): MLA decoding with each consumer warpgroup taking whole
KV blocks in turn, against float64 torch on random inputs into poisoned outputs, at trip counts
even, odd (the last block on warpgroup 0 alone), one, and ragged (the tail block's columns past
the cache masked), and persistent or not; the same kernel with the pass turned off agrees."""
import pytest

from gpu_requirements import require_hopper

torch = require_hopper("the seesaw schedule (wgmma) needs")

import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402

OFF = {"tl.disable_seesaw_warpgroups": True}


def _mla(example, B, H, S, D, PE, configs=None, **tiles):
    mla = example("mla_decode")
    func = underlying(mla.flash_mla_decode)(B, H, 1, S, D, PE, **tiles)
    configs = {tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True, **(configs or {})}
    return tilecraft.compile(func, pass_configs=configs)


def _reference(q, q_pe, kv, k_pe):
    D, PE = q.shape[-1], q_pe.shape[-1]
    scores = (torch.einsum("bhd,bsd->bhs", q.double(), kv[:, :, 0].double()) +
              torch.einsum("bhd,bsd->bhs", q_pe.double(), k_pe[:, :, 0].double()))
    p = torch.softmax(scores * (D + PE) ** -0.5, dim=-1)
    return torch.einsum("bhs,bsd->bhd", p, kv[:, :, 0].double())


def _inputs(B, H, S, D, PE):
    g = torch.Generator(device="cuda").manual_seed(S)
    shapes = ((B, H, D), (B, H, PE), (B, S, 1, D), (B, S, 1, PE))
    return [torch.randn(*s, device="cuda", dtype=torch.float16, generator=g) for s in shapes]


@pytest.mark.parametrize("B, H, S, D", [
    (3, 128, 1000, 512),   # 16 blocks, the last ragged
    (2, 128, 4096, 512),   # 64 blocks
    (2, 64, 130, 512),     # 3 blocks: an odd count, warpgroup 0 alone at the end
    (1, 64, 40, 512),      # one block, ragged
    (2, 128, 321, 256),    # 6 blocks, ragged, a smaller latent dim
])
@pytest.mark.parametrize("configs", [{}, {"tl.enable_persistent_tiles": False}],
                         ids=["persistent", "one_block_per_tile"])
def test_mla_decode_seesaw(example, B, H, S, D, configs):
    PE = 64
    kernel = _mla(example, B, H, S, D, PE, configs, block_N=64, block_H=64, num_stages=2,
                  threads=256)
    source = kernel.get_kernel_source()
    assert "tc::warpgroup_index()" in source and "tc::named_barrier_arrive(3, 256)" in source
    assert not kernel.wgmma_serialized and kernel.n_spills == 0
    q, q_pe, kv, k_pe = _inputs(B, H, S, D, PE)
    out = poisoned(B, H, D)
    kernel(q, q_pe, kv, k_pe, out)
    assert not torch.isnan(out).any(), "unwritten output elements"
    assert rel_error(out, _reference(q, q_pe, kv, k_pe)) < 5e-3


def test_turned_off_it_gives_the_same_output(example):
    B, H, S, D, PE = 2, 128, 777, 512, 64
    tiles = dict(block_N=64, block_H=64, num_stages=2, threads=256)
    on, off = _mla(example, B, H, S, D, PE, None, **tiles), _mla(example, B, H, S, D, PE, OFF,
                                                                  **tiles)
    assert "tc::warpgroup_index()" not in off.get_kernel_source()
    q, q_pe, kv, k_pe = _inputs(B, H, S, D, PE)
    a, b = poisoned(B, H, D), poisoned(B, H, D)
    on(q, q_pe, kv, k_pe, a)
    off(q, q_pe, kv, k_pe, b)
    want = _reference(q, q_pe, kv, k_pe)
    assert rel_error(a, want) < 5e-3 and rel_error(b, want) < 5e-3
    assert rel_error(a, b.float()) < 5e-3
