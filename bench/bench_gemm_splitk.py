"""Split-K GEMM fp16 (examples/gemm.py matmul_splitk: partial tiles added into C by TMA) beside
torch.matmul and the plain tiled GEMM, on shapes with few tiles of C and a long K, in one
process on one GPU. The split-K time includes zeroing C (what a caller must do before it).

    python3 bench/bench_gemm_splitk.py [--shapes 8192x256x8192,...] [--rounds 3] [--tag ...]

Results: bench/gemm.md.
"""
import argparse
import warnings

import torch

from common import (OUT, VS_TORCH_COLUMNS, cuda_median_ms, in_rounds, row_vs_torch,
                    text_vs_torch, warm_gpu, write_results)
from gemm import matmul, matmul_splitk
from tilecraft.carver.recommend import underlying
import tilecraft

TILE = dict(block_K=64, threads=256, num_stages=4)
WIDE, SQUARE = dict(block_M=128, block_N=256), dict(block_M=128, block_N=128)
MULTICAST = {"tl.enable_tma_multicast": True}   # pairs of M-blocks share B's tiles
ARMS = [("plain 128x128", None, SQUARE, {}), ("plain 128x256", None, WIDE, {}),
        ("plain 128x256 mc", None, WIDE, MULTICAST),
        ("split 2, 128x256", 2, WIDE, {}), ("split 2, 128x256 mc", 2, WIDE, MULTICAST),
        ("split 3, 128x256 mc", 3, WIDE, MULTICAST), ("split 4, 128x256", 4, WIDE, {}),
        ("split 4, 128x256 mc", 4, WIDE, MULTICAST)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8192x256x8192,8192x512x8192,4096x256x16384")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="gemm_splitk")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warm_gpu()
    rows = []
    for shape in args.shapes.split(","):
        M, N, K = (int(x) for x in shape.split("x"))
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        want = a.double() @ b.double()
        cases = []
        for name, split, tiles, configs in ARMS:
            if split is None:
                kernel = tilecraft.compile(underlying(matmul)(M, N, K, **TILE, **tiles),
                                           out_idx=[-1], pass_configs=configs)
                c = kernel(a, b)
                call = (lambda kern=kernel: kern(a, b))
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")   # the adds must run on TMA here
                    kernel = tilecraft.compile(underlying(matmul_splitk)(
                        M, N, K, split_k=split, **TILE, **tiles), pass_configs=configs)
                c = torch.zeros(M, N, device="cuda", dtype=torch.float16)
                kernel(a, b, c)

                def call(kern=kernel, out=c):
                    out.zero_()
                    kern(a, b, out)
            err = float((c.double() - want).norm() / want.norm())
            assert err < 5e-3, (shape, name, err)
            cases.append((name, kernel, call, err))
        peer, *ours = in_rounds(args.rounds, [
            lambda: cuda_median_ms(lambda: a @ b, 5, 30, True)] + [
            lambda call=call: cuda_median_ms(call, 5, 30, True) for _, _, call, _ in cases], 1.0)
        for (name, kernel, _, err), times in zip(cases, ours):
            row = row_vs_torch(2.0 * M * N * K, times, peer, err, kernel, shape=shape, arm=name)
            rows.append(row)
            print(f"{shape} {name:20s} {text_vs_torch(row)}", flush=True)
    write_results(args.out, args.tag, rows, [
        ("shape", lambda r: r["shape"]), ("kernel", lambda r: r["arm"])] + VS_TORCH_COLUMNS,
        notes="ratio: the median over rounds of torch's time / ours, each round timing torch and "
              "every kernel in turn on a cold L2 (a 256 MiB buffer overwritten before each run); "
              f"tiles {TILE}; split-K times include zeroing C; mc: compiled with "
              "tl.enable_tma_multicast (clusters of two M-blocks, B multicast).")


if __name__ == "__main__":
    main()
