"""Attention with sinks: causal multi-head attention forward on [batch, seq, heads, dim] tensors
where every head h also has a learned sink logit Sinks[h]. The sink acts like one extra key with
that logit and a zero value: it enters the softmax denominator, so a query can put part of its
attention "nowhere", but it adds nothing to the output,
    out[q] = sum_k exp(s[q, k]) v[k] / (exp(Sinks[h]) + sum_k exp(s[q, k])).
Optionally each query only sees a sliding window of the last `window_size` keys (k > q -
window_size). With grouped-query attention (kv_heads < heads, as gpt-oss runs it) K and V hold
kv_heads heads and query head h reads K/V head h // (heads // kv_heads): the heads of a group
read the same K/V tiles (no repeated copies of K and V). The kernel is the flash attention of paper appendix O.3; it starts each row's
online softmax as if the sink key had already been seen (running max = the sink logit, running
sum = 1), which also keeps rows whose first key tiles are fully masked well defined.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T

LOG2E = 1.44269504088896


@tilecraft.jit(out_idx=[-1], pass_configs={tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def attention_sink(batch, heads, seq_len, dim, window_size=None, block_M=128, block_N=128,
                   num_stages=None, threads=256, dtype="float16", accum_dtype="float",
                   kv_heads=None):
    """num_stages: the K / V tiles in flight; by default three at head dims up to 64 (a third
    stage lets the compiler overlap one tile's softmax with the next tile's products; at 128
    the three stages of 128-row tiles would not fit in shared memory), else two."""
    if num_stages is None:
        num_stages = 3 if dim <= 64 else 2
    kv_heads = heads if kv_heads is None else kv_heads
    assert heads % kv_heads == 0, "the query heads must split evenly into kv_heads groups"
    group = heads // kv_heads
    sm_scale = (1.0 / dim) ** 0.5
    scale = sm_scale * LOG2E  # raw scores q.k times scale are base-2 logits
    shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, kv_heads, dim]
    neg_inf = -T.infinity(accum_dtype)

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(kv_shape, dtype),
             V: T.Tensor(kv_shape, dtype), Sinks: T.Tensor([heads], accum_dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            kv_head = by // group
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            O_shared = T.alloc_shared([block_M, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            # The sink as an already-seen key: max = its logit in raw-score units, sum = 1.
            for i in T.Parallel(block_M):
                scores_max[i] = Sinks[by] / sm_scale
            T.fill(logsum, 1)
            # Key tiles from the start of the window (or 0) up to the tile's causal limit.
            start = (T.max(0, T.floordiv(bx * block_M - window_size + 1, block_N))
                     if window_size is not None else 0)
            end = T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))

            for k in T.Pipelined(start, end, num_stages=num_stages):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, kv_head, :], K_shared)
                for i, j in T.Parallel(block_M, block_N):
                    q_idx = bx * block_M + i
                    k_idx = k * block_N + j
                    if window_size is not None:
                        acc_s[i, j] = T.if_then_else(
                            q_idx >= k_idx and k_idx > q_idx - window_size and k_idx < seq_len,
                            0, neg_inf)
                    else:
                        acc_s[i, j] = T.if_then_else(q_idx >= k_idx and k_idx < seq_len, 0,
                                                     neg_inf)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                # Online softmax; the running max is finite from the start (the sink), so a
                # fully masked row of this tile just contributes exp2(-inf) = 0.
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(V[bz, k * block_N:(k + 1) * block_N, kv_head, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]  # logsum includes the sink's share
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


def ref_program(Q, K, V, Sinks, window_size=None):
    """Causal attention in float64 with one extra zero-value key per head holding the sink
    (K and V with fewer heads than Q: each serves heads // kv_heads query heads)."""
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    batch, seq_len, heads, _ = q.shape
    k, v = (np.repeat(x, heads // x.shape[2], axis=2) for x in (k, v))
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    rows, cols = np.arange(seq_len)[:, None], np.arange(seq_len)[None, :]
    allowed = cols <= rows
    if window_size is not None:
        allowed &= cols > rows - window_size
    scores = np.where(allowed, scores, -np.inf)
    sink = np.broadcast_to(Sinks.astype(np.float64)[None, :, None, None],
                           (batch, heads, seq_len, 1))
    logits = np.concatenate([scores, sink], axis=-1)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs[..., :-1], v)


def run(batch=1, heads=2, seq_len=100, dim=32, window_size=None, seed=0, atol=1e-2, rtol=1e-2,
        kv_heads=None, **config):
    """Build the kernel, run it on random inputs and sink logits, check it against ref_program;
    returns the max abs error."""
    kv_heads = heads if kv_heads is None else kv_heads
    kernel = attention_sink(batch, heads, seq_len, dim, window_size, kv_heads=kv_heads, **config)
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((batch, seq_len, heads, dim)).astype(np.float16)
    K, V = (rng.standard_normal((batch, seq_len, kv_heads, dim)).astype(np.float16)
            for _ in range(2))
    Sinks = (2.0 * rng.standard_normal(heads)).astype(np.float32)
    out = kernel(Q, K, V, Sinks).astype(np.float64)
    ref = ref_program(Q, K, V, Sinks, window_size)
    np.testing.assert_allclose(out, ref, atol=atol, rtol=rtol)
    return float(np.abs(out - ref).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--kv_heads", type=int, default=None,
                        help="K/V heads (grouped-query attention; default: --heads)")
    parser.add_argument("--seq_len", type=int, default=100)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--window_size", type=int, default=None,
                        help="sliding window length (default: full causal attention)")
    parser.add_argument("--block_M", type=int, default=128)
    parser.add_argument("--block_N", type=int, default=128)
    args = parser.parse_args()
    err = run(args.batch, args.heads, args.seq_len, args.dim, args.window_size,
              kv_heads=args.kv_heads, block_M=args.block_M, block_N=args.block_N)
    print(f"attention_sink (window={args.window_size}): ok (max abs error {err:.2e})")
