"""GEMM fp16 (A row-major M x K, B row-major K x N, fp32 accumulation) beside torch.matmul,
in one process on one GPU: medians of CUDA-event timings over random inputs, in rounds that
alternate torch and every candidate.

    python3 bench/bench_gemm.py [--shapes 8192x8192x8192,...] [--configs hopper|sm80]
                                [--only 1,3 | --tiles 64x128x64s6t128,...] [--panels 8,0]
                                [--pass-config tl.disable_wgmma=1] [--variant KEY=1]
                                [--rounds 3] [--settle 1.0] [--tag name] [--out dir]

Results: bench/gemm.md. Raw rows go to --out (bench/.out/ by default).
"""
import argparse
import re
import time
from statistics import median

import torch

from common import (OUT, ClockLog, add_arm_options, in_rounds_with_clocks, kernel_facts,
                    median_ms, mhz_text, parse_configs, show_results, synced_median_ms,
                    variant_arms, warm_gpu)
import tilecraft
from gemm import matmul
from tilecraft.carver.recommend import underlying

# Tile configurations tried per shape: the first set suits wgmma (whole warpgroups, 64-row
# bands), the second the mma.sync path.
HOPPER_CONFIGS = [
    dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3),
    dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=4),
    dict(block_M=128, block_N=128, block_K=64, threads=256, num_stages=4),
    dict(block_M=256, block_N=128, block_K=64, threads=256, num_stages=3),
    dict(block_M=128, block_N=256, block_K=32, threads=256, num_stages=5),
    dict(block_M=256, block_N=192, block_K=64, threads=256, num_stages=4),
    dict(block_M=256, block_N=160, block_K=64, threads=256, num_stages=4),
    dict(block_M=256, block_N=160, block_K=64, threads=256, num_stages=3),
    dict(block_M=256, block_N=128, block_K=64, threads=256, num_stages=4),
]
SM80_CONFIGS = [
    dict(block_M=128, block_N=128, block_K=32, threads=128, num_stages=3),
    dict(block_M=128, block_N=128, block_K=64, threads=256, num_stages=3),
    dict(block_M=128, block_N=256, block_K=32, threads=256, num_stages=3),
    dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3),
    dict(block_M=256, block_N=128, block_K=32, threads=256, num_stages=4),
    dict(block_M=128, block_N=128, block_K=64, threads=256, num_stages=0),
    dict(block_M=128, block_N=128, block_K=64, threads=128, num_stages=3),
    dict(block_M=128, block_N=128, block_K=32, threads=128, num_stages=4),
    dict(block_M=256, block_N=128, block_K=64, threads=256, num_stages=3),
]


def parse_tile(text: str) -> dict:
    """A config from its short form: 64x128x64s6t128 is block_M 64, block_N 128, block_K 64,
    6 stages, 128 threads."""
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)s(\d+)t(\d+)", text)
    if match is None:
        raise ValueError(f"--tiles {text!r}: expected e.g. 64x128x64s6t128")
    names = ("block_M", "block_N", "block_K", "num_stages", "threads")
    return dict(zip(names, (int(x) for x in match.groups())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8192x8192x8192")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="gemm")
    parser.add_argument("--configs", choices=["hopper", "sm80"], default="hopper")
    parser.add_argument("--only", default="", help="comma-separated indices of the configs to "
                                                   "time (default: all)")
    parser.add_argument("--tiles", default="", help="comma-separated configs to time instead "
                        "of the lists, e.g. 64x128x64s6t128 (block_M x block_N x block_K, "
                        "stages, threads)")
    parser.add_argument("--panels", default="8", help="comma-separated T.use_swizzle panel "
                                                       "sizes, each config timed with each")
    add_arm_options(parser, rounds=3)
    args = parser.parse_args()
    configs = HOPPER_CONFIGS if args.configs == "hopper" else SM80_CONFIGS
    if args.only:
        configs = [configs[int(i)] for i in args.only.split(",")]
    if args.tiles:
        configs = [parse_tile(t) for t in args.tiles.split(",")]
    pass_configs = parse_configs(args.pass_config)
    variants = variant_arms(pass_configs, args.variant)
    rows = []
    clocks = ClockLog()
    warm_gpu()
    for text in args.shapes.split(","):
        M, N, K = (int(x) for x in text.split("x"))
        flop = 2.0 * M * N * K
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        ref = a.float() @ b.float()
        cases = []
        panels = [int(x) for x in args.panels.split(",")]
        for cfg in configs:
            for panel in panels:
                for label, configs_here in variants:
                    t0 = time.time()
                    func = underlying(matmul)(M, N, K, swizzle_panel=panel, **cfg)
                    kernel = tilecraft.compile(func, out_idx=[-1], pass_configs=configs_here)
                    compile_s = time.time() - t0
                    c = kernel(a, b)
                    named = {**cfg, **({"swizzle_panel": panel} if len(panels) > 1 else {}),
                             **({"variant": label} if label else {})}
                    cases.append((named, kernel, float((c.float() - ref).norm() / ref.norm()),
                                  compile_s))
        (peer, *ours), (peer_mhz, *our_mhz) = in_rounds_with_clocks(
            args.rounds, [lambda: median_ms(lambda: torch.matmul(a, b))] +
            [lambda k=kernel: median_ms(lambda: k(a, b)) for _, kernel, _, _ in cases], clocks,
            args.settle)
        torch_synced = synced_median_ms(lambda: torch.matmul(a, b))
        for times, mhz, (cfg, kernel, err, compile_s) in zip(ours, our_mhz, cases):
            ms, torch_ms = median(times), median(peer)
            synced = synced_median_ms(lambda: kernel(a, b))
            row = {"shape": text, "config": cfg, "ms": ms, "ms_rounds": times,
                   "tflops": flop / ms / 1e9, "torch_ms": torch_ms,
                   "torch_tflops": flop / torch_ms / 1e9,
                   "ratio_vs_torch": median([p / t for p, t in zip(peer, times)]),
                   "rel_error": err, "synced_ms": synced, "torch_synced_ms": torch_synced,
                   "synced_ratio_vs_torch": torch_synced / synced,
                   **kernel_facts(kernel), "compile_s": compile_s, "pass_configs": pass_configs,
                   "sm_mhz": mhz, "torch_sm_mhz": peer_mhz,
                   "wgmma": "wgmma_m64n" in kernel.get_kernel_source()}
            rows.append(row)
            print(f"{text} {cfg} wgmma={row['wgmma']}: {row['tflops']:.0f} TFLOP/s vs torch "
                  f"{row['torch_tflops']:.0f} ({row['ratio_vs_torch']:.2f}x; synced "
                  f"{row['synced_ratio_vs_torch']:.2f}x) err {err:.1e} regs {kernel.n_regs}",
                  flush=True)
    show_results(args.out, args.tag, rows, [
        ("shape", lambda r: r["shape"]), ("config", lambda r: str(r["config"])),
        ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
        ("torch TFLOP/s", lambda r: f"{r['torch_tflops']:.0f}"),
        ("ratio", lambda r: f"{r['ratio_vs_torch']:.2f}"),
        ("ratio, synced", lambda r: f"{r['synced_ratio_vs_torch']:.2f}"),
        ("rel err", lambda r: f"{r['rel_error']:.1e}"), ("regs", lambda r: str(r["registers"])),
        ("SM MHz", lambda r: mhz_text(r["sm_mhz"])),
        ("torch SM MHz", lambda r: mhz_text(r["torch_sm_mhz"]))],
        notes=f"pass configs: {pass_configs}. ratio: torch time / ours, both timed on a cold "
              "L2 with launches enqueued back to back (median_ms), in "
              f"{args.rounds} rounds that time torch and every candidate in turn, each after "
              f"{args.settle} s of running untimed (SETTLE_S); the median of the per-round "
              "ratios. ratio, synced: each run alone after a synchronize, the host's launch "
              "latency included (synced_median_ms). SM MHz: the median SM clock nvidia-smi "
              "sampled while each was timed.", clocks=clocks)


if __name__ == "__main__":
    main()
