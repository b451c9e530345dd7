"""Block-sparse attention (paper appendix O.5): the flash attention kernel of O.3 where a boolean
BlockMask says which (query tile, key tile) pairs are computed at all. The mask has layout
[batch, heads, num_q_blocks, num_k_blocks] with num_q_blocks = ceil(seq_len / block_M) and
num_k_blocks = ceil(seq_len / block_N), and the kernel reads it as BlockMask[b, h, q_block,
k_block]. (The figure in the paper indexes it as BlockMask[bz, bx, by, k], i.e. with the query
block before the head, which does not match the [batch, heads, ...] layout; here the head comes
first.) Every query row attends to the keys of its allowed tiles (and, when causal, only to keys
at or before it); a row that is left with no key at all gets an output of zero.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T

LOG2E = 1.44269504088896


def _kernel_parts(seq_len, dim, is_causal, block_M, block_N, dtype, accum_dtype):
    """The tiles and fragments of one query tile's block and the macro that folds one key tile
    k into its online softmax: shared by the boolean-mask and the listed-tiles forms."""
    scale = (1.0 / dim) ** 0.5 * LOG2E
    neg_inf = -T.infinity(accum_dtype)

    @T.macro
    def attend(Q, Q_shared, bx, by, bz, acc_o, scores_max, logsum):
        T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, neg_inf)

    @T.macro
    def key_tile(k, K, V, bx, by, bz, Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o,
                 scores_max, scores_max_prev, scores_scale, scores_sum, logsum):
        T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
        for i, j in T.Parallel(block_M, block_N):
            if is_causal:
                acc_s[i, j] = T.if_then_else(
                    bx * block_M + i >= k * block_N + j and k * block_N + j < seq_len,
                    0, neg_inf)
            else:
                acc_s[i, j] = T.if_then_else(k * block_N + j < seq_len, 0, neg_inf)
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
        T.copy(scores_max, scores_max_prev)
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        # A row may not have met an allowed key yet (its max is still -inf): rescale it by 1
        # and give its scores weight 0 instead of computing -inf - -inf.
        for i in T.Parallel(block_M):
            scores_scale[i] = T.if_then_else(
                scores_max[i] == neg_inf, 1,
                T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale))
        for i, j in T.Parallel(block_M, block_N):
            acc_s[i, j] = T.if_then_else(
                scores_max[i] == neg_inf, 0,
                T.exp2(acc_s[i, j] * scale - scores_max[i] * scale))
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= scores_scale[i]
        T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
        T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def finish(Output, O_shared, bx, by, bz, acc_o, logsum):
        for i, j in T.Parallel(block_M, dim):  # rows with no allowed key: zero
            acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
        T.copy(acc_o, O_shared)
        T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    @T.macro
    def allocate():
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
        return (Q_shared, K_shared, V_shared, O_shared, acc_s, acc_s_cast, acc_o, scores_max,
                scores_max_prev, scores_scale, scores_sum, logsum)

    return allocate, attend, key_tile, finish


@tilecraft.jit(out_idx=[-1], pass_configs={tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def blocksparse_attention(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64,
                          num_stages=1, threads=128, dtype="float16", accum_dtype="float"):
    shape = [batch, seq_len, heads, dim]
    mask_shape = [batch, heads, T.ceildiv(seq_len, block_M), T.ceildiv(seq_len, block_N)]
    allocate, attend, key_tile, finish = _kernel_parts(seq_len, dim, is_causal, block_M,
                                                       block_N, dtype, accum_dtype)

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             BlockMask: T.Tensor(mask_shape, "bool"), Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            (Q_shared, K_shared, V_shared, O_shared, acc_s, acc_s_cast, acc_o, scores_max,
             scores_max_prev, scores_scale, scores_sum, logsum) = allocate()
            tiles = (Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max,
                     scores_max_prev, scores_scale, scores_sum, logsum)
            attend(Q, Q_shared, bx, by, bz, acc_o, scores_max, logsum)
            loop_range = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                          if is_causal else T.ceildiv(seq_len, block_N))
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                if BlockMask[bz, by, bx, k]:  # skip key tiles the mask leaves out
                    key_tile(k, K, V, bx, by, bz, *tiles)
            finish(Output, O_shared, bx, by, bz, acc_o, logsum)

    return main


@tilecraft.jit(out_idx=[-1], pass_configs={tilecraft.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def blocksparse_attention_listed(batch, heads, seq_len, dim, is_causal, block_M=128,
                                 block_N=128, num_stages=2, threads=256, dtype="float16",
                                 accum_dtype="float"):
    """The same attention with the mask as torch's flex_attention BlockMask keeps it: for each
    query tile, KVNum[b, h, m] key tiles listed in KVIndices[b, h, m, :KVNum] (int32; the
    rest of the row is not read). The loop runs over the listed tiles only, so skipped tiles
    cost nothing, and its copies run ahead by TMA or cp.async like any key tile's."""
    shape = [batch, seq_len, heads, dim]
    num_m, num_n = T.ceildiv(seq_len, block_M), T.ceildiv(seq_len, block_N)
    allocate, attend, key_tile, finish = _kernel_parts(seq_len, dim, is_causal, block_M,
                                                       block_N, dtype, accum_dtype)

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             KVNum: T.Tensor([batch, heads, num_m], "int32"),
             KVIndices: T.Tensor([batch, heads, num_m, num_n], "int32"),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(num_m, heads, batch, threads=threads) as (bx, by, bz):
            (Q_shared, K_shared, V_shared, O_shared, acc_s, acc_s_cast, acc_o, scores_max,
             scores_max_prev, scores_scale, scores_sum, logsum) = allocate()
            tiles = (Q_shared, K_shared, V_shared, acc_s, acc_s_cast, acc_o, scores_max,
                     scores_max_prev, scores_scale, scores_sum, logsum)
            attend(Q, Q_shared, bx, by, bz, acc_o, scores_max, logsum)
            for n in T.Pipelined(KVNum[bz, by, bx], num_stages=num_stages):
                key_tile(KVIndices[bz, by, bx, n], K, V, bx, by, bz, *tiles)
            finish(Output, O_shared, bx, by, bz, acc_o, logsum)

    return main


def listed_tiles(BlockMask, is_causal=False, block_M=None, block_N=None):
    """(KVNum, KVIndices) of a boolean [batch, heads, num_m, num_n] block mask, as
    flex_attention's BlockMask stores it: the allowed key tiles of each query tile in increasing
    order (with is_causal, only those a causal row of the tile can reach)."""
    mask = np.asarray(BlockMask, dtype=bool).copy()
    if is_causal:
        m = np.arange(mask.shape[2])[:, None]
        n = np.arange(mask.shape[3])[None, :]
        mask &= n * block_N <= (m + 1) * block_M - 1
    order = np.argsort(~mask, axis=-1, kind="stable")
    return mask.sum(-1).astype(np.int32), order.astype(np.int32)


def ref_program(Q, K, V, BlockMask, is_causal, block_M, block_N):
    """Dense attention in float64 with the block mask expanded to a token mask."""
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    seq_len = q.shape[1]
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    rows, cols = np.arange(seq_len) // block_M, np.arange(seq_len) // block_N
    allowed = BlockMask[:, :, rows[:, None], cols[None, :]]
    if is_causal:
        allowed = allowed & np.tril(np.ones((seq_len, seq_len), dtype=bool))
    scores = np.where(allowed, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores - np.where(np.isfinite(row_max), row_max, 0))
    denom = probs.sum(axis=-1, keepdims=True)
    probs = np.divide(probs, denom, out=np.zeros_like(probs), where=denom > 0)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


def run(batch=1, heads=2, seq_len=100, dim=32, is_causal=False, density=0.5, block_M=32,
        block_N=32, seed=0, atol=1e-2, rtol=1e-2, **config):
    """Build the kernel, run it on random inputs and a random block mask, check it against
    ref_program; returns the max abs error."""
    kernel = blocksparse_attention(batch, heads, seq_len, dim, is_causal, block_M=block_M,
                                   block_N=block_N, **config)
    rng = np.random.default_rng(seed)
    shape = (batch, seq_len, heads, dim)
    Q, K, V = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    mask_shape = (batch, heads, -(-seq_len // block_M), -(-seq_len // block_N))
    BlockMask = rng.random(mask_shape) < density
    out = kernel(Q, K, V, BlockMask).astype(np.float64)
    ref = ref_program(Q, K, V, BlockMask, is_causal, block_M, block_N)
    np.testing.assert_allclose(out, ref, atol=atol, rtol=rtol)
    return float(np.abs(out - ref).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=100)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--density", type=float, default=0.5, help="fraction of tiles kept")
    parser.add_argument("--block_M", type=int, default=32)
    parser.add_argument("--block_N", type=int, default=32)
    args = parser.parse_args()
    err = run(args.batch, args.heads, args.seq_len, args.dim, args.is_causal, args.density,
              args.block_M, args.block_N)
    print(f"blocksparse_attention (causal={args.is_causal}): ok (max abs error {err:.2e})")
