"""Block-sparse attention fp16 (examples/blocksparse_attention.py) beside torch's
flex_attention on the same mask, in one process on one GPU: medians of alternating rounds.

    python3 bench/bench_blocksparse_attention.py [--shape-list "B,H,S,D;..."]
                                                 [--sparsity 50,90] [--rounds 5] [--out dir]

The mask: 128 x 128 tiles (flex_attention's default BLOCK_SIZE), each kept with probability
1 - sparsity, the diagonal tiles always (so no query row is left without keys); causal runs
also drop the keys after each query. Ours: `blocksparse_attention_listed` at its defaults
(the mask as (KVNum, KVIndices), the loop over the listed tiles only) and the boolean-mask
form at 128 x 128 (it visits every tile and skips the masked ones). The peer: flex_attention
compiled by torch.compile, its BlockMask made from the same lists: the tiles a causal row
crosses carry the causal mask_mod, the others are full blocks (no per-element mask), which is
flex's fastest form; q, k, v in its (B, H, S, D) layout. FLOP/s count the kept tiles only.
Results: bench/blocksparse_attention.md.
"""
import argparse
from statistics import median

import torch

from common import OUT, add_arm_options, clean_timer, in_rounds, show_results, warm_gpu
from blocksparse_attention import blocksparse_attention, blocksparse_attention_listed, listed_tiles

TILE = 128
SHAPES = "8,32,2048,128;8,32,4096,128;8,32,8192,128;64,64,2048,128"


def block_masks(B, H, S, sparsity, causal, gen):
    """The boolean tile mask [B, H, n, n], and (KVNum, KVIndices) as the kernel reads them."""
    n = -(-S // TILE)
    mask = torch.rand(B, H, n, n, device="cuda", generator=gen) >= sparsity / 100
    mask[..., torch.arange(n), torch.arange(n)] = True
    num, indices = (torch.from_numpy(x).cuda()
                    for x in listed_tiles(mask.cpu().numpy(), causal, TILE, TILE))
    return mask, num, indices


def flex_block_mask(num, indices, S, causal):
    """flex_attention's BlockMask of the listed tiles: full blocks where every (query, key)
    pair is kept, the diagonal tiles of a causal mask partial with the causal mask_mod."""
    from torch.nn.attention.flex_attention import BlockMask
    n = indices.shape[-1]
    listed = torch.arange(n, device="cuda") < num[..., None]
    if not causal:
        return BlockMask.from_kv_blocks(torch.zeros_like(num), indices, num, indices,
                                        BLOCK_SIZE=TILE, seq_lengths=(S, S))
    m = torch.arange(n, device="cuda")[:, None]
    diagonal = listed & (indices == m)
    full = listed & (indices < m)

    def lists(keep):
        order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)
        return keep.sum(-1).to(torch.int32), torch.gather(indices, -1, order).to(torch.int32)

    def causal_mod(b, h, q, k):
        return q >= k

    part_num, part_idx = lists(diagonal)
    full_num, full_idx = lists(full)
    return BlockMask.from_kv_blocks(part_num, part_idx, full_num, full_idx, BLOCK_SIZE=TILE,
                                    mask_mod=causal_mod, seq_lengths=(S, S))


def reference_one_head(q, k, v, mask, causal):
    """float32 attention of batch 0, head 0 with the tile mask expanded (q, k, v: B, S, H, D)."""
    S, D = q.shape[1], q.shape[-1]
    keep = mask[0, 0].repeat_interleave(TILE, 0).repeat_interleave(TILE, 1)[:S, :S]
    if causal:
        keep &= torch.ones(S, S, device="cuda", dtype=torch.bool).tril()
    qh, kh, vh = (x[0, :, 0].float() for x in (q, k, v))
    scores = (qh @ kh.T / D ** 0.5).masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ vh


def kept_pairs(mask, S, causal) -> int:
    """(query, key) pairs attended: 4 * D FLOP each (two products of D multiply-adds). Each
    kept tile counts the pairs it holds (fewer in the last, ragged tiles and, causal, on the
    diagonal)."""
    n = mask.shape[-1]
    pairs = torch.ones(S, S, device="cuda")
    if causal:
        pairs = pairs.tril()
    pad = n * TILE - S
    per_tile = torch.nn.functional.pad(pairs, (0, pad, 0, pad)).view(n, TILE, n, TILE)
    per_tile = per_tile.sum((1, 3))
    return int((mask.float() * per_tile).sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="blocksparse_attention")
    parser.add_argument("--shape-list", default=SHAPES, help="B,H,S,D separated by ';'")
    parser.add_argument("--sparsity", default="50,90", help="percent of tiles skipped")
    add_arm_options(parser, rounds=5, pass_config=False)
    args = parser.parse_args()
    from torch.nn.attention.flex_attention import flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    warm_gpu()
    for text in args.shape_list.split(";"):
        B, H, S, D = (int(x) for x in text.split(","))
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16, generator=gen)
                   for _ in range(3))
        qf, kf, vf = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        for causal in (False, True):
            listed = blocksparse_attention_listed(B, H, S, D, causal)
            masked = blocksparse_attention(B, H, S, D, causal, block_M=TILE, block_N=TILE,
                                           num_stages=2, threads=256)
            for sparsity in (int(x) for x in args.sparsity.split(",")):
                mask, num, indices = block_masks(B, H, S, sparsity, causal, gen)
                bm = flex_block_mask(num, indices, S, causal)
                ref = reference_one_head(q, k, v, mask, causal)
                arms = {"listed": lambda: listed(q, k, v, num, indices),
                        "mask": lambda: masked(q, k, v, mask)}
                theirs = flex(qf, kf, vf, block_mask=bm).transpose(1, 2)
                errors = {}
                for name, arm in arms.items():
                    out = arm()
                    assert not torch.isnan(out).any(), name
                    errors[name] = float((out[0, :, 0].float() - ref).norm() / ref.norm())
                    errors[name + " vs flex"] = float((out.float() - theirs.float()).norm()
                                                      / theirs.float().norm())
                flex_err = float((theirs[0, :, 0].float() - ref).norm() / ref.norm())
                timers = [clean_timer(lambda: flex(qf, kf, vf, block_mask=bm))]
                timers += [clean_timer(arm) for arm in arms.values()]
                times = in_rounds(args.rounds, timers, args.settle)
                flop = 4 * D * kept_pairs(mask, S, causal)
                for name, t in zip(arms, times[1:]):
                    row = {"B": B, "H": H, "S": S, "D": D, "causal": causal,
                           "sparsity": sparsity, "kernel": name, "ms": median(t),
                           "tflops": flop / median(t) / 1e9, "flex_ms": median(times[0]),
                           "flex_tflops": flop / median(times[0]) / 1e9,
                           "vs_flex": median([p / x for p, x in zip(times[0], t)]),
                           "rel_error": errors[name], "vs_flex_error": errors[name + " vs flex"],
                           "flex_error": flex_err, "ms_rounds": t}
                    print(f"B{B} H{H} S{S} D{D} causal={causal} {sparsity}% {name}: "
                          f"{row['ms']:.3f} ms {row['tflops']:.0f} TFLOP/s; flex "
                          f"{row['flex_ms']:.3f} ms ({row['vs_flex']:.2f}x); err "
                          f"{row['rel_error']:.1e} (flex {flex_err:.1e})", flush=True)
                    rows.append(row)
    columns = [("B x H x S x D", lambda r: f"{r['B']}x{r['H']}x{r['S']}x{r['D']}"),
               ("causal", lambda r: "yes" if r["causal"] else "no"),
               ("skipped", lambda r: f"{r['sparsity']}%"), ("kernel", lambda r: r["kernel"]),
               ("ours ms", lambda r: f"{r['ms']:.3f}"),
               ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
               ("flex ms", lambda r: f"{r['flex_ms']:.3f}"),
               ("flex TFLOP/s", lambda r: f"{r['flex_tflops']:.0f}"),
               ("vs flex", lambda r: f"{r['vs_flex']:.2f}"),
               ("rel err", lambda r: f"{r['rel_error']:.1e}")]
    show_results(args.out, args.tag, rows, columns)


if __name__ == "__main__":
    main()
