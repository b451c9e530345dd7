"""Small GEMM, MHA and MLA kernels for compute-sanitizer (memcheck, racecheck, synccheck):

    compute-sanitizer --tool memcheck python3 bench/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 bench/sanitize_kernels.py

Each kernel runs on random inputs as compiled by default, not persistent, and persistent in
two blocks looping over the tiles, and is checked against torch; the sanitizer reports
any invalid access, shared-memory hazard or barrier misuse on top. Ragged sizes included.
What the sanitizers reported: bench/sanitize.md.
"""
import torch

import common  # noqa: F401  (puts examples/ on sys.path)
from flash_attention import flash_attention, ref_program as mha_ref
from gemm import matmul
from mla_decode import flash_mla_decode, ref_program as mla_ref
import tilecraft
from tilecraft.carver.recommend import underlying

FAST = {tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True}
PERSISTENT = tilecraft.PassConfigKey.TL_ENABLE_PERSISTENT_TILES


def check(name, got, want, tol):
    err = float((got.float() - want.float()).norm() / want.float().norm())
    print(f"{name}: rel error {err:.1e}", flush=True)
    assert err < tol, (name, err)


def build(factory, *args, configs=None, **tiles):
    return tilecraft.compile(underlying(factory)(*args, **tiles), out_idx=[-1],
                             pass_configs={**FAST, **(configs or {})})


def main():
    torch.manual_seed(0)
    # Each kernel as compiled by default (attention and MLA here: one wave, so the producer
    # loads the query by TMA), not persistent (nor preloaded), persistent in two blocks that
    # loop over every tile of the grid, in clusters sharing tiles by TMA multicast, and on the
    # cp.async + mma.sync path.
    sm80 = {"tl.disable_warp_specialized": True, "tl.disable_tma_lower": True,
            "tl.disable_wgmma": True}
    for arm, configs in (("", {}), (" plain", {PERSISTENT: False}),
                         (" persistent", {PERSISTENT: 2}),
                         (" multicast", {"tl.enable_tma_multicast": True}), (" sm80", sm80)):
        for M, N, K, cfg in [(256, 256, 256, dict(block_M=128, block_N=256, block_K=64,
                                                   threads=256, num_stages=3)),
                             (200, 136, 72, dict(block_M=128, block_N=128, block_K=64,
                                                 threads=256, num_stages=2)),
                             # persistent: 4 stages leave room to stage half the tile, so
                             # the epilogue goes in two column bands
                             (777, 1336, 520, dict(block_M=128, block_N=256, block_K=64,
                                                   threads=256, num_stages=4))] + [
                # 17 x 16 blocks: two waves and more; by default persistent, not, the odd
                # waves walking K downwards (alternate_k_direction), K ragged
                (2176, 2048, 200, dict(block_M=128, block_N=128, block_K=64, threads=256,
                                       num_stages=3))] * (arm in ("", " plain")):
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            c = build(matmul, M, N, K, configs=configs, **cfg)(a, b)
            check(f"gemm{arm} {M}x{N}x{K}", c, a.float() @ b.float(), 1e-2)
        for S, causal, stages in [(256, False, 2), (200, True, 2), (520, True, 3)]:
            q, k, v = (torch.randn(1, S, 2, 128, device="cuda", dtype=torch.float16)
                       for _ in range(3))
            kernel = build(flash_attention, 1, 2, S, 128, causal, configs=configs,
                           block_M=128, block_N=128, num_stages=stages, threads=256)
            out = kernel(q, k, v)
            ref = mha_ref(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(), causal)
            check(f"mha{arm} S{S} causal={causal} stages={stages}", out,
                  torch.as_tensor(ref).cuda(), 1e-2)
        # MLA decode: the two warpgroups take whole KV blocks in turn (seesaw_warpgroups),
        # over an even and an odd count of blocks, or split the score columns (FullCol, with
        # cross-warp reductions) with the seesaw turned off
        for S, seesaw in ((200, True), (130, True), (200, False)):
            B, H, D, PE = 2, 64, 128, 64
            q, kv = (torch.randn(B, H, D, device="cuda", dtype=torch.float16),
                     torch.randn(B, S, 1, D, device="cuda", dtype=torch.float16))
            q_pe, k_pe = (torch.randn(B, H, PE, device="cuda", dtype=torch.float16),
                          torch.randn(B, S, 1, PE, device="cuda", dtype=torch.float16))
            off = {} if seesaw else {"tl.disable_seesaw_warpgroups": True}
            out = build(flash_mla_decode, B, H, 1, S, D, PE, configs={**configs, **off},
                        block_N=64, block_H=64, num_stages=2, threads=256)(q, q_pe, kv, k_pe)
            ref = mla_ref(*(x.cpu().numpy() for x in (q, q_pe, kv, k_pe)))
            check(f"mla{arm} KV{S}{'' if seesaw else ' no seesaw'}", out,
                  torch.as_tensor(ref).cuda(), 1e-2)


if __name__ == "__main__":
    main()
