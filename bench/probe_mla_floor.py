"""How close MLA decode is to the memory floor: beside the kernel and the torch reference, torch
reductions that only read the bytes the kernel must read (query, rotary query, KV and rotary
keys: 85 MB at KV 1024), each timed on a cold L2 in rounds, under both of the profiler's
flushes (`dirty`: a 256 MiB buffer overwritten, so the run also writes back the flush's dirty
lines; `clean`: the buffer read).

The fastest reader is the floor: no kernel that reads its inputs once runs faster, whatever it
computes. torch's time over the floor is then the largest ratio to torch any kernel can reach.

    python3 bench/probe_mla_floor.py [--kv 1024,4096] [--rounds 3]
"""
import argparse
import os
import sys
from statistics import median

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]
import tilecraft  # noqa: E402
from bench_gemm import SETTLE_S, in_rounds, warm_gpu, write_results  # noqa: E402
from bench_mla import B, D, H, PE, mla_inputs, torch_mla  # noqa: E402
from mla_decode import flash_mla_decode  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402

READERS = {  # one pass over a buffer of the kernel's input bytes, each a single reduction
    "sum fp16 -> fp32": lambda buf: buf.sum(dtype=torch.float32),
    "amax int32": lambda buf: buf.view(torch.int32).amax(),
    "sum fp32": lambda buf: buf.view(torch.float32).sum(),
}


def floor_args(description, tag):
    """The command line the MLA floor probes share: --kv, --rounds, --out, --tag."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--kv", default="1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--tag", default=tag)
    return parser.parse_args()


def main():
    args = floor_args(__doc__.splitlines()[0], "mla_decode_memory_floor")
    warm_gpu()
    rows = []
    for S in (int(x) for x in args.kv.split(",")):
        flop = 2.0 * B * H * S * (D + PE) + 2.0 * B * H * S * D
        q, q_pe, kv, k_pe = mla_inputs(S)
        inputs = torch.randn(sum(t.numel() for t in (q, q_pe, kv, k_pe)), device="cuda",
                             dtype=torch.float16)
        kernel = tilecraft.compile(underlying(flash_mla_decode)(B, H, 1, S, D, PE), out_idx=[-1],
                                   pass_configs={"tl.enable_fast_math": True})
        ref = torch_mla(q.float(), q_pe.float(), kv.float(), k_pe.float())
        err = float((kernel(q, q_pe, kv, k_pe).float() - ref).norm() / ref.norm())
        assert err < 1e-2, err
        for flush in ("dirty", "clean"):
            how = True if flush == "dirty" else "clean"
            timers = [lambda: cuda_median_ms(lambda: torch_mla(q, q_pe, kv, k_pe), 3, 20, how),
                      lambda: cuda_median_ms(lambda: kernel(q, q_pe, kv, k_pe), 5, 30, how)]
            timers += [lambda r=r: cuda_median_ms(lambda: r(inputs), 5, 30, how)
                       for r in READERS.values()]
            peer, ours, *reads = in_rounds(args.rounds, timers, SETTLE_S)
            floor = [min(r[i] for r in reads) for i in range(args.rounds)]
            row = {"kv": S, "flush": flush, "bytes_read_mb": inputs.numel() * 2 / 1e6,
                   "torch_us": median(peer) * 1e3, "ours_us": median(ours) * 1e3,
                   "floor_us": median(floor) * 1e3, "rel_error": err,
                   "readers_us": {n: median(r) * 1e3 for n, r in zip(READERS, reads)},
                   "ours_vs_torch": median(p / o for p, o in zip(peer, ours)),
                   "floor_vs_torch": median(p / f for p, f in zip(peer, floor)),
                   "ours_over_floor": median(o / f for o, f in zip(ours, floor)),
                   "ours_tflops": flop / median(ours) / 1e9}
            rows.append(row)
            print(f"KV {S} {flush}: torch {row['torch_us']:.1f} us, ours {row['ours_us']:.1f} "
                  f"({row['ours_vs_torch']:.2f}x), read floor {row['floor_us']:.1f} "
                  f"({row['floor_vs_torch']:.2f}x); readers " + ", ".join(
                      f"{n} {t:.1f}" for n, t in row["readers_us"].items()), flush=True)
    write_results(args.out, args.tag, rows, [
        ("KV", lambda r: str(r["kv"])), ("flush", lambda r: r["flush"]),
        ("torch us", lambda r: f"{r['torch_us']:.1f}"),
        ("ours us", lambda r: f"{r['ours_us']:.1f}"),
        ("read floor us", lambda r: f"{r['floor_us']:.1f}"),
        ("ours vs torch", lambda r: f"{r['ours_vs_torch']:.2f}x"),
        ("floor vs torch (the most any kernel reaches)", lambda r: f"{r['floor_vs_torch']:.2f}x"),
        ("ours / floor", lambda r: f"{r['ours_over_floor']:.2f}")],
        notes="Times are medians of CUDA-event timings on a cold L2; ratios are medians of "
              "per-round ratios. read floor: per round, the fastest of the readers "
              f"({', '.join(READERS)}) over one buffer of the bytes the kernel reads.")


if __name__ == "__main__":
    main()
