"""MLA decode at KV 4096 with and without the seesaw schedule, one launch each, for ncu
(bench/results/2026-11-24_mla_decode_ncu.md):

    ncu --clock-control none -k main_kernel0 --section SpeedOfLight ... python3 bench/ncu_mla.py
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
import tilecraft  # noqa: E402
from bench_mla import B, D, H, PE  # noqa: E402
from mla_decode import flash_mla_decode  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402

S = 4096


def main():
    q = torch.randn(B, H, D, device="cuda", dtype=torch.float16)
    q_pe = torch.randn(B, H, PE, device="cuda", dtype=torch.float16)
    kv = torch.randn(B, S, 1, D, device="cuda", dtype=torch.float16)
    k_pe = torch.randn(B, S, 1, PE, device="cuda", dtype=torch.float16)
    for arm in ({}, {tilecraft.PassConfigKey.TL_DISABLE_SEESAW_WARPGROUPS: True}):
        kernel = tilecraft.compile(
            underlying(flash_mla_decode)(B, H, 1, S, D, PE, block_N=64, block_H=64,
                                         num_stages=2, threads=256),
            out_idx=[-1], pass_configs={tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True, **arm})
        kernel(q, q_pe, kv, k_pe)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
