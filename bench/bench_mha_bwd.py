"""MHA backward fp16 (examples/flash_attention_bwd.py: its three launches) beside the backward
of torch SDPA's flash and cuDNN backends, in one process on one GPU: medians of CUDA-event
timings, TFLOP/s (2.5x the forward's matrix-product FLOPs), ratios taken per round.

    python3 bench/bench_mha_bwd.py [--shapes 0,1] [--only 0,2] [--rounds 3]
                                   [--variant tl.disable_wgmma_batch_merge=1] [--tag ...]

Each kernel's gradients are checked against float32 ones computed in torch, one batch at a
time, on the same random inputs. Results: bench/mha_bwd.md.
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from common import (OUT, SDPA_COLUMNS, ClockLog, add_arm_options, cuda_median_ms,
                    in_rounds_with_clocks, sdpa_row, show_results, variant_arms,
                    warm_gpu)
from flash_attention import flash_attention_lse
from flash_attention_bwd import FAST_MATH, flash_attention_bwd
from tilecraft.carver.recommend import underlying
import tilecraft

SHAPES = [(8, 32, 4096, 128, False), (8, 32, 4096, 128, True), (8, 32, 4096, 64, True)]
CONFIGS = [dict(block_M=64, block_N=128, num_stages=2, threads=256),
           dict(block_M=64, block_N=64, num_stages=2, threads=128),
           dict(block_M=64, block_N=128, num_stages=3, threads=256)]


def grads32(q, k, v, do, causal):
    """float32 (dQ, dK, dV) on [batch, seq, heads, dim], one batch at a time."""
    out = [[], [], []]
    for b in range(q.shape[0]):
        qb, kb, vb = (x[b:b + 1].float().transpose(1, 2).requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            o = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=causal)
        for acc, g in zip(out, torch.autograd.grad(o, (qb, kb, vb),
                                                   do[b:b + 1].float().transpose(1, 2))):
            acc.append(g.transpose(1, 2))
    return [torch.cat(x) for x in out]


def sdpa_backward_timer(q, k, v, do, causal, backend):
    """A timer of torch's backward through SDPA with `backend` (its forward run once)."""
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    dot = do.transpose(1, 2)
    try:
        with sdpa_kernel(backend):
            o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    except RuntimeError as e:
        print("  sdpa", backend, "unavailable:", str(e).splitlines()[0])
        return lambda: float("nan")
    return lambda: cuda_median_ms(
        lambda: torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True), 3, 10, False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="mha_bwd")
    parser.add_argument("--shapes", default="", help="indices into SHAPES (default: all)")
    parser.add_argument("--only", default="", help="indices into CONFIGS (default: all)")
    add_arm_options(parser, rounds=3, pass_config=False)
    args = parser.parse_args()
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    configs = [CONFIGS[int(i)] for i in args.only.split(",")] if args.only else CONFIGS
    rows, clocks = [], ClockLog()
    warm_gpu()
    for B, H, S, D, causal in shapes:
        flop = 2.5 * 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16)
                       for _ in range(4))
        o, lse = flash_attention_lse(B, H, S, D, causal)(q, k, v)
        want = grads32(q, k, v, do, causal)
        cases = []
        for cfg in configs:
            for label, pass_configs in variant_arms(FAST_MATH, args.variant):
                kernel = tilecraft.compile(
                    underlying(flash_attention_bwd)(B, H, S, D, causal, **cfg),
                    out_idx=flash_attention_bwd.out_idx, pass_configs=pass_configs)
                got = kernel(q, k, v, o, do, lse)
                err = max(float((g.float() - w).norm() / w.norm()) for g, w in zip(got, want))
                cases.append((cfg, label, kernel, err))
        (flash, cudnn, *ours), (flash_mhz, cudnn_mhz, *our_mhz) = in_rounds_with_clocks(
            args.rounds, [sdpa_backward_timer(q, k, v, do, causal, SDPBackend.FLASH_ATTENTION),
                          sdpa_backward_timer(q, k, v, do, causal, SDPBackend.CUDNN_ATTENTION)] +
            [lambda kern=kernel: cuda_median_ms(lambda: kern(q, k, v, o, do, lse), 3, 10, False)
             for _, _, kernel, _ in cases], clocks, args.settle)
        for times, mhz, (cfg, label, kernel, err) in zip(ours, our_mhz, cases):
            rows.append(sdpa_row([B, H, S, D], causal, cfg, label, flop, times, flash, cudnn,
                                 err, kernel, (mhz, flash_mhz, cudnn_mhz)))
    show_results(args.out, args.tag, rows, SDPA_COLUMNS,
        notes=f"Backward only (ours: Delta + dQ zeroing, the key-tile loop, dQ conversion, "
              f"the two workspaces allocated at each call; "
              f"torch: autograd.grad through SDPA, its forward run once). Medians over "
              f"{args.rounds} rounds, each timing the peers and every config in turn after "
              f"{args.settle} s untimed; a ratio is the median of the per-round ratios. rel err: "
              "the largest of |g - g32| / |g32| over dQ, dK, dV against float32 torch.",
        clocks=clocks)


if __name__ == "__main__":
    main()
