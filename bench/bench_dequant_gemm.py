"""W4A16 dequantize GEMM (examples/dequant_gemm.py: `dequant_gemm`, the dequant fused into the
shared-memory pipeline, tensor cores for the product) beside cuBLAS, in one process on one
GPU: the prefill side, M = 16, 64, 256 rows of activations, N = K = 8192, group size 32.

    python3 bench/bench_dequant_gemm.py [--shapes 16x8192x8192,...] [--configs M:bmxbnxbkxsxt,...]
                                        [--rounds 5] [--compile-only] [--tag ...] [--out dir]

Peers, timed in the same rounds: cuBLAS fp16 on the weight dequantized beforehand (A @ W.T
with W an fp16 [N, K] tensor: what the weight costs unquantized), and torch "unpack, scale,
A @ W.T" (the dequant in torch, then cuBLAS). Every timer starts from a cold L2. A config is
block_M x block_N x block_K x num_stages x threads of `dequant_gemm`, with the prefix rs for
its weight_in_registers form; --configs gives one or more for an M
(`16:16x128x128x3x128`, `256:rs64x128x128x3x128`), the defaults below otherwise. --variant
KEY=1 also times every config compiled with that pass config, in the same rounds.

Results: bench/dequant_gemm.md.
"""
import argparse
from statistics import median

from common import (ERROR_AND_REGISTERS, OUT, add_arm_options, clean_timer, in_rounds,
                    show_results, variant_arms, warm_gpu)
from dequant_gemm import dequant_gemm
import tilecraft

GROUP = 32
SHAPES = "16x8192x8192,64x8192x8192,256x8192x8192"
# block_M x block_N x block_K x num_stages x threads, per M; the first is the bench's default.
CONFIGS = {16: ["rs16x64x256x3x128", "16x64x256x3x128"],
           64: ["rs64x64x256x3x128", "64x64x256x3x128"],
           256: ["rs128x128x128x2x256", "128x128x128x2x256", "rs128x128x128x3x256"]}


def parse(configs_text):
    out = {}
    for item in configs_text.split(",") if configs_text else []:
        m, cfg = item.split(":")
        out.setdefault(int(m), []).append(cfg)
    return out


def build(M, N, K, cfg, target=None, pass_configs=None):
    bm, bn, bk, stages, threads = (int(x) for x in cfg.removeprefix("rs").split("x"))
    func = dequant_gemm.__wrapped__(M, N, K, GROUP, block_M=bm, block_N=bn, block_K=bk,
                                    num_stages=stages, threads=threads,
                                    weight_in_registers=cfg.startswith("rs"))
    return tilecraft.compile(func, out_idx=[-1], target=target, pass_configs=pass_configs)


def torch_dequant(B_packed, Scale, K):
    import torch
    N = B_packed.shape[0]
    q = torch.stack((B_packed & 0xF, B_packed >> 4), dim=-1).view(N, -1)[:, :K]
    return (q.half() - 8) * Scale.repeat_interleave(GROUP, dim=1)[:, :K]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="dequant_gemm")
    parser.add_argument("--shapes", default=SHAPES, help="M x N x K, comma-separated")
    parser.add_argument("--configs", default="", help="M:bmxbnxbkxstagesxthreads, ...")
    parser.add_argument("--compile-only", action="store_true")
    add_arm_options(parser, rounds=5, pass_config=False)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    given = parse(args.configs)
    configs = {M: given.get(M, CONFIGS.get(M, ["64x128x64x3x128"])) for M, _, _ in shapes}
    arms = variant_arms({}, args.variant)
    if args.compile_only:
        for M, N, K in shapes:
            for cfg in configs[M]:
                kernel = build(M, N, K, cfg, target="sm_90a")
                print(f"{M}x{N}x{K} {cfg}: {kernel.n_regs} registers, {kernel.n_spills} spills",
                      flush=True)
        return

    import torch
    rows = []
    warm_gpu()
    for M, N, K in shapes:
        gen = torch.Generator(device="cuda").manual_seed(M)
        A = (torch.rand(M, K, device="cuda", generator=gen) * 2 - 1).half()
        B_packed = torch.randint(0, 256, (N, K // 2), device="cuda", generator=gen,
                                 dtype=torch.uint8)
        Scale = (torch.rand(N, -(-K // GROUP), device="cuda", generator=gen) * 0.015
                 + 0.005).half()
        W = torch_dequant(B_packed, Scale, K)
        ref = A.float() @ W.float().T
        cases = []
        for cfg in configs[M]:
            for label, pass_configs in arms:
                kernel = build(M, N, K, cfg, pass_configs=pass_configs)
                C = kernel(A, B_packed, Scale)
                named = f"{cfg} {label}" if label else cfg
                cases.append((named, kernel, float((C.float() - ref).norm() / ref.norm())))
        timers = [clean_timer(lambda: A @ W.T),
                  clean_timer(lambda: A @ torch_dequant(B_packed, Scale, K).T)]
        timers += [clean_timer(lambda k=k: k(A, B_packed, Scale)) for _, k, _ in cases]
        times = in_rounds(args.rounds, timers, args.settle)
        cublas_ms, torch_ms = median(times[0]), median(times[1])
        for (cfg, kernel, err), t in zip(cases, times[2:]):
            ms = median(t)
            row = {"M": M, "N": N, "K": K, "config": cfg, "us": ms * 1e3,
                   "tflops": 2 * M * N * K / ms / 1e9, "cublas_us": cublas_ms * 1e3,
                   "vs_cublas": median([c / x for c, x in zip(times[0], t)]),
                   "torch_us": torch_ms * 1e3,
                   "vs_torch": median([p / x for p, x in zip(times[1], t)]),
                   "rel_error": err, "registers": kernel.n_regs, "spills": kernel.n_spills,
                   "us_rounds": [x * 1e3 for x in t]}
            print(f"{M}x{N}x{K} {cfg}: {row['us']:.1f} us; cuBLAS fp16 {row['cublas_us']:.1f} us "
                  f"({row['vs_cublas']:.2f}x); torch {row['torch_us']:.1f} us "
                  f"({row['vs_torch']:.2f}x); err {err:.1e}; regs {row['registers']}",
                  flush=True)
            rows.append(row)
    columns = [("M x N x K", lambda r: f"{r['M']}x{r['N']}x{r['K']}"),
               ("config", lambda r: r["config"]), ("us", lambda r: f"{r['us']:.1f}"),
               ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
               ("cuBLAS fp16 us", lambda r: f"{r['cublas_us']:.1f}"),
               ("vs cuBLAS", lambda r: f"{r['vs_cublas']:.2f}"),
               ("torch us", lambda r: f"{r['torch_us']:.1f}"),
               ("vs torch", lambda r: f"{r['vs_torch']:.2f}"),
               *ERROR_AND_REGISTERS]
    show_results(args.out, args.tag, rows, columns)


if __name__ == "__main__":
    main()
