"""fp8 GEMM (A M x K, B N x K, both K-major; float32 accumulation, bfloat16 output) on wgmma
beside torch._scaled_mm (cuBLASLt fp8, unit scales), in one process on one GPU.

    python3 bench/bench_gemm_fp8.py [--shapes 8192x8192x8192,...] [--tag gemm_fp8] [--out dir]

Results: bench/gemm.md.
"""
import argparse
import os
import sys

import torch

from common import HERE, OUT, kernel_facts, median_ms, warm_gpu, write_results
import tilecraft

sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
from kernels import fp8_gemm  # noqa: E402

CONFIGS = [dict(bm=128, bn=256, bk=128, threads=256, num_stages=3),
           dict(bm=128, bn=256, bk=128, threads=256, num_stages=4),
           dict(bm=256, bn=128, bk=128, threads=256, num_stages=3),
           dict(bm=128, bn=128, bk=128, threads=256, num_stages=4)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8192x8192x8192,8192x28672x8192")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="gemm_fp8")
    args = parser.parse_args()
    rows = []
    warm_gpu()
    one = torch.ones((), device="cuda")
    for text in args.shapes.split(","):
        M, N, K = (int(x) for x in text.split("x"))
        flop = 2.0 * M * N * K
        a = (torch.rand(M, K, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
        b = (torch.rand(N, K, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
        ref = a.float() @ b.float().T
        for cfg in CONFIGS:
            # The peer is timed right before each candidate: clocks drift over a run.
            peer_ms = median_ms(lambda: torch._scaled_mm(a, b.T, scale_a=one, scale_b=one,
                                                         out_dtype=torch.bfloat16))
            kernel = tilecraft.compile(fp8_gemm(M, N, K, out_dtype="bfloat16", **cfg),
                                       out_idx=[-1])
            c = kernel(a, b)
            err = float((c.float() - ref).norm() / ref.norm())
            ms = median_ms(lambda: kernel(a, b))
            row = {"shape": text, "config": cfg, "ms": ms, "tflops": flop / ms / 1e9,
                   "peer_tflops": flop / peer_ms / 1e9, "ratio": peer_ms / ms,
                   "rel_error": err, **kernel_facts(kernel)}
            rows.append(row)
            print(f"{text} {cfg}: {row['tflops']:.0f} TFLOP/s vs _scaled_mm "
                  f"{row['peer_tflops']:.0f} ({row['ratio']:.2f}x) err {err:.1e}", flush=True)
    write_results(args.out, args.tag, rows, [
        ("shape", lambda r: r["shape"]), ("config", lambda r: str(r["config"])),
        ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
        ("_scaled_mm TFLOP/s", lambda r: f"{r['peer_tflops']:.0f}"),
        ("ratio", lambda r: f"{r['ratio']:.2f}"), ("rel err", lambda r: f"{r['rel_error']:.1e}"),
        ("regs", lambda r: str(r["registers"]))])


if __name__ == "__main__":
    main()
