"""Cold compile time of the paper's kernels: tilecraft.compile with the program cache off (the
passes, CUDA C++ emission and nvcc -cubin), and the passes and emission alone; the best of a
few runs each, after one compile that imports the compiler, for sm_90a (the tiles are the
Hopper benches'). Needs nvcc, not a GPU.

    python3 bench/bench_compile_time.py [--runs 3] [--tag compile_time]

Results: bench/overhead.md.
"""
import argparse
import os
import time

os.environ["TILECRAFT_DISABLE_CACHE"] = "1"  # read by knobs at each compile: every run is cold

from common import OUT, write_results  # noqa: E402
from flash_attention import flash_attention  # noqa: E402
from gemm import matmul  # noqa: E402
from mla_decode import flash_mla_decode  # noqa: E402
from dequant_gemm import dequant_gemm, dequant_gemv, dequant_gemv_fast  # noqa: E402
from conv2d import convolution  # noqa: E402
import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.backends.cuda.codegen.cuda import emit_cuda  # noqa: E402
from tilecraft.backends.cuda import pipeline as pipelines  # noqa: E402
from tilecraft.target import smem_limit  # noqa: E402  (the limit compile plans for)
from tilecraft.backends.cuda.runtime.toolchain import nvcc_version  # noqa: E402

FAST = {"tl.enable_fast_math": True}
KERNELS = {  # the benches' shapes and tile configurations
    "gemm 8192^3 (128x256x64, 4 stages)": lambda: underlying(matmul)(
        8192, 8192, 8192, block_M=128, block_N=256, block_K=64, num_stages=4, threads=256),
    "mha fwd S4096 D128 (128x128, 3 stages)": lambda: underlying(flash_attention)(
        8, 32, 4096, 128, False, block_M=128, block_N=128, num_stages=3, threads=256),
    "mla decode KV 1024 (64x64, 2 stages)": lambda: underlying(flash_mla_decode)(
        64, 128, 1, 1024, 512, 64),
    # the examples' default tiles at the paper's shapes
    "W4A16 gemv 8192x8192 (the example as written)": lambda: underlying(dequant_gemv)(
        1, 8192, 8192),
    "W4A16 gemv 8192x8192 (warp per row)": lambda: underlying(dequant_gemv_fast)(
        1, 8192, 8192),
    "W4A16 gemm 256x8192x8192": lambda: underlying(dequant_gemm)(256, 8192, 8192),
    "conv2d N128 C64 56x56 F64 3x3": lambda: underlying(convolution)(
        128, 64, 56, 56, 64, 3, 3, 1, 1),
}


def best_of(runs, fn):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="compile_time")
    args = parser.parse_args()
    target = "sm_90a"
    tilecraft.compile(KERNELS["gemm 8192^3 (128x256x64, 4 stages)"](), target=target)
    rows = []
    for name, make in KERNELS.items():
        total = best_of(args.runs, lambda: tilecraft.compile(make(), target=target,
                                                              pass_configs=FAST))
        passes = best_of(args.runs, lambda: emit_cuda(pipelines.cuda(
            make(), target, smem_limit(target), FAST)))
        rows.append({"kernel": name, "target": target, "compile_s": total,
                     "passes_s": passes, "nvcc_s": total - passes})
        print(f"{target} {name}: compile {total:.2f} s (passes and emission {passes:.2f} s, "
              f"nvcc {total - passes:.2f} s)", flush=True)
    write_results(args.out, args.tag, rows, [
        ("kernel", lambda r: r["kernel"]), ("target", lambda r: r["target"]),
        ("cold compile s", lambda r: f"{r['compile_s']:.2f}"),
        ("passes + emission s", lambda r: f"{r['passes_s']:.2f}"),
        ("nvcc s", lambda r: f"{r['nvcc_s']:.2f}")],
        notes=f"Best of {args.runs} runs each, program cache off, nvcc {nvcc_version()}, on "
              f"{os.cpu_count()} CPU cores; nvcc: the difference of the two.")


if __name__ == "__main__":
    main()
