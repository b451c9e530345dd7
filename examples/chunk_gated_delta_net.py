"""Chunked gated delta net forward: the linear-attention recurrence of Gated DeltaNet, computed
chunk by chunk with tile GEMMs. Inputs q, k [B, T, H, DK], v [B, T, H, DV] (float16), the
per-token log decay g [B, T, H] (g <= 0) and the write strength beta [B, T, H] (float32).
Per batch and head, with a DK x DV state S_0 = 0 and scale = DK ** -0.5, token t does

    S_t = exp(g_t) * S_{t-1}                            (decay)
    S_t = S_t + beta_t * k_t (v_t - S_t^T k_t)^T        (delta-rule write, S_t already decayed)
    o_t = scale * S_t^T q_t

and the outputs are o [B, T, H, DV] and the final state S_T [B, H, DK, DV].

Chunked form (chunk length BT, positions r = 0..BT-1 in a chunk, S0 = state before it):
G = cumsum(g) within the chunk (T.cumsum), gamma_r = exp(G_r). Unrolling the recurrence gives
S_r = gamma_r S0 + sum_{i<=r} exp(G_r - G_i) k_i u_i^T with "new values" U that solve
(I + L) U = diag(beta) V - diag(beta * gamma) K S0, where L[r, i] = beta_r exp(G_r - G_i) k_r.k_i
for i < r. With X = (I + L)^-1 (unit lower triangular, forward substitution):
    w = X diag(beta * gamma) K,  u = X diag(beta) V,  U = u - w S0,
    O = scale * (diag(gamma) Q S0 + (tril(Q K^T) * exp(G_r - G_i)) U),
    S_next = exp(G_last) S0 + (K * exp(G_last - G_i))^T U.
Three kernels: chunk_prepare (cumsum, K K^T, triangular solve, w and u; all chunks in
parallel), chunk_state (the sequential scan over chunks producing each chunk's S0, U and the
final state) and chunk_output (O, all chunks in parallel). T need not be a multiple of BT.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T


@tilecraft.jit(out_idx=[-3, -2, -1])
def chunk_prepare(B, seq_len, H, DK, DV, chunk_size=64, threads=128, dtype="float16",
                  accum_dtype="float32"):
    BT = chunk_size

    @T.prim_func
    def main(
            k: T.Tensor((B, seq_len, H, DK), dtype),
            v: T.Tensor((B, seq_len, H, DV), dtype),
            g: T.Tensor((B, seq_len, H), accum_dtype),
            beta: T.Tensor((B, seq_len, H), accum_dtype),
            g_cum: T.Tensor((B, seq_len, H), accum_dtype),
            w: T.Tensor((B, seq_len, H, DK), accum_dtype),
            u: T.Tensor((B, seq_len, H, DV), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, BT), H, B, threads=threads) as (bt, bh, bb):
            k_shared = T.alloc_shared((BT, DK), dtype)
            kb_shared = T.alloc_shared((BT, DK), accum_dtype)
            vb_shared = T.alloc_shared((BT, DV), accum_dtype)
            L_shared = T.alloc_shared((BT, BT), accum_dtype)
            X_shared = T.alloc_shared((BT, BT), accum_dtype)
            G = T.alloc_fragment((BT,), accum_dtype)
            beta_local = T.alloc_fragment((BT,), accum_dtype)
            kkt = T.alloc_fragment((BT, BT), accum_dtype)
            prod = T.alloc_fragment((BT, BT), accum_dtype)
            row = T.alloc_fragment((BT,), accum_dtype)
            w_local = T.alloc_fragment((BT, DK), accum_dtype)
            u_local = T.alloc_fragment((BT, DV), accum_dtype)

            t0 = bt * BT
            T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
            T.copy(v[bb, t0:t0 + BT, bh, :], vb_shared)
            T.copy(g[bb, t0:t0 + BT, bh], G)
            T.copy(beta[bb, t0:t0 + BT, bh], beta_local)
            T.cumsum(G, dim=0)
            T.copy(G, g_cum[bb, t0:t0 + BT, bh])

            # L = strictly lower part of diag(beta) (K K^T) * exp(G_r - G_i)
            T.gemm(k_shared, k_shared, kkt, transpose_B=True, clear_accum=True)
            for r, i in T.Parallel(BT, BT):
                L_shared[r, i] = T.if_then_else(
                    r > i, beta_local[r] * kkt[r, i] * T.exp(G[r] - G[i]), 0)

            # X = (I + L)^-1 by forward substitution: X[r, :] = e_r - sum_{i<r} L[r, i] X[i, :]
            T.clear(X_shared)
            for r in T.serial(BT):
                for i, j in T.Parallel(BT, BT):
                    prod[i, j] = T.if_then_else(i < r, L_shared[r, i] * X_shared[i, j], 0)
                T.reduce_sum(prod, row, dim=0)
                for j in T.Parallel(BT):
                    X_shared[r, j] = T.if_then_else(j == r, 1, 0) - row[j]

            # w = X diag(beta * exp(G)) K,  u = X diag(beta) V
            for i, d in T.Parallel(BT, DK):
                kb_shared[i, d] = k_shared[i, d] * beta_local[i] * T.exp(G[i])
            for i, d in T.Parallel(BT, DV):
                vb_shared[i, d] = vb_shared[i, d] * beta_local[i]
            T.gemm(X_shared, kb_shared, w_local, clear_accum=True)
            T.gemm(X_shared, vb_shared, u_local, clear_accum=True)
            T.copy(w_local, w[bb, t0:t0 + BT, bh, :])
            T.copy(u_local, u[bb, t0:t0 + BT, bh, :])

    return main


@tilecraft.jit(out_idx=[-3, -2, -1])
def chunk_state(B, seq_len, H, DK, DV, chunk_size=64, block_DV=64, num_stages=1, threads=128,
                dtype="float16", accum_dtype="float32"):
    BT = chunk_size
    NT = T.ceildiv(seq_len, BT)

    @T.prim_func
    def main(
            k: T.Tensor((B, seq_len, H, DK), dtype),
            w: T.Tensor((B, seq_len, H, DK), accum_dtype),
            u: T.Tensor((B, seq_len, H, DV), accum_dtype),
            g_cum: T.Tensor((B, seq_len, H), accum_dtype),
            h: T.Tensor((B, NT, H, DK, DV), accum_dtype),
            v_new: T.Tensor((B, seq_len, H, DV), accum_dtype),
            final_state: T.Tensor((B, H, DK, DV), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(DV, block_DV), H, B, threads=threads) as (bv, bh, bb):
            S = T.alloc_fragment((DK, block_DV), accum_dtype)
            S_shared = T.alloc_shared((DK, block_DV), accum_dtype)
            k_shared = T.alloc_shared((BT, DK), dtype)
            kd_shared = T.alloc_shared((BT, DK), accum_dtype)
            w_shared = T.alloc_shared((BT, DK), accum_dtype)
            u_local = T.alloc_fragment((BT, block_DV), accum_dtype)
            ws_local = T.alloc_fragment((BT, block_DV), accum_dtype)
            vn_shared = T.alloc_shared((BT, block_DV), accum_dtype)
            G = T.alloc_fragment((BT,), accum_dtype)

            v0 = bv * block_DV
            T.clear(S)
            for c in T.Pipelined(NT, num_stages=num_stages):
                t0 = c * BT
                T.copy(S, S_shared)
                T.copy(S_shared, h[bb, c, bh, :, v0:v0 + block_DV])
                T.copy(w[bb, t0:t0 + BT, bh, :], w_shared)
                T.copy(u[bb, t0:t0 + BT, bh, v0:v0 + block_DV], u_local)
                T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
                T.copy(g_cum[bb, t0:t0 + BT, bh], G)
                # U = u - w S0
                T.gemm(w_shared, S_shared, ws_local, clear_accum=True)
                for i, j in T.Parallel(BT, block_DV):
                    vn_shared[i, j] = u_local[i, j] - ws_local[i, j]
                T.copy(vn_shared, v_new[bb, t0:t0 + BT, bh, v0:v0 + block_DV])
                # S_next = exp(G_last) S0 + (K * exp(G_last - G_i))^T U
                g_last = g_cum[bb, T.min(t0 + BT, seq_len) - 1, bh]
                for i, d in T.Parallel(BT, DK):
                    kd_shared[i, d] = T.if_then_else(
                        t0 + i < seq_len, k_shared[i, d] * T.exp(g_last - G[i]), 0)
                for d, j in T.Parallel(DK, block_DV):
                    S[d, j] = S[d, j] * T.exp(g_last)
                T.gemm(kd_shared, vn_shared, S, transpose_A=True)
            T.copy(S, final_state[bb, bh, :, v0:v0 + block_DV])

    return main


@tilecraft.jit(out_idx=[-1])
def chunk_output(B, seq_len, H, DK, DV, chunk_size=64, block_DV=64, threads=128,
                 dtype="float16", accum_dtype="float32"):
    BT = chunk_size
    NT = T.ceildiv(seq_len, BT)
    scale = DK ** -0.5

    @T.prim_func
    def main(
            q: T.Tensor((B, seq_len, H, DK), dtype),
            k: T.Tensor((B, seq_len, H, DK), dtype),
            v_new: T.Tensor((B, seq_len, H, DV), accum_dtype),
            h: T.Tensor((B, NT, H, DK, DV), accum_dtype),
            g_cum: T.Tensor((B, seq_len, H), accum_dtype),
            o: T.Tensor((B, seq_len, H, DV), dtype),
    ):
        with T.Kernel(T.ceildiv(DV, block_DV), NT, B * H, threads=threads) as (bv, bt, bbh):
            q_shared = T.alloc_shared((BT, DK), accum_dtype)
            k_shared = T.alloc_shared((BT, DK), accum_dtype)
            h_shared = T.alloc_shared((DK, block_DV), accum_dtype)
            vn_shared = T.alloc_shared((BT, block_DV), accum_dtype)
            P_shared = T.alloc_shared((BT, BT), accum_dtype)
            G = T.alloc_fragment((BT,), accum_dtype)
            P = T.alloc_fragment((BT, BT), accum_dtype)
            o_local = T.alloc_fragment((BT, block_DV), accum_dtype)

            bb, bh = bbh // H, bbh % H
            t0, v0 = bt * BT, bv * block_DV
            T.copy(q[bb, t0:t0 + BT, bh, :], q_shared)
            T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
            T.copy(h[bb, bt, bh, :, v0:v0 + block_DV], h_shared)
            T.copy(v_new[bb, t0:t0 + BT, bh, v0:v0 + block_DV], vn_shared)
            T.copy(g_cum[bb, t0:t0 + BT, bh], G)
            # inter-chunk part: diag(exp(G)) Q S0
            T.gemm(q_shared, h_shared, o_local, clear_accum=True)
            for i, j in T.Parallel(BT, block_DV):
                o_local[i, j] = o_local[i, j] * T.exp(G[i])
            # intra-chunk part: (tril(Q K^T) * exp(G_r - G_i)) U
            T.gemm(q_shared, k_shared, P, transpose_B=True, clear_accum=True)
            for r, i in T.Parallel(BT, BT):
                P_shared[r, i] = T.if_then_else(r >= i, P[r, i] * T.exp(G[r] - G[i]), 0)
            T.gemm(P_shared, vn_shared, o_local)
            for i, j in T.Parallel(BT, block_DV):
                o_local[i, j] = o_local[i, j] * scale
            T.copy(o_local, o[bb, t0:t0 + BT, bh, v0:v0 + block_DV])

    return main


def chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, block_DV=64, threads=128):
    """The forward pass: three launches; returns (o, final_state)."""
    B, seq_len, H, DK = q.shape
    DV = v.shape[-1]
    sizes = (B, seq_len, H, DK, DV)
    g_cum, w, u = chunk_prepare(*sizes, chunk_size=chunk_size, threads=threads)(k, v, g, beta)
    h, v_new, final_state = chunk_state(*sizes, chunk_size=chunk_size, block_DV=block_DV,
                                        threads=threads)(k, w, u, g_cum)
    o = chunk_output(*sizes, chunk_size=chunk_size, block_DV=block_DV,
                     threads=threads)(q, k, v_new, h, g_cum)
    return o, final_state


def ref_program(q, k, v, g, beta):
    """The per-token recurrence of the module docstring in float64; returns (o, final_state)."""
    q, k, v, g, beta = (x.astype(np.float64) for x in (q, k, v, g, beta))
    B, seq_len, H, DK = q.shape
    o = np.zeros(v.shape)
    S = np.zeros((B, H, DK, v.shape[-1]))
    for t in range(seq_len):
        S *= np.exp(g[:, t])[:, :, None, None]
        kt, vt = k[:, t], v[:, t]  # [B, H, D]
        err = vt - np.einsum("bhkv,bhk->bhv", S, kt)
        S += beta[:, t][:, :, None, None] * kt[..., :, None] * err[..., None, :]
        o[:, t] = DK ** -0.5 * np.einsum("bhkv,bhk->bhv", S, q[:, t])
    return o, S


def make_inputs(B, seq_len, H, DK, DV, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, seq_len, H, DK))
    k = rng.standard_normal((B, seq_len, H, DK))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # unit keys keep the delta rule stable
    v = rng.standard_normal((B, seq_len, H, DV))
    g = -rng.uniform(0.01, 0.1, (B, seq_len, H))  # log decay in (-0.1, -0.01)
    beta = rng.uniform(0.1, 0.9, (B, seq_len, H))
    return (q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
            g.astype(np.float32), beta.astype(np.float32))


def run(B=1, seq_len=128, H=2, DK=32, DV=32, seed=0, **config):
    """Run the three kernels on random inputs, check o and the final state against ref_program
    and return the largest absolute error."""
    inputs = make_inputs(B, seq_len, H, DK, DV, seed)
    o, final_state = chunk_gated_delta_rule(*inputs, **config)
    ref_o, ref_state = ref_program(*inputs)
    assert o.shape == ref_o.shape and o.dtype == np.float16
    np.testing.assert_allclose(o.astype(np.float32), ref_o, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(final_state, ref_state, rtol=1e-3, atol=1e-3)
    return float(max(np.abs(o.astype(np.float64) - ref_o).max(),
                     np.abs(final_state - ref_state).max()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--dk", type=int, default=32)
    parser.add_argument("--dv", type=int, default=32)
    parser.add_argument("--chunk_size", type=int, default=64)
    parser.add_argument("--block_dv", type=int, default=64)
    args = parser.parse_args()
    err = run(args.batch, args.seq_len, args.heads, args.dk, args.dv,
              chunk_size=args.chunk_size, block_DV=args.block_dv)
    print(f"chunk_gated_delta_net: ok (max abs error {err:.2e})")
