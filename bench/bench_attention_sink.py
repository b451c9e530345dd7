"""Attention with sinks fp16 (examples/attention_sink.py, grouped-query, causal) beside torch
SDPA's cuDNN and flash backends computing the same causal attention without the sink, in one
process on one GPU: medians of alternating rounds.

    python3 bench/bench_attention_sink.py [--seqs 1024,2048,4096,8192] [--configs ...]
                                          [--window 0] [--rounds 5] [--out dir]

The paper's table 19 shapes: batch 1, 64 query heads over 8 K/V heads, head dim 64, causal.
SDPA is given K and V repeated to 64 heads beforehand (untimed): the speed a user compares
with, since its cuDNN backend takes no grouped K/V. configs: block_M x block_N x num_stages x
threads, the first the example's default; --window gives every config a sliding window (SDPA
then still runs full causal attention). FLOP/s count the causal half (or the window).
Results: bench/attention_sink.md.
"""
import argparse
from statistics import median

import torch
from torch.nn.attention import SDPBackend

from common import OUT, add_arm_options, clean_timer, in_rounds, show_results, warm_gpu
from attention_sink import attention_sink

CONFIGS = "128x128x3x256,128x128x2x256,64x64x1x128,128x64x2x256,128x64x2x128,128x128x2x128,128x64x3x256"


def sdpa(backend, q, k, v):
    from torch.nn.attention import sdpa_kernel

    def call():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return call


def reference(q, k, v, sinks, window):
    """float32 attention with the sink, heads of q (B, S, H, D) over grouped k, v."""
    H, S, D = q.shape[2], q.shape[1], q.shape[3]
    kk, vv = (x.repeat_interleave(H // x.shape[2], dim=2) for x in (k, v))
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, kk, vv))
    scores = qt @ kt.transpose(-1, -2) / D ** 0.5
    rows = torch.arange(S, device="cuda")[:, None]
    cols = torch.arange(S, device="cuda")[None, :]
    keep = cols <= rows
    if window:
        keep &= cols > rows - window
    scores = scores.masked_fill(~keep, float("-inf"))
    sink = sinks.float()[None, :, None, None].expand(q.shape[0], H, S, 1)
    probs = torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1]
    return (probs @ vt).transpose(1, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="attention_sink")
    parser.add_argument("--seqs", default="1024,2048,4096,8192")
    parser.add_argument("--configs", default=CONFIGS)
    parser.add_argument("--window", type=int, default=0)
    add_arm_options(parser, rounds=5, pass_config=False)
    args = parser.parse_args()
    B, H, KV, D = 1, 64, 8, 64
    window = args.window or None
    rows = []
    warm_gpu()
    for S in (int(x) for x in args.seqs.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, S, H, D, device="cuda", dtype=torch.float16, generator=gen)
        k, v = (torch.randn(B, S, KV, D, device="cuda", dtype=torch.float16, generator=gen)
                for _ in range(2))
        sinks = 2 * torch.randn(H, device="cuda", generator=gen)
        ref = reference(q, k, v, sinks, window)
        qs, ks, vs = (x.repeat_interleave(H // x.shape[2], dim=2).transpose(1, 2).contiguous()
                      for x in (q, k, v))
        kernels = []
        for text in args.configs.split(","):
            bm, bn, stages, threads = (int(x) for x in text.split("x"))
            try:
                kernel = attention_sink(B, H, S, D, window, block_M=bm, block_N=bn,
                                        num_stages=stages, threads=threads, kv_heads=KV)
                out = kernel(q, k, v, sinks)
            except Exception as e:  # a config the compiler refuses: say so, time the rest
                print(f"S{S} {text}: not built: {str(e).splitlines()[0]}", flush=True)
                continue
            err = float((out.float() - ref).norm() / ref.norm())
            kernels.append((text, kernel, err))
        timers = [clean_timer(sdpa(SDPBackend.CUDNN_ATTENTION, qs, ks, vs)),
                  clean_timer(sdpa(SDPBackend.FLASH_ATTENTION, qs, ks, vs))]
        timers += [clean_timer(lambda kernel=kernel: kernel(q, k, v, sinks))
                   for _, kernel, _ in kernels]
        times = in_rounds(args.rounds, timers, args.settle)
        kept = S * (S + 1) // 2 if not window else sum(min(i + 1, window) for i in range(S))
        flop = 4 * B * H * D * kept
        for (text, kernel, err), t in zip(kernels, times[2:]):
            row = {"S": S, "config": text, "window": window or 0, "ms": median(t),
                   "tflops": flop / median(t) / 1e9, "cudnn_ms": median(times[0]),
                   "flash_ms": median(times[1]),
                   "vs_cudnn": median([p / x for p, x in zip(times[0], t)]),
                   "vs_flash": median([p / x for p, x in zip(times[1], t)]),
                   "rel_error": err, "registers": kernel.n_regs, "ms_rounds": t}
            print(f"S{S} {text}: {row['ms'] * 1e3:.1f} us {row['tflops']:.0f} TFLOP/s; cuDNN "
                  f"{row['cudnn_ms'] * 1e3:.1f} us ({row['vs_cudnn']:.2f}x), flash "
                  f"{row['flash_ms'] * 1e3:.1f} us ({row['vs_flash']:.2f}x); err {err:.1e}; "
                  f"regs {kernel.n_regs}", flush=True)
            rows.append(row)
    columns = [("S", lambda r: str(r["S"])), ("config", lambda r: r["config"]),
               ("ours us", lambda r: f"{r['ms'] * 1e3:.1f}"),
               ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
               ("cuDNN us", lambda r: f"{r['cudnn_ms'] * 1e3:.1f}"),
               ("vs cuDNN", lambda r: f"{r['vs_cudnn']:.2f}"),
               ("flash us", lambda r: f"{r['flash_ms'] * 1e3:.1f}"),
               ("vs flash", lambda r: f"{r['vs_flash']:.2f}"),
               ("rel err", lambda r: f"{r['rel_error']:.1e}"),
               ("regs", lambda r: str(r["registers"]))]
    show_results(args.out, args.tag, rows, columns)


if __name__ == "__main__":
    main()
