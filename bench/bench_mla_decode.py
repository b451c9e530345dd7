"""MLA decode fp16 (examples/mla_decode.py) beside the torch reference (einsum + softmax), in
one process on one GPU: batch 64, 128 heads, one KV head, dim 512 + rope 64 (ANCHORS.md).

    python3 bench/bench_mla_decode.py [--kv 1024,4096] [--variant KEY=1] [--rounds 3]
                                      [--flush dirty|clean] [--tag ...] [--out dir]

Results: bench/mla_decode.md.
"""
import argparse

from common import (OUT, VS_TORCH_COLUMNS, B, D, H, PE, add_arm_options, cuda_median_ms,
                    in_rounds, mla_inputs, row_vs_torch, text_vs_torch, torch_mla,
                    variant_arms, warm_gpu, write_results)
from mla_decode import flash_mla_decode
from tilecraft.carver.recommend import underlying
import tilecraft

CONFIGS = [dict(block_N=64, block_H=64, num_stages=2, threads=256),
           dict(block_N=64, block_H=64, num_stages=1, threads=256)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="mla_decode")
    parser.add_argument("--kv", default="1024,4096,8192")
    add_arm_options(parser, rounds=3, pass_config=False)
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
