"""GEMM 8192^3 fp16 for ncu: torch.matmul (cuBLAS), ours, and ours with B multicast over
pairs of blocks (tl.enable_tma_multicast), one launch each, so that their traffic at each
level of memory can be set side by side:

    ncu --clock-control none -k regex:"nvjet|main_kernel0" \\
        --metrics dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum \\
        python3 bench/experiments/ncu_gemm.py [MxNxK] [panels]

With panels (comma-separated T.use_swizzle panel sizes, 0 for the raster the compiler picks),
ours is launched once per panel instead, without the multicast arm. What it measured:
bench/gemm.md.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402,F401  (puts examples/ on sys.path)
from gemm import matmul  # noqa: E402
import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402

ARMS = {"ours": {}, "ours, multicast": {"tl.enable_tma_multicast": True}}


def main():
    M, N, K = (int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "8192x8192x8192")
               .split("x"))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    arms = {name: (0, configs) for name, configs in ARMS.items()}
    if len(sys.argv) > 2:
        arms = {f"ours, panel {p}": (int(p), {}) for p in sys.argv[2].split(",")}
    kernels = {name: tilecraft.compile(
        underlying(matmul)(M, N, K, block_M=128, block_N=256, block_K=64, threads=256,
                           num_stages=4, swizzle_panel=panel), out_idx=[-1], pass_configs=configs)
        for name, (panel, configs) in arms.items()}
    print("launch order: cuBLAS, " + ", ".join(kernels), flush=True)
    a @ b
    for kernel in kernels.values():
        kernel(a, b)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
