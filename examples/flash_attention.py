"""Flash attention forward (paper appendix O.3): multi-head attention softmax(Q K^T / sqrt(d)) V
on [batch, seq, heads, dim] tensors, computed one block_M-row query tile per thread block. The
key/value sequence is streamed through shared memory in block_N tiles (T.Pipelined) and the
softmax is done online: a running row maximum and row sum are kept in registers, and exponentials
use T.exp2 with log2(e) folded into the scale. `is_causal` is a compile-time flag; key columns at
or beyond seq_len are masked with -inf, so seq_len need not be a multiple of the tile sizes.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T

LOG2E = 1.44269504088896


FAST_MATH = {tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True}


@tilecraft.jit(out_idx=[-1], pass_configs=FAST_MATH)
def flash_attention(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1,
                    threads=128, dtype="float16", accum_dtype="float"):
    return attention_forward(batch, heads, seq_len, dim, is_causal, block_M, block_N, num_stages,
                             threads, dtype, accum_dtype, with_lse=False)


@tilecraft.jit(out_idx=[-2, -1], pass_configs=FAST_MATH)
def flash_attention_lse(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64,
                        num_stages=1, threads=128, dtype="float16", accum_dtype="float"):
    """The forward for training: also returns LSE [batch, heads, seq_len] (float32), each
    query row's log2 of the sum of exp2(score * scale), what flash_attention_bwd needs."""
    return attention_forward(batch, heads, seq_len, dim, is_causal, block_M, block_N, num_stages,
                             threads, dtype, accum_dtype, with_lse=True)


def attention_forward(batch, heads, seq_len, dim, is_causal, block_M, block_N, num_stages,
                      threads, dtype, accum_dtype, with_lse):
    scale = (1.0 / dim) ** 0.5 * LOG2E  # softmax scale, in base 2
    shape = [batch, seq_len, heads, dim]

    @T.macro
    def forward(Q, K, V, Output, LSE):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
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
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))
            # A causal query tile only needs the key tiles up to its own last row.
            loop_range = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                          if is_causal else T.ceildiv(seq_len, block_N))

            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
                # Start the scores at 0 where a key may be attended to and at -inf elsewhere;
                # the gemm then accumulates Q K^T on top. Key tile 0 always keeps key 0, so
                # no row's running maximum stays -inf.
                for i, j in T.Parallel(block_M, block_N):
                    if is_causal:
                        acc_s[i, j] = T.if_then_else(
                            (bx * block_M + i >= k * block_N + j) and (k * block_N + j < seq_len),
                            0, -T.infinity(accum_dtype))
                    else:
                        acc_s[i, j] = T.if_then_else(k * block_N + j < seq_len, 0,
                                                     -T.infinity(accum_dtype))
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                # Online softmax: new running max, rescale what was accumulated so far.
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)  # folds in the old max
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

                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            # Rows past seq_len in the last query tile are dropped by the bounds-checked copy.
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])
            if LSE is not None:
                for i in T.Parallel(block_M):
                    logsum[i] = T.log2(logsum[i]) + scores_max[i] * scale
                T.copy(logsum, LSE[bz, by, bx * block_M:(bx + 1) * block_M])

    if with_lse:
        @T.prim_func
        def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
                 Output: T.Tensor(shape, dtype),
                 LSE: T.Tensor([batch, heads, seq_len], accum_dtype)):
            forward(Q, K, V, Output, LSE)
    else:
        @T.prim_func
        def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
                 Output: T.Tensor(shape, dtype)):
            forward(Q, K, V, Output, None)
    return main


def ref_program(Q, K, V, is_causal):
    """Dense attention in float64 on [batch, seq, heads, dim] inputs."""
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    if is_causal:
        seq_q, seq_k = scores.shape[-2:]
        allowed = np.tril(np.ones((seq_q, seq_k), dtype=bool))
        scores = np.where(allowed, scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


def run(batch=1, heads=2, seq_len=100, dim=32, is_causal=False, seed=0, atol=1e-2, rtol=1e-2,
        **config):
    """Build the kernel, run it on random inputs, check it against ref_program; returns the max
    abs error."""
    kernel = flash_attention(batch, heads, seq_len, dim, is_causal, **config)
    rng = np.random.default_rng(seed)
    shape = (batch, seq_len, heads, dim)
    Q, K, V = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    out = kernel(Q, K, V).astype(np.float64)
    ref = ref_program(Q, K, V, is_causal)
    np.testing.assert_allclose(out, ref, atol=atol, rtol=rtol)
    return float(np.abs(out - ref).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=100)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--block_M", type=int, default=64)
    parser.add_argument("--block_N", type=int, default=64)
    args = parser.parse_args()
    err = run(args.batch, args.heads, args.seq_len, args.dim, args.is_causal,
              block_M=args.block_M, block_N=args.block_N)
    print(f"flash_attention (causal={args.is_causal}): ok (max abs error {err:.2e})")
