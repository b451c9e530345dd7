"""merge_wgmma_batches: MLA's two score gemms into one accumulator (latent, then rotary) are one
wait, not two; gemms into different accumulators (attention's QK^T and PV) and a GEMM's single
gemm keep theirs; tl.disable_wgmma_batch_merge turns it off. The emulator runs the merged MLA
kernel against numpy with nothing reported."""
import numpy as np

import tilecraft.backends.cuda.emulator as E
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines

OFF = {"tl.disable_wgmma_batch_merge": True}
SHARED_ROWS = {"tl.disable_seesaw_warpgroups": True}   # both warpgroups in every score tile
WAIT = "tc::wgmma_wait_group<0>();"


def source(func, configs=None):
    return emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024, configs))[0]


def mla(example, **cfg):
    m = example("mla_decode")
    return underlying(m.flash_mla_decode)(2, 64, 1, 200, 128, 64, block_N=64, block_H=64,
                                           num_stages=2, threads=256, **cfg)


def test_the_score_gemms_of_mla_share_one_wait(example):
    merged, plain = source(mla(example), SHARED_ROWS), source(mla(example), {**OFF, **SHARED_ROWS})
    assert plain.count(WAIT) - merged.count(WAIT) == 1
    loop = merged[merged.index("wgmma_m64n32k16"):]
    first, second = loop.index("Q_shared"), loop.index("Q_pe_shared")
    between = loop[first:second]
    # the first batch is committed, then the consumers wait for the rotary tiles, no wgmma wait
    assert "tc::wgmma_commit_group();" in between and WAIT not in between
    assert "tc::mbarrier_wait_parity" in between


def test_each_warpgroup_of_the_seesaw_merges_its_score_gemms(example):
    """seesaw_warpgroups gives each warpgroup its own copy of the score gemms (n64, one
    warpgroup each): both copies wait once."""
    merged, plain = source(mla(example)), source(mla(example), OFF)
    assert "tc::warpgroup_index()" in merged
    assert plain.count(WAIT) - merged.count(WAIT) == 2
    assert merged.count("wgmma_m64n64k16") == plain.count("wgmma_m64n64k16") > 0


def test_gemms_into_different_accumulators_keep_their_waits(example):
    fa = example("flash_attention")
    func = underlying(fa.flash_attention)(1, 2, 256, 64, False, block_M=64, block_N=64,
                                          num_stages=2, threads=128)
    assert source(func) == source(func, OFF)
    gemm = underlying(example("gemm").matmul)(256, 256, 256, block_M=128, block_N=128,
                                              block_K=32, threads=128, num_stages=3)
    assert source(gemm) == source(gemm, OFF)


def test_the_merged_mla_kernel_agrees_with_numpy(example):
    m = example("mla_decode")
    lowered = E.lower(mla(example), "sm_90a")
    rng = np.random.default_rng(3)
    Q = rng.standard_normal((2, 64, 128)).astype(np.float16)
    Q_pe = rng.standard_normal((2, 64, 64)).astype(np.float16)
    KV = rng.standard_normal((2, 200, 1, 128)).astype(np.float16)
    K_pe = rng.standard_normal((2, 200, 1, 64)).astype(np.float16)
    out = np.zeros((2, 64, 128), np.float16)
    assert list(E.run(lowered, [Q, Q_pe, KV, K_pe, out])) == []
    np.testing.assert_allclose(out.astype(np.float32), m.ref_program(Q, Q_pe, KV, K_pe),
                               rtol=1e-2, atol=1e-2)
