"""FlashMLA decoding (paper appendix O.4): multi-head latent attention for one new token per
sequence. The query has a latent part Q [batch, heads, dim] and a rotary part
Q_pe [batch, heads, pe_dim]; the cache holds the compressed KV [batch, seqlen_kv, kv_heads, dim]
(used both as keys and as values) and the rotary keys K_pe [batch, seqlen_kv, kv_heads, pe_dim].
The score of head h against position s is (Q[h] . KV[s] + Q_pe[h] . K_pe[s]) / sqrt(dim + pe_dim)
and the output is softmax(scores) @ KV. Each block serves block_H query heads that share one KV
head, so the two score GEMMs (latent and rotary) accumulate into one acc_s tile with the
FullCol warp policy; an online softmax (running max and sum, base-2 exponentials) folds the KV
blocks together. seqlen_kv need not be a multiple of block_N: the tail columns start at -inf.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T


@tilecraft.jit(out_idx=[-1], pass_configs={tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def flash_mla_decode(batch, heads, kv_heads, seqlen_kv, dim, pe_dim, block_N=64, block_H=64,
                     num_stages=2, threads=256, dtype="float16", accum_dtype="float32"):
    scale = (1.0 / (dim + pe_dim)) ** 0.5 * 1.44269504  # log2(e): softmax via exp2
    kv_group_num = heads // kv_heads
    block_H = min(block_H, kv_group_num)  # the heads of one block share a KV head
    assert heads % kv_heads == 0 and kv_group_num % block_H == 0

    @T.prim_func
    def main(
            Q: T.Tensor((batch, heads, dim), dtype),
            Q_pe: T.Tensor((batch, heads, pe_dim), dtype),
            KV: T.Tensor((batch, seqlen_kv, kv_heads, dim), dtype),
            K_pe: T.Tensor((batch, seqlen_kv, kv_heads, pe_dim), dtype),
            Output: T.Tensor((batch, heads, dim), dtype),
    ):
        with T.Kernel(batch, heads // block_H, threads=threads) as (bx, by):
            Q_shared = T.alloc_shared((block_H, dim), dtype)
            Q_pe_shared = T.alloc_shared((block_H, pe_dim), dtype)
            KV_shared = T.alloc_shared((block_N, dim), dtype)
            K_pe_shared = T.alloc_shared((block_N, pe_dim), dtype)
            S_shared = T.alloc_shared((block_H, block_N), dtype)
            O_shared = T.alloc_shared((block_H, dim), dtype)
            acc_s = T.alloc_fragment((block_H, block_N), accum_dtype)
            acc_o = T.alloc_fragment((block_H, dim), accum_dtype)
            scores_max = T.alloc_fragment((block_H,), accum_dtype)
            scores_max_prev = T.alloc_fragment((block_H,), accum_dtype)
            scores_scale = T.alloc_fragment((block_H,), accum_dtype)
            scores_sum = T.alloc_fragment((block_H,), accum_dtype)
            logsum = T.alloc_fragment((block_H,), accum_dtype)

            cur_kv_head = by // (kv_group_num // block_H)
            T.use_swizzle(10)
            T.copy(Q[bx, by * block_H:(by + 1) * block_H, :], Q_shared)
            T.copy(Q_pe[bx, by * block_H:(by + 1) * block_H, :], Q_pe_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            for k in T.Pipelined(T.ceildiv(seqlen_kv, block_N), num_stages=num_stages):
                T.copy(KV[bx, k * block_N:(k + 1) * block_N, cur_kv_head, :], KV_shared)
                T.copy(K_pe[bx, k * block_N:(k + 1) * block_N, cur_kv_head, :], K_pe_shared)
                for i, j in T.Parallel(block_H, block_N):  # -inf past the end of the cache
                    acc_s[i, j] = T.if_then_else(k * block_N + j < seqlen_kv, 0,
                                                 -T.infinity(accum_dtype))
                T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullCol)
                T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullCol)
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_H):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                T.copy(acc_s, S_shared)
                for i in T.Parallel(block_H):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                for i, j in T.Parallel(block_H, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.gemm(S_shared, KV_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bx, by * block_H:(by + 1) * block_H, :])

    return main


def ref_program(Q, Q_pe, KV, K_pe):
    """Softmax attention in float32; query head h reads KV head h // (heads // kv_heads)."""
    heads, kv_heads = Q.shape[1], KV.shape[2]
    group = heads // kv_heads
    kv = np.repeat(KV.astype(np.float32), group, axis=2)  # [b, s, heads, dim]
    k_pe = np.repeat(K_pe.astype(np.float32), group, axis=2)
    scores = (np.einsum("bhd,bshd->bhs", Q.astype(np.float32), kv) +
              np.einsum("bhd,bshd->bhs", Q_pe.astype(np.float32), k_pe))
    scores /= np.sqrt(Q.shape[-1] + Q_pe.shape[-1])
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhs,bshd->bhd", p, kv)


def run(batch=2, heads=16, kv_heads=1, seqlen_kv=200, dim=64, pe_dim=32, seed=0, **config):
    """Build the kernel, run it on random inputs, check it against ref_program and return the
    largest absolute error."""
    kernel = flash_mla_decode(batch, heads, kv_heads, seqlen_kv, dim, pe_dim, **config)
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((batch, heads, dim)).astype(np.float16)
    Q_pe = rng.standard_normal((batch, heads, pe_dim)).astype(np.float16)
    KV = rng.standard_normal((batch, seqlen_kv, kv_heads, dim)).astype(np.float16)
    K_pe = rng.standard_normal((batch, seqlen_kv, kv_heads, pe_dim)).astype(np.float16)
    out = kernel(Q, Q_pe, KV, K_pe)
    ref = ref_program(Q, Q_pe, KV, K_pe)
    assert out.shape == ref.shape and out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=1e-2, atol=1e-2)
    return float(np.abs(out.astype(np.float32) - ref).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv_heads", type=int, default=1)
    parser.add_argument("--seqlen_kv", type=int, default=200)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--pe_dim", type=int, default=32)
    parser.add_argument("--block_n", type=int, default=64)
    parser.add_argument("--block_h", type=int, default=64)
    args = parser.parse_args()
    err = run(args.batch, args.heads, args.kv_heads, args.seqlen_kv, args.dim, args.pe_dim,
              block_N=args.block_n, block_H=args.block_h)
    print(f"mla_decode: ok (max abs error {err:.2e})")
