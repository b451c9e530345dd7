"""Steady state under the power cap: each of our kernels and its peer runs back to back for a
few seconds while nvidia-smi samples the SM clock and the board's power; the table gives the
throughput, clock, power and FLOP per joule of each. A kernel that spends less energy per FLOP
runs at a higher clock at the cap; a short timing instead inherits the clock the kernel before
it left (the reason the other benches settle each timer first, common.SETTLE_S).

    python3 bench/bench_power.py [--seconds 3] [--rounds 2] [--tag power_steady_state]
                                 [--gemm-shapes 8192x8192x8192,...] [--variant KEY=1]

--variant adds our GEMM compiled with those pass configs beside the default one (an A/B of a
pass at the power cap); an item panel=N in it sets that arm's T.use_swizzle panel (default 16).
Results: bench/power.md.
"""
import argparse
import time
from statistics import median

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from common import OUT, ClockLog, parse_configs, show_results, warm_gpu
from flash_attention import flash_attention
from gemm import matmul
from tilecraft.carver.recommend import underlying
import tilecraft


def workloads(gemm_shapes=((8192, 8192, 8192),), variants=(), mha=True):
    """{name: (callable, FLOP per call)}: MHA S4096 beside cuDNN, each GEMM shape beside cuBLAS
    (and compiled once more per variant: a dict of pass configs)."""
    work = {}
    for M, N, K in gemm_shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        name = f"GEMM {M}x{N}x{K}"
        work[f"{name}, cuBLAS"] = (lambda a=a, b=b: a @ b, 2.0 * M * N * K)
        for configs in ({},) + tuple(variants):
            # Panels of 16 tile rows: a wave of 132 tiles of 128x256 then covers about 16 x 8
            # of them, the least A and B it can read from HBM.
            configs = dict(configs)
            panel = configs.pop("panel", 16)
            func = underlying(matmul)(M, N, K, swizzle_panel=panel, block_M=128, block_N=256,
                                      block_K=64, threads=256, num_stages=4)
            gemm = tilecraft.compile(func, out_idx=[-1], pass_configs=configs)
            label = ", ".join([f"{k}={v}" for k, v in configs.items()] +
                              ([f"panel={panel}"] if panel != 16 else []))
            work[f"{name}, ours{' ' + label if label else ''}"] = (
                lambda g=gemm, a=a, b=b: g(a, b), 2.0 * M * N * K)
    if not mha:
        return work
    B, H, S, D = 8, 32, 4096, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    mha = tilecraft.compile(underlying(flash_attention)(B, H, S, D, False, block_M=128,
                                                        block_N=128, num_stages=3, threads=256),
                            out_idx=[-1], pass_configs={"tl.enable_fast_math": True})

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
    mha_flop = 4.0 * B * H * S * S * D
    return {"MHA S4096, cuDNN": (cudnn, mha_flop),
            "MHA S4096, ours": (lambda: mha(q, k, v), mha_flop), **work}


def parse_variant(text: str) -> dict:
    """--variant KEY=0/1[,KEY2=0/1][,panel=N]: pass configs, and the arm's panel if given."""
    items = text.split(",")
    panels = [int(x[len("panel="):]) for x in items if x.startswith("panel=")]
    if len(panels) > 1:
        raise ValueError(f"--variant {text!r} gives more than one panel")
    configs = parse_configs([x for x in items if not x.startswith("panel=")])
    return {**configs, **({"panel": panels[0]} if panels else {})}


def sustained(fn, seconds: float) -> tuple:
    """(ms per call, start, end) of fn run back to back for `seconds`."""
    start = time.time()
    calls = 0
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    while time.time() - start < seconds:
        for _ in range(5):
            fn()
        calls += 5
        torch.cuda.synchronize()
    last.record()
    last.synchronize()
    return first.elapsed_time(last) / calls, start, time.time()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="power_steady_state")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gemm-shapes", default="8192x8192x8192")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-mha", action="store_true")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.gemm_shapes.split(",")]
    work = workloads(shapes, [parse_variant(v) for v in args.variant], not args.no_mha)
    log = ClockLog(("clocks.sm", "power.draw"))
    warm_gpu()
    for fn, _ in work.values():  # first calls build plans (cuDNN) and load modules: untimed
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    runs = []
    for r in range(args.rounds):
        for name, (fn, flop) in work.items():
            time.sleep(1.0)  # each starts from the same idle moment
            ms, start, end = sustained(fn, args.seconds)
            runs.append((name, r, ms, flop, start, end))
    samples = log.samples()
    log.stop()
    rows = []
    for name, r, ms, flop, start, end in runs:
        # The first half second is the clock still moving from idle; it is left out.
        inside = [s for s in samples if start + 0.5 <= s[0] <= end]
        mhz, watts = median(s[1] for s in inside), median(s[2] for s in inside)
        tflops = flop / ms / 1e9
        rows.append({"work": name, "round": r, "ms": ms, "tflops": tflops, "sm_mhz": mhz,
                     "watts": watts, "tflops_per_ghz": tflops / mhz * 1000,
                     "gflop_per_joule": tflops * 1000 / watts})
        print(f"{name:22s} r{r} {tflops:5.0f} TFLOP/s {mhz:5.0f} MHz {watts:4.0f} W", flush=True)
    show_results(args.out, args.tag, rows, [
        ("work", lambda x: x["work"]), ("round", lambda x: str(x["round"])),
        ("TFLOP/s", lambda x: f"{x['tflops']:.0f}"), ("SM MHz", lambda x: f"{x['sm_mhz']:.0f}"),
        ("W", lambda x: f"{x['watts']:.0f}"),
        ("TFLOP/s per GHz", lambda x: f"{x['tflops_per_ghz']:.1f}"),
        ("GFLOP/J", lambda x: f"{x['gflop_per_joule']:.0f}")],
        notes=f"Each runs back to back for {args.seconds} s after 1 s idle, in {args.rounds} "
              "rounds; clock and power: medians of nvidia-smi's 50 ms samples after the first "
              "0.5 s.")


if __name__ == "__main__":
    main()
