"""GEMM fp16 (A row-major M x K, B row-major K x N, fp32 accumulation) beside torch.matmul,
in one process on one GPU: medians of CUDA-event timings over random inputs, in rounds that
alternate torch and every candidate.

    python bench/bench_gemm.py [--shapes 8192x8192x8192,...] [--configs hopper|sm80]
                               [--pass-config tl.disable_wgmma=1] [--tag name] [--out dir]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from statistics import median

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import tilecraft  # noqa: E402
from gemm import matmul  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402

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


def median_ms(fn, reps=30, warmup=5):
    """Median of CUDA-event timings of fn, each run on a cold L2 and enqueued behind the
    previous one (the profiler's timer, as Triton's do_bench): the GPU's time, with the host's
    launch latency hidden behind the flush as it is in a stream of launches."""
    return cuda_median_ms(fn, warmup, reps, flush_l2=True)


def synced_median_ms(fn, reps=20, warmup=5):
    """Median of CUDA-event timings of fn run alone after a synchronize: the GPU idles while
    the host launches, so the host's launch latency is counted in (what a caller who waits
    for each result sees)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


# Seconds each timer runs its own work, untimed, before the run that is kept (--settle). The
# board is power-capped: its clock follows the power drawn over the last tens of milliseconds,
# so a kernel timed right after a lighter one borrows headroom it would not have on its own,
# and which side of a ratio runs second shifted it by up to 20% (SM clocks 1425 against
# 1830 MHz in one run). Settled, both sides are timed at the clock their own power allows.
SETTLE_S = 1.0


def settle(timer, seconds: float):
    """Run timer for `seconds`, dropping what it returns."""
    start = time.time()
    while time.time() - start < seconds:
        timer()


def settled(timer, seconds: float):
    """timer, each call preceded by `seconds` of running it (settle)."""
    def run():
        settle(timer, seconds)
        return timer()
    return run


def in_rounds(rounds: int, timers: list, settle_s: float = 0.0) -> list:
    """[times of timer i over the rounds] for each timer, each round running every timer in
    turn: clocks drift over a run by more than the differences measured, so ratios are taken
    between timings of one round (and their median reported)."""
    timers = [settled(t, settle_s) for t in timers]
    times = [[] for _ in timers]
    for _ in range(rounds):
        for out, timer in zip(times, timers):
            out.append(timer())
    return times


class ClockLog:
    """The GPU's SM clock (and any other nvidia-smi --query-gpu fields given), sampled by
    nvidia-smi every 50 ms in the background while a bench runs: a kernel that draws more power
    runs at a lower clock under the board's power cap, so a ratio is read together with the
    clocks each side ran at. Without nvidia-smi every clock is None."""

    def __init__(self, fields=("clocks.sm",)):
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv")
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "-i", str(torch.cuda.current_device()),
                 "--query-gpu=" + ",".join(("timestamp",) + tuple(fields)),
                 "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=self.file, stderr=subprocess.DEVNULL)
        except OSError:
            self.proc = None

    def samples(self) -> list:
        """[(seconds since the epoch, value of each field...)] so far (the first field is the
        SM clock in MHz unless other fields were given)."""
        self.file.flush()
        out = []
        for line in open(self.file.name):
            try:
                stamp, *values = (x.strip() for x in line.split(","))
                when = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                out.append((when, *(float(v) for v in values)))
            except ValueError:
                continue
        return out

    def median_mhz(self, windows) -> float | None:
        """The median clock over the samples taken inside the (start, end) windows."""
        inside = [mhz for when, mhz, *_ in self.samples()
                  if any(start <= when <= end for start, end in windows)]
        return median(inside) if inside else None

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def mhz_text(mhz) -> str:
    return "-" if mhz is None else f"{mhz:.0f}"


def in_rounds_with_clocks(rounds: int, timers: list, clocks: ClockLog,
                          settle_s: float = 0.0) -> tuple:
    """in_rounds, and for each timer the median SM clock while its kept run ran."""
    windows = [[] for _ in timers]

    def timed(i, timer):
        def run():
            settle(timer, settle_s)
            start = time.time()
            try:
                return timer()
            finally:
                windows[i].append((start, time.time()))
        return run
    times = in_rounds(rounds, [timed(i, t) for i, t in enumerate(timers)])
    return times, [clocks.median_mhz(w) for w in windows]


def parse_configs(texts) -> dict:
    """{key: bool} from KEY=0/1 command-line pass configs."""
    return {k: bool(int(v)) for k, v in (x.split("=") for x in texts)}


def variant_arms(base: dict, variants: list) -> list:
    """[(label, pass configs)]: the base configs, then one arm per --variant (each a
    comma-separated KEY=0/1 list added to the base), all timed in the same rounds."""
    return [("", base)] + [(text, {**base, **parse_configs(text.split(","))})
                           for text in variants]


def warm_gpu(seconds: float = 2.0):
    """Run matrix products until the clocks have settled, so the first shape measured is not
    timed on an idle GPU ramping up."""
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    start = time.time()
    while time.time() - start < seconds:
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()


def kernel_facts(kernel) -> dict:
    """What ptxas reported for a compiled kernel, for a results row."""
    return {"registers": kernel.n_regs, "spills": kernel.n_spills,
            "wgmma_serialized": kernel.wgmma_serialized}


def row_vs_torch(flop: float, times: list, peer: list, err: float, kernel, **keys) -> dict:
    """A results row for one kernel timed in rounds beside torch: medians, rates and the median
    of the per-round ratios (torch's time / ours), with `keys` first."""
    ms, torch_ms = median(times), median(peer)
    return {**keys, "ms": ms, "tflops": flop / ms / 1e9, "torch_ms": torch_ms,
            "torch_tflops": flop / torch_ms / 1e9,
            "vs_torch": median([p / t for p, t in zip(peer, times)]), "rel_error": err,
            **kernel_facts(kernel)}


def text_vs_torch(row: dict) -> str:
    return (f"{row['tflops']:.0f} TFLOP/s vs torch {row['torch_tflops']:.0f} "
            f"({row['vs_torch']:.2f}x) err {row['rel_error']:.1e} regs {row['registers']} "
            f"spills {row['spills']}")


# The results-table columns of row_vs_torch rows, after the ones naming the case.
VS_TORCH_COLUMNS = [
    ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
    ("torch TFLOP/s", lambda r: f"{r['torch_tflops']:.0f}"),
    ("ratio", lambda r: f"{r['vs_torch']:.2f}"), ("rel err", lambda r: f"{r['rel_error']:.1e}"),
    ("regs", lambda r: str(r["registers"])), ("spills", lambda r: str(r["spills"]))]


def gpu_facts() -> dict:
    facts = {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
             "torch": torch.__version__,
             "tilecraft": tilecraft.__version__}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,"
                              "driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        facts["nvidia_smi"] = out
    except OSError:
        pass
    return facts


def write_results(out_dir: str, tag: str, rows: list, columns, notes: str = "") -> str:
    """<out_dir>/<date>_<tag>.json (the GPU's facts and every row) and .md (a table with one
    column per (heading, row -> text) in columns); the .md's path."""
    facts = gpu_facts()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{stamp}_{tag}")
    with open(base + ".json", "w") as f:
        json.dump({"facts": facts, "rows": rows}, f, indent=1)
    lines = [f"# {tag} ({stamp})", "", str(facts), ""] + ([notes, ""] if notes else [])
    lines += ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    return base + ".md"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8192x8192x8192")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--tag", default="gemm")
    parser.add_argument("--configs", choices=["hopper", "sm80"], default="hopper")
    parser.add_argument("--pass-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a pass config for every kernel, e.g. tl.disable_wgmma=1")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                        help="also time every config compiled with these pass configs added "
                             "(KEY=1[,KEY2=1]; repeat for more arms), in the same rounds")
    parser.add_argument("--only", default="", help="comma-separated indices of the configs to "
                                                   "time (default: all)")
    parser.add_argument("--panels", default="8", help="comma-separated T.use_swizzle panel "
                                                       "sizes, each config timed with each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=SETTLE_S,
                        help="seconds each timer runs untimed before its kept run (SETTLE_S)")
    args = parser.parse_args()
    configs = HOPPER_CONFIGS if args.configs == "hopper" else SM80_CONFIGS
    if args.only:
        configs = [configs[int(i)] for i in args.only.split(",")]
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
    path = write_results(args.out, args.tag, rows, [
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
              "sampled while each was timed.")
    clocks.stop()
    print(open(path).read())


if __name__ == "__main__":
    main()
