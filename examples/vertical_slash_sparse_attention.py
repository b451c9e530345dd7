"""Vertical-slash sparse attention (the MInference pattern, paper section 5.2): causal attention
in which every (batch, head) attends only to a few key columns ("vertical" lines) and a few
diagonals ("slash" lines) of the attention matrix.

Index format, per (batch, head):
  VerticalIndex[b, h, :]  int32 key positions in [0, seq_len), all distinct (any order).
  SlashIndex[b, h, :]     int32 diagonal offsets q - k in [0, seq_len) (0 is the main diagonal;
                          repeats are harmless).
Like MInference, slashes are computed tile-wise: for the query tile m (rows [m*block_M,
(m+1)*block_M)) every key tile n (columns [n*block_N, (n+1)*block_N)) that a slash diagonal
crosses is computed densely. Vertical columns that fall outside those tiles are gathered from
global memory block_N at a time. So query q attends to key k exactly when k <= q and either
key tile k // block_N is crossed by a slash within query tile q // block_M, or k is a vertical
index. A row with nothing to attend to gets an output of zero.

Per query tile the kernel first marks the crossed key tiles (a T.Parallel over slashes), then
compacts them and the remaining vertical columns into lists in shared memory with T.alloc_var
counters, and finally runs the online-softmax loop over both lists.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T

LOG2E = 1.44269504088896


@tilecraft.jit(out_idx=[-1])
def vertical_slash_attention(batch, heads, seq_len, dim, num_vertical, num_slash, block_M=64,
                             block_N=64, num_stages=2, threads=128, dtype="float16",
                             accum_dtype="float"):
    scale = (1.0 / dim) ** 0.5 * LOG2E
    shape = [batch, seq_len, heads, dim]
    num_k_blocks = T.ceildiv(seq_len, block_N)
    tiles_per_slash = T.ceildiv(block_M, block_N) + 1  # key tiles one slash can cross
    col_capacity = T.ceildiv(num_vertical, block_N) * block_N
    neg_inf = -T.infinity(accum_dtype)

    @T.macro
    def softmax_step(acc_s, acc_s_cast, V_shared, acc_o, scores_max, scores_max_prev,
                     scores_scale, scores_sum, logsum):
        # acc_s holds masked scores (-inf where not attended); fold them into the running
        # softmax. Rows whose max is still -inf have seen no key: weight 0, rescale 1.
        T.copy(scores_max, scores_max_prev)
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        for i in T.Parallel(block_M):
            scores_scale[i] = T.if_then_else(
                scores_max[i] == neg_inf, 1,
                T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale))
        for i, j in T.Parallel(block_M, block_N):
            acc_s[i, j] = T.if_then_else(scores_max[i] == neg_inf, 0,
                                         T.exp2(acc_s[i, j] * scale - scores_max[i] * scale))
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= scores_scale[i]
        T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             VerticalIndex: T.Tensor([batch, heads, num_vertical], "int32"),
             SlashIndex: T.Tensor([batch, heads, num_slash], "int32"),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            O_shared = T.alloc_shared([block_M, dim], dtype)
            tile_hit = T.alloc_shared([num_k_blocks], "int32")
            tile_rank = T.alloc_shared([num_k_blocks], "int32")
            tile_list = T.alloc_shared([num_k_blocks], "int32")
            col_hit = T.alloc_shared([num_vertical], "int32")
            col_rank = T.alloc_shared([num_vertical], "int32")
            col_list = T.alloc_shared([col_capacity], "int32")
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)
            q_start = bx * block_M
            # 1. Mark key tiles crossed by a slash s: its keys q - s span [lo, lo + block_M - 1].
            T.fill(tile_hit, 0)
            for s, t in T.Parallel(num_slash, tiles_per_slash):
                lo = q_start - SlashIndex[bz, by, s]
                n = T.floordiv(lo, block_N) + t
                if n >= 0 and n < num_k_blocks and n * block_N <= lo + block_M - 1:
                    tile_hit[n] = 1
            # 2. Compact them into tile_list, and the other causal vertical columns into
            #    col_list, in order: an entry's slot is the count of kept entries up to it
            #    (a prefix sum), so every thread places its entries at once.
            for v in T.Parallel(num_vertical):
                col = VerticalIndex[bz, by, v]
                col_hit[v] = T.if_then_else(
                    col < q_start + block_M and tile_hit[col // block_N] == 0, 1, 0)
            T.cumsum(tile_hit, tile_rank)
            T.cumsum(col_hit, col_rank)
            for n in T.Parallel(num_k_blocks):
                if tile_hit[n] != 0:
                    tile_list[tile_rank[n] - 1] = n
            for v in T.Parallel(num_vertical):
                if col_hit[v] != 0:
                    col_list[col_rank[v] - 1] = VerticalIndex[bz, by, v]
            tile_count = tile_rank[num_k_blocks - 1]
            col_count = col_rank[num_vertical - 1]
            T.copy(Q[bz, q_start:q_start + block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, neg_inf)
            # 3. Dense causal attention over the slash tiles.
            for idx in T.Pipelined(tile_count, num_stages=num_stages):
                k_start = tile_list[idx] * block_N
                T.copy(K[bz, k_start:k_start + block_N, by, :], K_shared)
                T.copy(V[bz, k_start:k_start + block_N, by, :], V_shared)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.if_then_else(q_start + i >= k_start + j, 0, neg_inf)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                softmax_step(acc_s, acc_s_cast, V_shared, acc_o, scores_max, scores_max_prev,
                             scores_scale, scores_sum, logsum)
            # 4. The gathered vertical columns, block_N at a time (padding slots masked).
            for c in T.Pipelined(T.ceildiv(col_count, block_N), num_stages=num_stages):
                for j, d in T.Parallel(block_N, dim):
                    valid = c * block_N + j < col_count
                    col = col_list[c * block_N + j]
                    K_shared[j, d] = T.if_then_else(valid, K[bz, col, by, d], 0)
                    V_shared[j, d] = T.if_then_else(valid, V[bz, col, by, d], 0)
                for i, j in T.Parallel(block_M, block_N):
                    # Padding slots past col_count hold no column: never read them.
                    acc_s[i, j] = T.if_then_else(c * block_N + j < col_count, T.if_then_else(
                        q_start + i >= col_list[c * block_N + j], 0, neg_inf), neg_inf)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                softmax_step(acc_s, acc_s_cast, V_shared, acc_o, scores_max, scores_max_prev,
                             scores_scale, scores_sum, logsum)
            for i, j in T.Parallel(block_M, dim):  # rows with nothing to attend to: zero
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, q_start:q_start + block_M, by, :])

    return main


def sparsity_mask(VerticalIndex, SlashIndex, seq_len, block_M, block_N):
    """The [batch, heads, seq_len, seq_len] boolean mask the kernel computes (see the module
    docstring)."""
    q = np.arange(seq_len)
    m = np.arange(-(-seq_len // block_M))[:, None, None]
    n = np.arange(-(-seq_len // block_N))[None, :, None]
    s = SlashIndex[:, :, None, None, :]  # [b, h, 1, 1, num_slash]
    # Tile (m, n) is crossed by diagonal s when some q in tile m has q - s in tile n.
    crossed = ((s > m * block_M - (n + 1) * block_N) & (s < (m + 1) * block_M - n * block_N))
    crossed = crossed.any(axis=-1)  # [b, h, num_q_blocks, num_k_blocks]
    mask = crossed[:, :, (q // block_M)[:, None], (q // block_N)[None, :]]
    vertical = np.zeros(VerticalIndex.shape[:2] + (seq_len,), dtype=bool)
    np.put_along_axis(vertical, VerticalIndex.astype(np.int64), True, axis=-1)
    mask |= vertical[:, :, None, :]
    return mask & (q[None, :] <= q[:, None])


def ref_program(Q, K, V, VerticalIndex, SlashIndex, block_M, block_N):
    """Dense causal attention in float64 restricted to sparsity_mask; empty rows give zero."""
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    seq_len = q.shape[1]
    allowed = sparsity_mask(VerticalIndex, SlashIndex, seq_len, block_M, block_N)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(allowed, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores - np.where(np.isfinite(row_max), row_max, 0))
    denom = probs.sum(axis=-1, keepdims=True)
    probs = np.divide(probs, denom, out=np.zeros_like(probs), where=denom > 0)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


def make_indices(rng, batch, heads, seq_len, num_vertical, num_slash):
    """Random vertical columns (distinct) and slash offsets, like a top-k selection would give."""
    vertical = np.stack([np.stack([rng.choice(seq_len, num_vertical, replace=False)
                                   for _ in range(heads)]) for _ in range(batch)])
    slash = rng.integers(0, seq_len, (batch, heads, num_slash))
    return vertical.astype(np.int32), slash.astype(np.int32)


def minference_indices(rng, batch, heads, seq_len, num_vertical, num_slash, stripes=8):
    """Index sets shaped like those MInference's estimate selects (the top columns and
    diagonals of the last queries' attention): the vertical columns are the first tokens (the
    attention sinks) and a few stripes of neighbouring columns; the slash offsets are the local
    band next to the diagonal (0, 1, 2, ...) and a few runs of far diagonals."""
    vertical = np.empty((batch, heads, num_vertical), np.int32)
    slash = np.empty((batch, heads, num_slash), np.int32)
    for b in range(batch):
        for h in range(heads):
            sinks = min(64, num_vertical // 4, seq_len)
            width = -(-(num_vertical - sinks) // stripes)
            centers = rng.integers(sinks, max(sinks + 1, seq_len - width), stripes)
            cols = np.unique(np.concatenate([np.arange(sinks)] + [
                np.arange(c, min(c + width, seq_len)) for c in centers]))
            if len(cols) < num_vertical:  # stripes that overlap: top up with other columns
                rest = np.setdiff1d(np.arange(seq_len), cols)
                cols = np.concatenate([cols, rng.choice(rest, num_vertical - len(cols),
                                                        replace=False)])
            vertical[b, h] = rng.permutation(cols[:num_vertical])
            band = min(num_slash * 4 // 5, seq_len)
            offsets = set(range(band))
            while len(offsets) < num_slash:  # far diagonals come in runs of neighbours
                start = int(rng.integers(band, seq_len))
                offsets.update(range(start, min(start + -(-(num_slash - band) // 4),
                                                seq_len)))
            slash[b, h] = sorted(offsets)[:num_slash]
    return vertical, slash


def run(batch=1, heads=2, seq_len=100, dim=32, num_vertical=8, num_slash=3, block_M=32,
        block_N=32, seed=0, atol=1e-2, rtol=1e-2, **config):
    """Build the kernel, run it on random inputs and indices, check it against ref_program;
    returns the max abs error."""
    kernel = vertical_slash_attention(batch, heads, seq_len, dim, num_vertical, num_slash,
                                      block_M=block_M, block_N=block_N, **config)
    rng = np.random.default_rng(seed)
    shape = (batch, seq_len, heads, dim)
    Q, K, V = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    VerticalIndex, SlashIndex = make_indices(rng, batch, heads, seq_len, num_vertical, num_slash)
    out = kernel(Q, K, V, VerticalIndex, SlashIndex).astype(np.float64)
    ref = ref_program(Q, K, V, VerticalIndex, SlashIndex, block_M, block_N)
    np.testing.assert_allclose(out, ref, atol=atol, rtol=rtol)
    return float(np.abs(out - ref).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=100)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--num_vertical", type=int, default=8)
    parser.add_argument("--num_slash", type=int, default=3)
    parser.add_argument("--block_M", type=int, default=32)
    parser.add_argument("--block_N", type=int, default=32)
    args = parser.parse_args()
    err = run(args.batch, args.heads, args.seq_len, args.dim, args.num_vertical, args.num_slash,
              args.block_M, args.block_N)
    print(f"vertical_slash_sparse_attention: ok (max abs error {err:.2e})")
