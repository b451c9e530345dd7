"""GEMM on fp8 and tf32 operands (A M x K, B N x K, both K-major; float32 accumulation) on
wgmma, in one process on one GPU: fp8 e4m3 with bfloat16 output beside torch._scaled_mm
(cuBLASLt fp8, unit scales); tfloat32 (float32 tensors) with float32 output beside torch.matmul
with TF32 allowed (cuBLAS's TF32 path).

    python3 bench/bench_gemm_dtypes.py [--dtype fp8|tf32] [--shapes 8192x8192x8192,...]
                                       [--tag gemm_fp8] [--out dir]

Results: bench/gemm.md.
"""
import argparse
import os
import sys

import torch

from common import HERE, OUT, kernel_facts, median_ms, warm_gpu, write_results
import tilecraft

sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
from kernels import k_major_gemm  # noqa: E402

# Tiles of 128 bytes of K a row for fp8, 32 floats (128 bytes too) for tf32.
CONFIGS = {"fp8": [dict(bm=128, bn=256, bk=128, threads=256, num_stages=3),
                   dict(bm=128, bn=256, bk=128, threads=256, num_stages=4),
                   dict(bm=256, bn=128, bk=128, threads=256, num_stages=3),
                   dict(bm=128, bn=128, bk=128, threads=256, num_stages=4)],
           "tf32": [dict(bm=128, bn=256, bk=32, threads=256, num_stages=3),
                    dict(bm=128, bn=256, bk=32, threads=256, num_stages=4),
                    dict(bm=128, bn=128, bk=32, threads=256, num_stages=4)]}


def operands(dtype, M, N, K):
    """(a, b, the peer's call, our kernel's dtypes) for one shape."""
    a = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(N, K, device="cuda") * 2 - 1
    if dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        return a, b, lambda: a @ b.T, dict(a_dtype="tfloat32", b_dtype="tfloat32",
                                           out_dtype="float32")
    a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    return a, b, lambda: torch._scaled_mm(a, b.T, scale_a=one, scale_b=one,
                                          out_dtype=torch.bfloat16), dict(out_dtype="bfloat16")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(CONFIGS), default="fp8")
    parser.add_argument("--shapes", default="8192x8192x8192,8192x28672x8192")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default=None, help="default: gemm_<dtype>")
    args = parser.parse_args()
    rows = []
    warm_gpu()
    for text in args.shapes.split(","):
        M, N, K = (int(x) for x in text.split("x"))
        flop = 2.0 * M * N * K
        a, b, peer, dtypes = operands(args.dtype, M, N, K)
        ref = a.double() @ b.double().T
        for cfg in CONFIGS[args.dtype]:
            # The peer is timed right before each candidate: clocks drift over a run.
            peer_ms = median_ms(peer)
            kernel = tilecraft.compile(k_major_gemm(M, N, K, **dtypes, **cfg), out_idx=[-1])
            c = kernel(a, b)
            err = float((c.double() - ref).norm() / ref.norm())
            ms = median_ms(lambda: kernel(a, b))
            row = {"shape": text, "config": cfg, "ms": ms, "tflops": flop / ms / 1e9,
                   "peer_tflops": flop / peer_ms / 1e9, "ratio": peer_ms / ms,
                   "rel_error": err, **kernel_facts(kernel)}
            rows.append(row)
            print(f"{text} {cfg}: {row['tflops']:.0f} TFLOP/s vs the peer "
                  f"{row['peer_tflops']:.0f} ({row['ratio']:.2f}x) err {err:.1e}", flush=True)
    write_results(args.out, args.tag or f"gemm_{args.dtype}", rows, [
        ("shape", lambda r: r["shape"]), ("config", lambda r: str(r["config"])),
        ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
        ("peer TFLOP/s", lambda r: f"{r['peer_tflops']:.0f}"),
        ("ratio", lambda r: f"{r['ratio']:.2f}"), ("rel err", lambda r: f"{r['rel_error']:.1e}"),
        ("regs", lambda r: str(r["registers"]))])


if __name__ == "__main__":
    main()
