"""MHA forward fp16 (examples/flash_attention.py) beside torch SDPA's flash and cuDNN backends,
in one process on one GPU: medians of CUDA-event timings, TFLOP/s, ratios.

    python3 bench/bench_mha_fwd.py [--only 1] [--shapes 0,2 | --shape-list "B,H,S,D,causal;..."]
                                   [--pass-config tl.disable_wgmma=1 ...] [--variant KEY=1]
                                   [--rounds 5] [--settle 1.0] [--tag ...] [--out dir]

With --pass-config tl.disable_warp_specialized=1 --pass-config tl.disable_tma_lower=1
--pass-config tl.disable_wgmma=1 a Hopper GPU runs the cp.async + mma.sync path (what sm_80
GPUs run). Results: bench/mha_fwd.md.
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from common import (OUT, SDPA_COLUMNS, ClockLog, add_arm_options, cuda_median_ms,
                    in_rounds_with_clocks, parse_configs, sdpa_ms, sdpa_row,
                    show_results, variant_arms, warm_gpu)
from flash_attention import flash_attention
from tilecraft.carver.recommend import underlying
import tilecraft

SHAPES = [(8, 32, 4096, 128, False), (8, 32, 4096, 128, True), (8, 32, 8192, 128, False)]
CONFIGS = [dict(block_M=128, block_N=128, num_stages=2, threads=256),
           dict(block_M=128, block_N=128, num_stages=3, threads=256),
           dict(block_M=128, block_N=64, num_stages=2, threads=256),
           dict(block_M=64, block_N=64, num_stages=2, threads=128),
           dict(block_M=128, block_N=64, num_stages=3, threads=256),
           # Four warps of 32 query rows each (two 16-row mma tiles a warp): each K / V
           # fragment read from shared memory feeds twice the mma.sync of a 16-row warp.
           dict(block_M=128, block_N=64, num_stages=2, threads=128),
           dict(block_M=128, block_N=32, num_stages=2, threads=128),
           dict(block_M=128, block_N=32, num_stages=3, threads=128)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="mha_fwd")
    parser.add_argument("--only", default="", help="comma-separated indices of the configs to "
                                                   "time (default: all)")
    parser.add_argument("--shapes", default="", help="comma-separated indices of the shapes to "
                                                     "time (default: all)")
    parser.add_argument("--shape-list", default="", help="shapes instead of the default ones: "
                        "B,H,S,D,causal(0/1) separated by ';'")
    add_arm_options(parser, rounds=5)
    args = parser.parse_args()
    configs_timed = [CONFIGS[int(i)] for i in args.only.split(",")] if args.only else CONFIGS
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    if args.shape_list:
        shapes = [tuple(int(x) for x in s.split(",")[:4]) + (s.split(",")[4].strip() == "1",)
                  for s in args.shape_list.split(";")]
    # The example's own configs (fast math) plus the ones given here.
    pass_configs = {tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True,
                    **parse_configs(args.pass_config)}
    variants = variant_arms(pass_configs, args.variant)
    rows = []
    clocks = ClockLog()
    warm_gpu()
    for B, H, S, D, causal in shapes:
        flop = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        ref = ref.transpose(1, 2).float()
        cases = []
        for cfg in configs_timed:
            for label, configs in variants:
                kernel = tilecraft.compile(underlying(flash_attention)(B, H, S, D, causal, **cfg),
                                           out_idx=[-1], pass_configs=configs)
                out = kernel(q, k, v)
                err = float((out.float() - ref).norm() / ref.norm())
                cases.append((cfg, label, configs, kernel, err))
        (flash, cudnn, *ours), (flash_mhz, cudnn_mhz, *our_mhz) = in_rounds_with_clocks(
            args.rounds, [
            lambda: sdpa_ms(qt, kt, vt, causal, SDPBackend.FLASH_ATTENTION),
            lambda: sdpa_ms(qt, kt, vt, causal, SDPBackend.CUDNN_ATTENTION)] + [
            lambda kern=kernel: cuda_median_ms(lambda: kern(q, k, v), 3, 10, False)
            for _, _, _, kernel, _ in cases], clocks, args.settle)
        for times, mhz, (cfg, label, configs, kernel, err) in zip(ours, our_mhz, cases):
            rows.append(sdpa_row([B, H, S, D], causal, cfg, label, flop, times, flash, cudnn,
                                 err, kernel, (mhz, flash_mhz, cudnn_mhz), pass_configs=configs,
                                 wgmma="wgmma_m64n" in kernel.get_kernel_source()))
    show_results(args.out, args.tag, rows, SDPA_COLUMNS,
        notes=f"pass configs: {pass_configs}; variant: that pass config added. Medians over "
              f"{args.rounds} rounds, each timing the peers and every candidate in turn, "
              f"each after {args.settle} s of running untimed (SETTLE_S); a ratio is the "
              "median of the per-round ratios. SM MHz: the median SM clock nvidia-smi sampled "
              "while each was timed.", clocks=clocks)


if __name__ == "__main__":
    main()
