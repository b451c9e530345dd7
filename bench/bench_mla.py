"""MLA decode fp16 (examples/mla_decode.py) beside the torch reference (einsum + softmax), in
one process on one GPU: batch 64, 128 heads, one KV head, dim 512 + rope 64 (ANCHORS.md).

    python bench/bench_mla.py [--kv 1024,4096] [--variant KEY=1] [--rounds 3] [--tag ...]
                              [--flush dirty|clean]
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
import tilecraft  # noqa: E402
from mla_decode import flash_mla_decode  # noqa: E402
from bench_gemm import (SETTLE_S, VS_TORCH_COLUMNS, in_rounds, row_vs_torch,  # noqa: E402
                        text_vs_torch, variant_arms, warm_gpu, write_results)
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402

B, H, D, PE = 64, 128, 512, 64
CONFIGS = [dict(block_N=64, block_H=64, num_stages=2, threads=256),
           dict(block_N=64, block_H=64, num_stages=1, threads=256)]


def mla_inputs(seqlen, batch=B, heads=H, dim=D, pe_dim=PE):
    """Random fp16 (Q, Q_pe, KV, K_pe) on the GPU, one KV head, in the example's layout."""
    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.float16)
    return (rand(batch, heads, dim), rand(batch, heads, pe_dim), rand(batch, seqlen, 1, dim),
            rand(batch, seqlen, 1, pe_dim))


def torch_mla(q, q_pe, kv, k_pe):
    """The reference the anchors time: scores by einsum, softmax in fp32, output by einsum."""
    scale = (D + PE) ** -0.5
    kv0, kpe0 = kv[:, :, 0], k_pe[:, :, 0]
    scores = (torch.einsum("bhd,bsd->bhs", q, kv0) + torch.einsum("bhd,bsd->bhs", q_pe, kpe0))
    p = torch.softmax(scores.float() * scale, dim=-1).to(q.dtype)
    return torch.einsum("bhs,bsd->bhd", p, kv0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--tag", default="mla_decode")
    parser.add_argument("--kv", default="1024,4096,8192")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                        help="also time every config compiled with these pass configs added "
                             "(KEY=1[,KEY2=1]; repeat for more arms), in the same rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=SETTLE_S,
                        help="seconds each timer runs untimed before its kept run (SETTLE_S)")
    parser.add_argument("--flush", choices=("dirty", "clean"), default="dirty",
                        help="how the L2 is emptied before each timed run: overwritten "
                             "(dirty lines the run writes back) or read (profiler.cuda_median_ms)")
    args = parser.parse_args()
    flush = True if args.flush == "dirty" else "clean"
    variants = variant_arms({tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True}, args.variant)
    rows = []
    warm_gpu()
    for S in (int(x) for x in args.kv.split(",")):
        flop = 2.0 * B * H * S * (D + PE) + 2.0 * B * H * S * D
        q, q_pe, kv, k_pe = mla_inputs(S)
        ref = torch_mla(q.float(), q_pe.float(), kv.float(), k_pe.float())
        cases = []
        for cfg in CONFIGS:
            for label, configs in variants:
                kernel = tilecraft.compile(underlying(flash_mla_decode)(B, H, 1, S, D, PE, **cfg),
                                           out_idx=[-1], pass_configs=configs)
                out = kernel(q, q_pe, kv, k_pe)
                cases.append((cfg, label, kernel,
                              float((out.float() - ref).norm() / ref.norm())))
        # Both timed from a cold L2 (the profiler's flush between runs): a KV-1024 call is
        # short enough that back-to-back timing would also count host launch time. Rounds
        # time the peer and every candidate in turn: clocks drift over a run.
        peer, *ours = in_rounds(args.rounds, [
            lambda: cuda_median_ms(lambda: torch_mla(q, q_pe, kv, k_pe), 3, 20, flush)] + [
            lambda kern=kernel: cuda_median_ms(lambda: kern(q, q_pe, kv, k_pe), 5, 30, flush)
            for _, _, kernel, _ in cases], args.settle)
        for times, (cfg, label, kernel, err) in zip(ours, cases):
            row = row_vs_torch(flop, times, peer, err, kernel, kv=S, config=cfg, variant=label,
                               shared_memory=kernel.shared_memory)
            rows.append(row)
            print(f"KV {S} {cfg} {label or '-'}: {text_vs_torch(row)}", flush=True)
    write_results(args.out, args.tag, rows, [
        ("KV", lambda r: str(r["kv"])), ("config", lambda r: str(r["config"])),
        ("variant", lambda r: r["variant"] or "-")] + VS_TORCH_COLUMNS,
        notes="ratio: the median over rounds of torch's time / ours, each round timing torch "
              "and every candidate in turn on a cold L2 (a 256 MiB buffer "
              f"{'overwritten' if args.flush == 'dirty' else 'read'} before each run), each "
              f"after {args.settle} s of running untimed (SETTLE_S); variant: that pass config "
              "added.")


if __name__ == "__main__":
    main()
