"""W4A16 dequantize GEMV (examples/dequant_gemm.py: `dequant_gemv` unchanged and
`dequant_gemv_fast`) beside torch and the copy-bandwidth floor, in one process on one GPU:
M = 1, group size 32, the paper's decode shapes N x K.

    python3 bench/bench_dequant_gemv.py [--shapes 8192x8192,...] [--fast 8x1024x128,...]
                                        [--rounds 5] [--compile-only] [--tag ...] [--out dir]

Peers, timed in the same rounds: torch "unpack, scale, A @ W.T" (the nibbles unpacked and
scaled into an fp16 weight, then cuBLAS), and a device-to-device copy of as many bytes as the
GEMV must read (packed weights + scales + activations), the floor; where TileLang is
installed, the unchanged example and the first fast config compiled by TileLang. GB/s counts those bytes
once; the copy's bandwidth counts its bytes read and written. Every timer starts from a cold
L2 (a 256 MiB buffer read before each run, profiler.cuda_median_ms's "clean" flush).
--compile-only builds every kernel (nvcc included) and times nothing: run it where nvcc is
but no GPU, with TILECRAFT_CACHE_DIR pointing where the GPU machine will read it.

Results: bench/dequant_gemv.md.
"""
import argparse
from statistics import median

from common import (ERROR_AND_REGISTERS, OUT, add_arm_options, build_under_tilelang,
                    clean_timer, example_under_tilelang, in_rounds, show_results, warm_gpu)
from dequant_gemm import dequant_gemv, dequant_gemv_fast
import tilecraft

GROUP = 32
SHAPES = "1024x8192,8192x8192,28672x8192,8192x28672"
# dequant_gemv_fast configs (fast_config); the first is the example's default.
FAST = "4x2048x256x2,8x1024x128x2,4x2048x256x3"


def fast_config(text: str) -> dict:
    """dequant_gemv_fast's keywords from "block_N x block_K x threads [x num_stages]", then
    "s" for through_shared and "b<n>" for T.annotate_min_blocks_per_sm(n), in that order."""
    head, _, blocks = text.partition("b")
    shared = head.endswith("s")
    bn, bk, t, *stages = (int(x) for x in head.rstrip("s").split("x"))
    out = dict(block_N=bn, block_K=bk, threads=t, through_shared=shared)
    if stages:
        out["num_stages"] = stages[0]
    if blocks:
        out["min_blocks_per_sm"] = int(blocks)
    return out


def kernels(N, K, fast_configs, target=None, theirs=None):
    """[(label, compiled kernel)]: the unchanged example, then each fast config, then (theirs:
    the example module under TileLang) the unchanged example and the first fast config compiled
    by TileLang, each where it builds."""
    out = [("dequant_gemv", tilecraft.compile(dequant_gemv.__wrapped__(1, N, K, GROUP),
                                              out_idx=[-1], target=target))]
    for config in fast_configs:
        func = dequant_gemv_fast.__wrapped__(1, N, K, GROUP, **fast_config(config))
        out.append((f"fast {config}", tilecraft.compile(func, out_idx=[-1], target=target)))
    for label, builder, kwargs in (
            ("TileLang dequant_gemv", "dequant_gemv", {}),
            (f"TileLang fast {fast_configs[0]}", "dequant_gemv_fast",
             fast_config(fast_configs[0]))):
        kernel = build_under_tilelang(theirs, builder, 1, N, K, GROUP, **kwargs)
        if kernel is not None:
            out.append((label, kernel))
    return out


def torch_dequant_gemv(A, B_packed, Scale):
    """The peer: unpack the nibbles, scale them into an fp16 weight, then A @ W.T."""
    import torch
    N, K = B_packed.shape[0], B_packed.shape[1] * 2
    q = torch.stack((B_packed & 0xF, B_packed >> 4), dim=-1).view(N, K)
    W = (q.half() - 8) * Scale.repeat_interleave(GROUP, dim=1)[:, :K]
    return A @ W.T


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="dequant_gemv")
    parser.add_argument("--shapes", default=SHAPES, help="N x K, comma-separated")
    parser.add_argument("--fast", default=FAST, help="dequant_gemv_fast configs, "
                        "block_N x block_K x threads [x num_stages][s], comma-separated")
    parser.add_argument("--compile-only", action="store_true")
    add_arm_options(parser, rounds=5, pass_config=False)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    fast_configs = args.fast.split(",")
    if args.compile_only:
        for N, K in shapes:
            for label, kernel in kernels(N, K, fast_configs, target="sm_90a"):
                print(f"{N}x{K} {label}: {kernel.n_regs} registers, {kernel.n_spills} spills",
                      flush=True)
        return

    import torch
    theirs = example_under_tilelang("dequant_gemm")
    rows = []
    warm_gpu()
    for N, K in shapes:
        gen = torch.Generator(device="cuda").manual_seed(0)
        A = (torch.rand(1, K, device="cuda", generator=gen) * 2 - 1).half()
        B_packed = torch.randint(0, 256, (N, K // 2), device="cuda", generator=gen,
                                 dtype=torch.uint8)
        Scale = (torch.rand(N, -(-K // GROUP), device="cuda", generator=gen) * 0.015
                 + 0.005).half()
        nbytes = B_packed.numel() + Scale.numel() * 2 + A.numel() * 2
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ref = torch_dequant_gemv(A.float(), B_packed, Scale.float())
        cases = []
        for label, kernel in kernels(N, K, fast_configs, theirs=theirs):
            C = kernel(A, B_packed, Scale)
            err = float((C.float() - ref).norm() / ref.norm())
            cases.append((label, kernel, err))
        timers = [clean_timer(lambda: dst.copy_(src)),
                  clean_timer(lambda: torch_dequant_gemv(A, B_packed, Scale))]
        timers += [clean_timer(lambda k=k: k(A, B_packed, Scale)) for _, k, _ in cases]
        times = in_rounds(args.rounds, timers, args.settle)
        copy_ms, torch_ms = median(times[0]), median(times[1])
        copy_gbps = 2 * nbytes / copy_ms / 1e6
        for (label, kernel, err), t in zip(cases, times[2:]):
            ms = median(t)
            row = {"N": N, "K": K, "kernel": label, "us": ms * 1e3,
                   "gbps": nbytes / ms / 1e6, "copy_us": copy_ms * 1e3,
                   "copy_gbps": copy_gbps, "pct_copy": 100 * nbytes / ms / 1e6 / copy_gbps,
                   "torch_us": torch_ms * 1e3,
                   "vs_torch": median([p / x for p, x in zip(times[1], t)]),
                   "rel_error": err, "registers": getattr(kernel, "n_regs", None),
                   "spills": getattr(kernel, "n_spills", None),
                   "us_rounds": [x * 1e3 for x in t]}
            print(f"{N}x{K} {label}: {row['us']:.1f} us {row['gbps']:.0f} GB/s "
                  f"({row['pct_copy']:.0f}% of copy {copy_gbps:.0f} GB/s); torch "
                  f"{row['torch_us']:.1f} us ({row['vs_torch']:.2f}x); err {err:.1e}; "
                  f"regs {row['registers']}", flush=True)
            rows.append(row)
    columns = [("N x K", lambda r: f"{r['N']}x{r['K']}"), ("kernel", lambda r: r["kernel"]),
               ("us", lambda r: f"{r['us']:.1f}"), ("GB/s", lambda r: f"{r['gbps']:.0f}"),
               ("% of copy", lambda r: f"{r['pct_copy']:.0f}"),
               ("copy GB/s", lambda r: f"{r['copy_gbps']:.0f}"),
               ("torch us", lambda r: f"{r['torch_us']:.1f}"),
               ("ratio", lambda r: f"{r['vs_torch']:.2f}"),
               *ERROR_AND_REGISTERS]
    show_results(args.out, args.tag, rows, columns)


if __name__ == "__main__":
    main()
