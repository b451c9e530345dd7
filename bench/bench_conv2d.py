"""2-D convolution (examples/conv2d.py: implicit GEMM on NHWC, the im2col tile filled by
T.c2d_im2col) beside cuDNN, in one process on one GPU, at the paper's eight shapes (table 16,
batch 128, float16).

    python3 bench/bench_conv2d.py [--shapes 0,1,...] [--configs default,bmxbnxbkxsxt,...]
                                  [--variant KEY=1] [--rounds 3] [--tag ...] [--out dir]

Peers, timed in the same rounds: torch.nn.functional.conv2d (cuDNN, benchmark mode on) on
channels_last views of the same NHWC memory, and on NCHW copies; where TileLang is installed,
the same example source compiled by TileLang at the first config (vs TileLang). ratio: median
over rounds of cuDNN's time / ours; every timer starts from a cold L2. A config is block_M x
block_N x block_K x num_stages x threads of `convolution`, or "default": the example's own
choice for the shape. --variant also times each config compiled with those pass configs.

Results: bench/conv2d.md.
"""
import argparse
from statistics import median

from common import (OUT, add_arm_options, build_under_tilelang, clean_timer,
                    example_under_tilelang, in_rounds, show_results, variant_arms,
                    warm_gpu)
import conv2d
import tilecraft

# N, C, H, W, F, K, stride, padding (dilation 1)
SHAPES = [(128, 2048, 7, 7, 512, 1, 1, 0), (128, 512, 7, 7, 2048, 1, 1, 0),
          (128, 512, 14, 14, 512, 3, 2, 1), (128, 512, 7, 7, 512, 3, 1, 1),
          (128, 256, 14, 14, 256, 3, 1, 1), (128, 1024, 14, 14, 256, 1, 1, 0),
          (128, 512, 28, 28, 128, 1, 1, 0), (128, 64, 56, 56, 64, 1, 1, 0)]
CONFIGS = "default,128x256x64x3x256,128x64x64x3x128"


def tile(text: str) -> dict:
    """The example's tile arguments for a config "MxNxKxSTAGESxTHREADS"; none for "default"
    (the example's own choice for the shape)."""
    if text == "default":
        return {}
    return dict(zip(("block_M", "block_N", "block_K", "num_stages", "threads"),
                    (int(v) for v in text.split("x"))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="conv2d")
    parser.add_argument("--shapes", default=",".join(str(i) for i in range(len(SHAPES))))
    parser.add_argument("--configs", default=CONFIGS)
    add_arm_options(parser, rounds=3, pass_config=False)
    args = parser.parse_args()
    import torch
    torch.backends.cudnn.benchmark = True
    theirs = example_under_tilelang("conv2d")
    warm_gpu()
    rows = []
    for index in (int(x) for x in args.shapes.split(",")):
        N, C, H, W, F, K, stride, pad = SHAPES[index]
        gen = torch.Generator(device="cuda").manual_seed(index)
        data = (torch.rand(N, H, W, C, device="cuda", generator=gen) * 2 - 1).half()
        weight = (torch.rand(K, K, C, F, device="cuda", generator=gen) * 2 - 1).half()
        x_cl = data.permute(0, 3, 1, 2)                  # NCHW view, channels_last memory
        w_cl = weight.permute(3, 2, 0, 1)                # FCKK view of KKCF memory
        w_cl = w_cl.contiguous(memory_format=torch.channels_last)
        x_nchw, w_nchw = x_cl.contiguous(), w_cl.contiguous()
        ref = torch.nn.functional.conv2d(x_cl.float(), w_cl.float(), stride=stride,
                                         padding=pad).permute(0, 2, 3, 1)
        cases = []
        for text, (label, configs) in ((t, arm) for t in args.configs.split(",")
                                       for arm in variant_arms({}, args.variant)):
            kernel = tilecraft.compile(conv2d.convolution.__wrapped__(
                N, C, H, W, F, K, K, stride, pad, 1, **tile(text)), out_idx=[-1],
                pass_configs=configs)
            flat_w = weight.reshape(K * K * C, F)
            out = kernel(data, flat_w)
            err = float((out.float().reshape(ref.shape) - ref).norm() / ref.norm())
            cases.append((f"{text} {label}".strip(), kernel, flat_w, err))
        # TileLang builds the first config, "default" as the recommender chose it for ours.
        their_kernel = build_under_tilelang(
            theirs, "convolution", N, C, H, W, F, K, K, stride, pad, 1,
            **conv2d.tile_for((N, C, H, W, F, K, K, stride, pad, 1),
                              **tile(args.configs.split(",")[0])))
        if their_kernel is None:
            theirs = None
        else:
            out = their_kernel(data, weight.reshape(K * K * C, F))
            their_err = float((out.float().reshape(ref.shape) - ref).norm() / ref.norm())
            print(f"conv{index} TileLang {args.configs.split(',')[0]}: err {their_err:.1e}")
        timers = [clean_timer(lambda: torch.nn.functional.conv2d(x_cl, w_cl, stride=stride,
                                                                 padding=pad)),
                  clean_timer(lambda: torch.nn.functional.conv2d(x_nchw, w_nchw, stride=stride,
                                                                 padding=pad))]
        timers += [clean_timer(lambda k=k, w=w: k(data, w)) for _, k, w, _ in cases]
        if their_kernel is not None:
            timers.append(clean_timer(lambda: their_kernel(data, cases[0][2])))
        times = in_rounds(args.rounds, timers, args.settle)
        flop = 2 * N * ((H + 2 * pad - K) // stride + 1) ** 2 * F * C * K * K
        theirs_t = times[2 + len(cases)] if their_kernel is not None else None
        for (text, kernel, _, err), t in zip(cases, times[2:]):
            row = {"shape": index, "config": text, "us": median(t) * 1e3,
                   "tflops": flop / median(t) / 1e9,
                   "cudnn_cl_us": median(times[0]) * 1e3, "cudnn_nchw_us": median(times[1]) * 1e3,
                   "vs_cl": median([p / x for p, x in zip(times[0], t)]),
                   "vs_nchw": median([p / x for p, x in zip(times[1], t)]),
                   "vs_tilelang": (median([p / x for p, x in zip(theirs_t, t)])
                                   if theirs_t else float("nan")),
                   "tilelang_us": median(theirs_t) * 1e3 if theirs_t else float("nan"),
                   "rel_error": err, "registers": kernel.n_regs,
                   "tile": "x".join(str(v) for v in conv2d.tile_for(
                       (N, C, H, W, F, K, K, stride, pad, 1), **tile(text.split()[0])).values())}
            print(f"conv{index} {text} ({row['tile']}): {row['us']:.1f} us, cuDNN cl {row['cudnn_cl_us']:.1f} "
                  f"({row['vs_cl']:.2f}x), nchw {row['cudnn_nchw_us']:.1f} "
                  f"({row['vs_nchw']:.2f}x), TileLang {row['vs_tilelang']:.2f}x, err {err:.1e}",
                  flush=True)
            rows.append(row)
    columns = [("shape", lambda r: f"conv{r['shape']}"), ("config", lambda r: r["config"]),
               ("us", lambda r: f"{r['us']:.1f}"), ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
               ("cuDNN NHWC us", lambda r: f"{r['cudnn_cl_us']:.1f}"),
               ("vs NHWC", lambda r: f"{r['vs_cl']:.2f}"),
               ("cuDNN NCHW us", lambda r: f"{r['cudnn_nchw_us']:.1f}"),
               ("vs NCHW", lambda r: f"{r['vs_nchw']:.2f}"),
               ("vs TileLang", lambda r: f"{r['vs_tilelang']:.2f}"),
               ("rel err", lambda r: f"{r['rel_error']:.1e}"),
               ("regs", lambda r: str(r["registers"]))]
    show_results(args.out, args.tag, rows, columns)


if __name__ == "__main__":
    main()
