"""MLA decode for ncu, one launch per arm (what it measured: bench/mla_decode.md):

    ncu --clock-control none -k main_kernel0 --section SpeedOfLight ... \\
        python3 bench/experiments/ncu_mla.py
        the seesaw schedule (default) and without it, at KV 4096

    ncu --clock-control none --cache-control none -k main_kernel0 \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
        python3 bench/experiments/ncu_mla.py --kv 1024 --flush dirty,clean
        the default kernel right after the benches' L2 flush: a 256 MiB buffer overwritten
        (dirty: the L2 is left full of lines still to be written back) or read (clean); with
        ncu's own cache control off, the kernel's DRAM writes count the write-backs it forces
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import B, D, H, PE, mla_inputs  # noqa: E402
from mla_decode import flash_mla_decode  # noqa: E402
import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv", type=int, default=4096)
    parser.add_argument("--flush", default="", help="comma-separated: dirty, clean (each one "
                        "launch of the default kernel after that flush); empty: the seesaw A/B")
    args = parser.parse_args()
    S = args.kv
    q, q_pe, kv, k_pe = mla_inputs(S)

    def build(arm):
        return tilecraft.compile(
            underlying(flash_mla_decode)(B, H, 1, S, D, PE, block_N=64, block_H=64,
                                         num_stages=2, threads=256),
            out_idx=[-1], pass_configs={tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True, **arm})
    if not args.flush:
        for arm in ({}, {tilecraft.PassConfigKey.TL_DISABLE_SEESAW_WARPGROUPS: True}):
            build(arm)(q, q_pe, kv, k_pe)
            torch.cuda.synchronize()
        return
    kernels = [("default", build({}))]
    for _, kernel in kernels:
        kernel(q, q_pe, kv, k_pe)  # loads the module: not the launch that is read
    scratch = torch.empty(256 * 2 ** 20, dtype=torch.int8, device="cuda")
    for flush in args.flush.split(","):
        for arm, kernel in kernels:
            scratch.sum() if flush == "clean" else scratch.zero_()
            print(f"next main_kernel0: {arm} after the {flush} flush", flush=True)
            kernel(q, q_pe, kv, k_pe)
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
