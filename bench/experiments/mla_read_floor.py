"""How fast this GPU's DRAM can stream the bytes MLA decode reads, measured with kernels that
read them the way the MLA kernel does (TMA tiles through a warp-specialized ring of shared
memory) and compute next to nothing, beside a torch reduction over the same bytes and the MLA
kernel itself, each on a cold L2 under both of the profiler's flushes.

Readers (all B64, KV dim 512 + 64 in the example's layout, fp16):
  mla-like   grid (64, 2): both head-group blocks of a batch read its KV and their own query
             (64 heads), N stages of 64 x (512 + 64) tiles, as the MLA kernel does
  distinct   grid (64, 2): the two blocks of a batch each read their own half of its KV
  stagger s  the second block of a batch starts s tiles later in its KV and wraps around
  noquery    mla-like without the query loads (more stages fit); "pairs in one GPC": the two
             blocks of a batch launched as a cluster (a source patch, no multicast); "pairs
             multicast": the compiler's TMA multicast over such clusters
  one group  grid (64,): one block per batch reads all of its KV (no second reader)
and, for what one launch costs on its own, the mla-like reader over a single tile and torch's
one-element add.

    python3 bench/experiments/mla_read_floor.py [--kv 1024] [--rounds 3]

Results: bench/mla_decode.md.
"""
import argparse
import os
import sys
from statistics import median

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import (B, D, H, OUT, PE, SETTLE_S, cuda_median_ms, in_rounds,  # noqa: E402
                    mla_inputs, torch_mla, warm_gpu, write_results)
from mla_decode import flash_mla_decode  # noqa: E402
import tilecraft  # noqa: E402
import tilecraft.backends.cuda.codegen.cuda as cg  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv", default="1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="mla_decode_read_floor")
    return parser.parse_args()


def compiled(func, pair=False, multicast=False):
    """func compiled for this GPU; pair: its grid's y-neighbours launched as clusters of two
    (one GPC) by a patch of the source; multicast: the compiler's TMA multicast over them."""
    original = cg.emit_cuda

    def patched(lowered):
        src, names = original(lowered)
        return src.replace("__launch_bounds__(256, 1) ", "__launch_bounds__(256, 1) "
                           "__cluster_dims__(1, 2, 1) ", 1), names
    cg.emit_cuda = patched if pair else original
    try:
        return tilecraft.compile(func, out_idx=[-1],
                                 pass_configs={"tl.enable_tma_multicast": multicast})
    finally:
        cg.emit_cuda = original


def reader(seqlen, groups, stages, query, block_N=64, block_H=64, split=1, stagger=0, **how):
    """A kernel streaming KV [B, seqlen, 1, D] and K_pe tiles (and, with query, each block's
    64-head slice of Q and Q_pe) through shared memory; each consumer thread adds one element
    per tile so the loads stay live. split > 1 gives each of `split` blocks its own part of a
    batch's sequence instead of letting `groups` blocks share it."""
    per_block = seqlen // split

    @T.prim_func
    def main(Q: T.Tensor((B, H, D), "float16"), Q_pe: T.Tensor((B, H, PE), "float16"),
             KV: T.Tensor((B, seqlen, 1, D), "float16"),
             K_pe: T.Tensor((B, seqlen, 1, PE), "float16"),
             Out: T.Tensor((B, groups * split, block_N), "float32")):
        with T.Kernel(B, groups * split, threads=128) as (bx, by):
            KV_shared = T.alloc_shared((block_N, D), "float16")
            K_pe_shared = T.alloc_shared((block_N, PE), "float16")
            acc = T.alloc_fragment((block_N,), "float32")
            T.fill(acc, 0)
            if query:
                Q_shared = T.alloc_shared((block_H, D), "float16")
                Q_pe_shared = T.alloc_shared((block_H, PE), "float16")
                T.copy(Q[bx, by * block_H:(by + 1) * block_H, :], Q_shared)
                T.copy(Q_pe[bx, by * block_H:(by + 1) * block_H, :], Q_pe_shared)
            start = (by % split) * per_block
            n_tiles = T.ceildiv(per_block, block_N)
            for kk in T.Pipelined(n_tiles, num_stages=stages):
                k = (kk + by * stagger) % n_tiles
                T.copy(KV[bx, start + k * block_N:start + (k + 1) * block_N, 0, :], KV_shared)
                T.copy(K_pe[bx, start + k * block_N:start + (k + 1) * block_N, 0, :],
                       K_pe_shared)
                for i in T.Parallel(block_N):
                    acc[i] += T.cast(KV_shared[i, kk % D], "float32") \
                        + T.cast(K_pe_shared[i, kk % PE], "float32")
            if query:
                for i in T.Parallel(block_N):
                    acc[i] += T.cast(Q_shared[i, 0], "float32") \
                        + T.cast(Q_pe_shared[i, 1], "float32")
            T.copy(acc, Out[bx, by, :])
    return compiled(main, **how)


def arms(seqlen):
    """[(name, kernel, reads the query)] of the readers."""
    return [("mla-like, 2 stages", reader(seqlen, 2, 2, True), True),
            ("mla-like, 2 stages, pairs in one GPC", reader(seqlen, 2, 2, True, pair=True), True),
            ("distinct, 2 stages", reader(seqlen, 1, 2, True, split=2), True),
            ("noquery, 3 stages", reader(seqlen, 2, 3, False), False),
            ("noquery, 3 stages, stagger 2", reader(seqlen, 2, 3, False, stagger=2), False),
            ("noquery, 3 stages, pairs in one GPC", reader(seqlen, 2, 3, False, pair=True),
             False),
            ("noquery, 3 stages, pairs multicast", reader(seqlen, 2, 3, False, multicast=True),
             False),
            ("distinct noquery, 3 stages", reader(seqlen, 1, 3, False, split=2), False),
            ("one group noquery (64 blocks), 3 stages", reader(seqlen, 1, 3, False), False)]


def main():
    args = parse_args()
    os.environ["TILECRAFT_DISABLE_CACHE"] = "1"  # the patched sources must not be cached
    warm_gpu()
    rows = []
    for S in (int(x) for x in args.kv.split(",")):
        q, q_pe, kv, k_pe = mla_inputs(S)
        nbytes = sum(t.numel() * 2 for t in (q, q_pe, kv, k_pe))
        kv_bytes = (kv.numel() + k_pe.numel()) * 2
        flat = torch.randn(nbytes // 2, device="cuda", dtype=torch.float16)
        mla = tilecraft.compile(underlying(flash_mla_decode)(B, H, 1, S, D, PE), out_idx=[-1],
                                pass_configs={"tl.enable_fast_math": True})
        ref = torch_mla(q.float(), q_pe.float(), kv.float(), k_pe.float())
        err = float((mla(q, q_pe, kv, k_pe).float() - ref).norm() / ref.norm())
        assert err < 1e-2, err
        readers = arms(S)
        short, short_in, one = reader(64, 2, 2, True), mla_inputs(64), flat[:1].clone()
        for name, kernel, _ in readers:  # the readers must read what they claim to
            got = kernel(q, q_pe, kv, k_pe)
            assert torch.isfinite(got).all() and got.abs().sum() > 0, name
        for flush in ("dirty", "clean"):
            how = True if flush == "dirty" else "clean"
            timers = [("torch reference", nbytes, lambda: cuda_median_ms(
                          lambda: torch_mla(q, q_pe, kv, k_pe), 3, 20, how)),
                      ("MLA kernel", nbytes, lambda: cuda_median_ms(
                          lambda: mla(q, q_pe, kv, k_pe), 5, 30, how)),
                      ("torch sum fp16 -> fp32", nbytes, lambda: cuda_median_ms(
                          lambda: flat.sum(dtype=torch.float32), 5, 30, how))]
            timers += [(name, nbytes if query else kv_bytes,
                        lambda k=k: cuda_median_ms(lambda: k(q, q_pe, kv, k_pe), 5, 30, how))
                       for name, k, query in readers]
            timers += [("one tile per block (launch cost)", 0, lambda: cuda_median_ms(
                           lambda: short(*short_in), 5, 30, how)),
                       ("torch one-element add (launch cost)", 0, lambda: cuda_median_ms(
                           lambda: one.add_(1), 5, 30, how))]
            times = in_rounds(args.rounds, [t for *_, t in timers], SETTLE_S)
            for (name, read, _), ts in zip(timers, times):
                us = median(ts) * 1e3
                rows.append(dict(kv=S, flush=flush, arm=name, us=us, mb=read / 1e6,
                                 tbps=read / (us * 1e-6) / 1e12,
                                 vs_torch=median(p / t for p, t in zip(times[0], ts))))
                print(f"KV {S} {flush:5s} {name:28s} {us:7.1f} us  "
                      f"{rows[-1]['tbps']:.2f} TB/s  torch/this {rows[-1]['vs_torch']:.2f}",
                      flush=True)
    columns = [("KV", lambda r: str(r["kv"])), ("flush", lambda r: r["flush"]),
               ("arm", lambda r: r["arm"]), ("us", lambda r: f"{r['us']:.1f}"),
               ("MB read", lambda r: f"{r['mb']:.1f}"), ("MB / time, TB/s", lambda r: f"{r['tbps']:.2f}"),
               ("torch reference / this", lambda r: f"{r['vs_torch']:.2f}")]
    print(write_results(args.out, args.tag, rows, columns,
                        "Medians over rounds of CUDA-event timings on a cold L2; every arm "
                        "reads the MLA kernel's input bytes (the readers' KV and query "
                        "loads as described in bench/experiments/mla_read_floor.py)."))


if __name__ == "__main__":
    main()
