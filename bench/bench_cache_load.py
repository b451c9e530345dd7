"""How long a kernel compiled in an earlier process takes to come back from the disk cache:
runs one process that compiles (cold), then fresh processes that only load it (the GEMM example
at 1024^3, on the GPU when there is one).

    python3 bench/bench_cache_load.py

Prints its timings (bench/overhead.md).
"""
import os
import subprocess
import sys
import tempfile

from common import EXAMPLES

CHILD = r"""
import sys, time
try:  # a user's process that runs kernels on torch tensors has torch and a CUDA context
    import torch
    torch.zeros(1, device="cuda")
except Exception:
    pass
t0 = time.perf_counter()
import tilecraft
sys.path.insert(0, {examples!r})
from gemm import matmul
t1 = time.perf_counter()
kernel = matmul(1024, 1024, 1024)
t2 = time.perf_counter()
print(f"{{(t2 - t1) * 1e3:.1f}} {{(t1 - t0) * 1e3:.1f}} {{kernel.arch}}")
"""


def main():
    env = dict(os.environ, TILECRAFT_CACHE_DIR=tempfile.mkdtemp(prefix="tc_cache_"))
    code = CHILD.format(examples=EXAMPLES)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(4)]
    print(f"cold compile: {runs[0][0]} ms (import {runs[0][1]} ms) for {runs[0][2]}")
    for r in runs[1:]:
        print(f"disk cache hit in a new process: {r[0]} ms (import of tilecraft {r[1]} ms)")


if __name__ == "__main__":
    main()
