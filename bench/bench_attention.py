"""MHA forward fp16 (examples/flash_attention.py) beside torch SDPA's flash and cuDNN backends,
in one process on one GPU: medians of CUDA-event timings, TFLOP/s, ratios.

    python bench/bench_attention.py [--out bench/results] [--tag ...]
                                    [--pass-config tl.disable_wgmma=1 ...]

With --pass-config tl.disable_warp_specialized=1 --pass-config tl.disable_tma_lower=1
--pass-config tl.disable_wgmma=1 a Hopper GPU runs the cp.async + mma.sync path (what sm_80
GPUs run).
"""
import argparse
import os
import sys
from statistics import median

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
from flash_attention import flash_attention  # noqa: E402
from bench_gemm import (SETTLE_S, ClockLog, in_rounds_with_clocks, kernel_facts,  # noqa: E402
                        mhz_text, parse_configs, variant_arms, warm_gpu, write_results)
from tilecraft.profiler import cuda_median_ms  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
import tilecraft  # noqa: E402

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


def sdpa_ms(q, k, v, causal, backend):
    try:
        with sdpa_kernel(backend):
            return cuda_median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal), 5, 20, False)
    except RuntimeError as e:
        print("  sdpa", backend, "unavailable:", str(e).splitlines()[0])
        return float("nan")


def sdpa_row(shape, causal, cfg, label, flop, times, flash, cudnn, err, kernel, clocks,
             **extra) -> dict:
    """One result row of an attention kernel beside SDPA's flash and cuDNN backends: times,
    flash and cudnn are the rounds' milliseconds; clocks the SM MHz of ours, flash, cuDNN."""
    ms = median(times)
    mhz, flash_mhz, cudnn_mhz = clocks
    return {"shape": shape, "causal": causal, "config": cfg, "variant": label,
            "ms": ms, "ms_rounds": times, "tflops": flop / ms / 1e9,
            "flash_tflops": flop / median(flash) / 1e9,
            "cudnn_tflops": flop / median(cudnn) / 1e9,
            "vs_flash": median([f / t for f, t in zip(flash, times)]),
            "vs_cudnn": median([c / t for c, t in zip(cudnn, times)]),
            "rel_error": err, **kernel_facts(kernel), **extra,
            "sm_mhz": mhz, "flash_sm_mhz": flash_mhz, "cudnn_sm_mhz": cudnn_mhz}


def row_text(row) -> str:
    B, H, S, D = row["shape"]
    return (f"B{B} H{H} S{S} D{D} causal={row['causal']} {row['config']} {row['variant']}: "
            f"{row['tflops']:.0f} TFLOP/s; flash {row['flash_tflops']:.0f} "
            f"({row['vs_flash']:.2f}x), cuDNN {row['cudnn_tflops']:.0f} "
            f"({row['vs_cudnn']:.2f}x); err {row['rel_error']:.1e}")


SDPA_COLUMNS = [
    ("B,H,S,D", lambda r: str(r["shape"])), ("causal", lambda r: str(r["causal"])),
    ("config", lambda r: str(r["config"])), ("variant", lambda r: r["variant"] or "-"),
    ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
    ("SDPA flash", lambda r: f"{r['flash_tflops']:.0f}"),
    ("x flash", lambda r: f"{r['vs_flash']:.2f}"),
    ("SDPA cuDNN", lambda r: f"{r['cudnn_tflops']:.0f}"),
    ("x cuDNN", lambda r: f"{r['vs_cudnn']:.2f}"), ("rel err", lambda r: f"{r['rel_error']:.1e}"),
    ("regs", lambda r: str(r["registers"])), ("SM MHz", lambda r: mhz_text(r["sm_mhz"])),
    ("flash SM MHz", lambda r: mhz_text(r["flash_sm_mhz"])),
    ("cuDNN SM MHz", lambda r: mhz_text(r["cudnn_sm_mhz"]))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--tag", default="mha_fwd")
    parser.add_argument("--pass-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a pass config for every kernel, e.g. tl.disable_wgmma=1")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                        help="also time every config compiled with these pass configs added "
                             "(KEY=1[,KEY2=1]; repeat for more arms), in the same rounds")
    parser.add_argument("--only", default="", help="comma-separated indices of the configs to "
                                                   "time (default: all)")
    parser.add_argument("--shapes", default="", help="comma-separated indices of the shapes to "
                                                     "time (default: all)")
    parser.add_argument("--shape-list", default="", help="shapes instead of the default ones: "
                        "B,H,S,D,causal(0/1) separated by ';'")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settle", type=float, default=SETTLE_S,
                        help="seconds each timer runs untimed before its kept run (SETTLE_S)")
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
            row = sdpa_row([B, H, S, D], causal, cfg, label, flop, times, flash, cudnn, err,
                           kernel, (mhz, flash_mhz, cudnn_mhz), pass_configs=configs,
                           wgmma="wgmma_m64n" in kernel.get_kernel_source())
            rows.append(row)
            print(row_text(row), flush=True)
    path = write_results(args.out, args.tag, rows, SDPA_COLUMNS,
        notes=f"pass configs: {pass_configs}; variant: that pass config added. Medians over "
              f"{args.rounds} rounds, each timing the peers and every candidate in turn, "
              f"each after {args.settle} s of running untimed (SETTLE_S); a ratio is the "
              "median of the per-round ratios. SM MHz: the median SM clock nvidia-smi sampled "
              "while each was timed.")
    clocks.stop()
    print(open(path).read())


if __name__ == "__main__":
    main()
