"""Vertical-slash sparse attention fp16 (examples/vertical_slash_sparse_attention.py) beside
dense causal attention through torch SDPA's cuDNN backend and the same example source compiled
by TileLang (where it is installed), in one process on one GPU: medians of alternating rounds.

    python3 bench/bench_vertical_slash.py [--shapes 8192x1000x600,...] [--configs ...]
                                          [--rounds 5] [--out dir]
    python3 bench/bench_vertical_slash.py --tilelang-script EXAMPLES/minference/\
example_vertical_slash_sparse_attn.py [--shapes ...]

The second form times TileLang's own vertical-slash example (its hand warp-specialized kernel,
its index conversion) as compiled by tilecraft and by TileLang, beside the Triton kernel the
script carries and this repository's example at its default, on the same indices.

The paper's table 18 shapes: batch 1, one head, head dim 64, S 8k-64k with its counts of
vertical columns and slash diagonals, drawn as MInference's estimate selects them
(minference_indices: the first tokens and a few stripes of columns; the local band of
diagonals and a few runs of far ones). configs: block_M x block_N x num_stages x threads,
the first the example's default. TileLang compiles the first config. "share" is the part of
the causal matrix the kernel's tiles and columns cover. Results: bench/vertical_slash.md.
"""
import argparse
from statistics import median

import numpy as np
import torch
from torch.nn.attention import SDPBackend

from common import (OUT, add_arm_options, build_under_tilelang, clean_timer,
                    example_under_tilelang, in_rounds, show_results, tilelang_script_twice,
                    warm_gpu)
from vertical_slash_sparse_attention import (minference_indices, sparsity_mask,
                                             vertical_slash_attention)

SHAPES = "8192x1000x600,16384x1000x200,32768x800x600,65536x1000x600"
CONFIGS = "64x64x2x128,128x64x2x256,64x64x1x128,64x64x3x128"
B, H, D = 1, 1, 64   # batch, heads, head dim of every shape (the paper's table 18)


def reference(q, k, v, mask):
    """float32 attention of q, k, v (1, S, 1, D) under a boolean [S, S] token mask; rows with no
    key are zero."""
    qh, kh, vh = (x[0, :, 0].float() for x in (q, k, v))
    scores = (qh @ kh.T / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return probs @ vh


def shape_inputs(text: str):
    """(S, vertical count, slash count, (q, k, v) as [B, S, H, D], vertical and slash indices)
    of one shape "S x vertical x slash": random inputs, MInference-shaped indices."""
    S, nv, ns = (int(x) for x in text.split("x"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    qkv = tuple(torch.randn(B, S, H, D, device="cuda", dtype=torch.float16, generator=gen)
                for _ in range(3))
    vertical, slash = minference_indices(np.random.default_rng(0), B, H, S, nv, ns)
    return S, nv, ns, qkv, torch.from_numpy(vertical).cuda(), torch.from_numpy(slash).cuda()


def script_arms(args):
    """TileLang's example script under both compilers (module docstring), in rounds."""
    ours_mod, theirs_mod = tilelang_script_twice(args.tilelang_script)
    rows = []
    warm_gpu()
    for text in args.shapes.split(","):
        S, nv, ns, (q, k, v), vi, si = shape_inputs(text)
        # the script takes [B, H, S, D]
        qh, kh, vh = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        arms = [("tilecraft", ours_mod.vertical_slash_sparse_attention(qh, kh, vh, vi, si))]
        theirs = build_under_tilelang(theirs_mod, "vertical_slash_sparse_attention",
                                      qh, kh, vh, vi, si)
        if theirs is not None:
            arms.append(("TileLang", theirs))
        ref = arms[0][1](True).float()   # the script's Triton kernel
        errors = [float((run(False).float() - ref).norm() / ref.norm()) for _, run in arms]
        example = vertical_slash_attention(B, H, S, D, nv, ns)
        timers = [clean_timer(lambda run=run: run(False)) for _, run in arms]
        timers += [clean_timer(lambda: arms[0][1](True)),
                   clean_timer(lambda: example(q, k, v, vi, si))]
        times = in_rounds(args.rounds, timers, args.settle)
        for i, (label, _) in enumerate(arms):
            t = times[i]
            row = {"S": S, "vertical": nv, "slash": ns, "compiler": label, "ms": median(t),
                   "vs_tilecraft": median([a / b for a, b in zip(times[0], t)]),
                   "vs_triton": median([a / b for a, b in zip(times[-2], t)]),
                   "vs_example": median([a / b for a, b in zip(times[-1], t)]),
                   "triton_ms": median(times[-2]), "example_ms": median(times[-1]),
                   "rel_error": errors[i], "ms_rounds": t}
            print(f"S{S} v{nv} s{ns} {label}: {row['ms'] * 1e3:.1f} us; tilecraft's time / "
                  f"this {row['vs_tilecraft']:.2f}; Triton {row['triton_ms'] * 1e3:.1f} us; "
                  f"our example {row['example_ms'] * 1e3:.1f} us; err vs Triton "
                  f"{errors[i]:.1e}", flush=True)
            rows.append(row)
    columns = [("S", lambda r: str(r["S"])), ("vertical / slash",
                                              lambda r: f"{r['vertical']} / {r['slash']}"),
               ("compiler", lambda r: r["compiler"]), ("us", lambda r: f"{r['ms'] * 1e3:.1f}"),
               ("tilecraft / this", lambda r: f"{r['vs_tilecraft']:.2f}"),
               ("Triton us", lambda r: f"{r['triton_ms'] * 1e3:.1f}"),
               ("our example us", lambda r: f"{r['example_ms'] * 1e3:.1f}"),
               ("rel err vs Triton", lambda r: f"{r['rel_error']:.1e}")]
    show_results(args.out, args.tag + "_tilelang_script", rows, columns)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="vertical_slash")
    parser.add_argument("--shapes", default=SHAPES, help="S x vertical x slash, comma-separated")
    parser.add_argument("--configs", default=CONFIGS)
    parser.add_argument("--tilelang-script", default=None,
                        help="TileLang's example script, timed under both compilers")
    add_arm_options(parser, rounds=5, pass_config=False)
    args = parser.parse_args()
    if args.tilelang_script:
        return script_arms(args)
    theirs = example_under_tilelang("vertical_slash_sparse_attention")
    rows = []
    warm_gpu()
    for text in args.shapes.split(","):
        S, nv, ns, (q, k, v), vi, si = shape_inputs(text)
        arms = []  # (label, kernel, (block_M, block_N))
        for config in args.configs.split(","):
            bm, bn, stages, threads = (int(x) for x in config.split("x"))
            arms.append((config, vertical_slash_attention(B, H, S, D, nv, ns, block_M=bm,
                                                          block_N=bn, num_stages=stages,
                                                          threads=threads), (bm, bn)))
        bm, bn, stages, threads = (int(x) for x in args.configs.split(",")[0].split("x"))
        kernel = build_under_tilelang(theirs, "vertical_slash_attention", B, H, S, D, nv, ns,
                                      block_M=bm, block_N=bn, num_stages=stages,
                                      threads=threads)
        if kernel is not None:
            arms.append(("TileLang " + args.configs.split(",")[0], kernel, (bm, bn)))
        else:
            theirs = None
        # What each tiling attends (a slash takes every key of the tiles it crosses) and the
        # float32 reference under it; S x S masks only up to 32k.
        refs, share = {}, float("nan")
        for _, _, tiles in arms:
            if S <= 32768 and tiles not in refs:
                attended = sparsity_mask(vi.cpu().numpy(), si.cpu().numpy(), S, *tiles)
                mask = torch.from_numpy(attended[0, 0]).cuda()
                if not refs:
                    share = float(mask.sum()) / (S * (S + 1) / 2)
                refs[tiles] = reference(q, k, v, mask)
                del mask
        errors = []
        for _, kernel, tiles in arms:
            out = kernel(q, k, v, vi, si)
            ref = refs.get(tiles)
            errors.append(float((out[0, :, 0].float() - ref).norm() / ref.norm())
                          if ref is not None else float("nan"))
        qs, ks, vs = (x.transpose(1, 2).contiguous() for x in (q, k, v))

        def cudnn():
            from torch.nn.attention import sdpa_kernel
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs,
                                                                        is_causal=True)
        timers = [clean_timer(cudnn)]
        timers += [clean_timer(lambda kernel=kernel: kernel(q, k, v, vi, si))
                   for _, kernel, _ in arms]
        times = in_rounds(args.rounds, timers, args.settle)
        tilelang_ms = median(times[-1]) if theirs is not None else float("nan")
        for (label, kernel, _), t, err in zip(arms, times[1:], errors):
            row = {"S": S, "vertical": nv, "slash": ns, "share": share, "kernel": label,
                   "ms": median(t), "cudnn_ms": median(times[0]),
                   "vs_cudnn": median([p / x for p, x in zip(times[0], t)]),
                   "vs_tilelang": (median([p / x for p, x in zip(times[-1], t)])
                                   if theirs is not None else float("nan")),
                   "tilelang_ms": tilelang_ms, "rel_error": err, "ms_rounds": t}
            print(f"S{S} v{nv} s{ns} ({share:.0%} of causal) {label}: {row['ms'] * 1e3:.1f} us;"
                  f" dense cuDNN {row['cudnn_ms'] * 1e3:.1f} us ({row['vs_cudnn']:.2f}x); "
                  f"vs TileLang {row['vs_tilelang']:.2f}x; err {err:.1e}", flush=True)
            rows.append(row)
    columns = [("S", lambda r: str(r["S"])), ("vertical / slash",
                                              lambda r: f"{r['vertical']} / {r['slash']}"),
               ("share", lambda r: f"{r['share']:.0%}"), ("kernel", lambda r: r["kernel"]),
               ("us", lambda r: f"{r['ms'] * 1e3:.1f}"),
               ("dense cuDNN us", lambda r: f"{r['cudnn_ms'] * 1e3:.1f}"),
               ("vs cuDNN", lambda r: f"{r['vs_cudnn']:.2f}"),
               ("vs TileLang", lambda r: f"{r['vs_tilelang']:.2f}"),
               ("rel err", lambda r: f"{r['rel_error']:.1e}")]
    show_results(args.out, args.tag, rows, columns)


if __name__ == "__main__":
    main()
