"""Chunked gated delta net forward: the linear-attention recurrence of Gated DeltaNet, computed
chunk by chunk with tile GEMMs on the tensor cores. Inputs q, k [B, T, H, DK], v [B, T, H, DV]
(float16 or bfloat16), the per-token log decay g [B, T, H] (g <= 0) and the write strength
beta [B, T, H] (float32). Per batch and head, with a DK x DV state S_0 (zero, or the initial
state) and a scale (DK ** -0.5 by default), token t does

    S_t = exp(g_t) * S_{t-1}                            (decay)
    S_t = S_t + beta_t * k_t (v_t - S_t^T k_t)^T        (delta-rule write, S_t already decayed)
    o_t = scale * S_t^T q_t

and the outputs are o [B, T, H, DV] and the final state S_T [B, H, DK, DV] (float32).

Chunked form (chunk length BT, positions r = 0..BT-1 in a chunk, S0 = state before it):
G = cumsum(g) within the chunk (T.cumsum), gamma_r = exp(G_r); all decays are exponentials of
differences of G (log space), never above 1. Unrolling the recurrence gives
S_r = gamma_r S0 + sum_{i<=r} exp(G_r - G_i) k_i u_i^T with "new values" U that solve
(I + L) U = diag(beta) V - diag(beta * gamma) K S0, where L[r, i] = beta_r exp(G_r - G_i) k_r.k_i
for i < r. With X = (I + L)^-1 (the WY / UT transform):
    w = X diag(beta * gamma) K,  u = X diag(beta) V,  U = u - w S0,
    O = scale * (diag(gamma) Q S0 + (tril(Q K^T) * exp(G_r - G_i)) U),
    S_next = exp(G_last) S0 + (K * exp(G_last - G_i))^T U.
X is computed blockwise: the 16 x 16 diagonal blocks of I + L are inverted by forward
substitution (all blocks at once, 16 steps, float32), then merged pairwise, 16 -> 32 -> 64:
a lower block triangular [[A, 0], [C, D]] has the inverse [[A^-1, 0], [-D^-1 C A^-1, D^-1]],
two tensor-core GEMMs per level.

Three kernels: chunk_prepare (cumsum, K K^T, the inverse, w and u; all chunks in parallel),
chunk_state (the sequential scan over chunks producing each chunk's S0, U and the final state;
the state stays in registers in float32 across a pipelined chunk loop) and chunk_output (O,
all chunks in parallel). The cumulative decays G go from the first kernel to the others as
[B, H, T], so that a chunk's 64 values are one contiguous run (one asynchronous copy in the
scan's pipelined loop). Kept in the input dtype, as flash-linear-attention keeps them: w, u,
the chunk states h and the new values U (each is a GEMM operand); in float32: G, beta, the
state carried across chunks, the inverse while it is computed, every accumulator. T need not
be a multiple of BT.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T

SUB = 16   # the diagonal blocks of I + L inverted by substitution


def wy_inverse_of(BT):
    """A macro computing X = (I + L)^-1 of a chunk (L strictly lower, float32 in shared
    memory) into X_shared (float32) and Xh_shared (the input dtype, a GEMM operand): the
    diagonal blocks of 16 by substitution, all at once (step s gives row s of each block,
    X[r, :] = e_r - sum_{i < r} L[r, i] X[i, :] over the block's earlier rows), then pairs of
    blocks merged 16 -> 32 -> ... -> BT: with X block diagonal (blocks of n), X - X R X is the
    inverse with blocks of 2n, R the lower-left n x n block of L inside each 2n block.
    Scratch: R_shared, Q_shared (BT x BT, the input dtype), prod (sub x BT), row (BT) and merge
    (BT x BT) fragments."""
    sub = min(SUB, BT)
    assert BT % sub == 0 and (BT // sub) & (BT // sub - 1) == 0, \
        "chunk_size: 16 times a power of two (or at most 16)"
    merge_sizes = [sub << e for e in range((BT // sub).bit_length() - 1)]   # 16, 32, ..

    @T.macro
    def wy_inverse(L_shared, X_shared, Xh_shared, R_shared, Q_shared, prod, row, merge):
        T.clear(X_shared)
        for s in T.serial(sub):
            for i, c in T.Parallel(sub, BT):
                b0 = c // sub * sub
                prod[i, c] = T.if_then_else(
                    i < s, L_shared[b0 + s, b0 + i] * X_shared[b0 + i, c], 0)
            T.reduce_sum(prod, row, dim=0)
            for c in T.Parallel(BT):
                X_shared[c // sub * sub + s, c] = T.if_then_else(c % sub == s, 1, 0) - row[c]
        for n in merge_sizes:
            for r, c in T.Parallel(BT, BT):
                Xh_shared[r, c] = X_shared[r, c]
                R_shared[r, c] = T.if_then_else(
                    r // (2 * n) == c // (2 * n) and r // n % 2 == 1 and c // n % 2 == 0,
                    L_shared[r, c], 0)
            T.gemm(R_shared, Xh_shared, merge, clear_accum=True)
            T.copy(merge, Q_shared)
            T.gemm(Xh_shared, Q_shared, merge, clear_accum=True)
            for r, c in T.Parallel(BT, BT):
                X_shared[r, c] = X_shared[r, c] - merge[r, c]
        T.copy(X_shared, Xh_shared)

    return wy_inverse


@tilecraft.jit(out_idx=[-3, -2, -1])
def chunk_prepare(B, seq_len, H, DK, DV, chunk_size=64, threads=128, dtype="float16",
                  accum_dtype="float32"):
    BT = chunk_size
    sub = min(SUB, BT)
    wy_inverse = wy_inverse_of(BT)

    @T.prim_func
    def main(
            k: T.Tensor((B, seq_len, H, DK), dtype),
            v: T.Tensor((B, seq_len, H, DV), dtype),
            g: T.Tensor((B, seq_len, H), accum_dtype),
            beta: T.Tensor((B, seq_len, H), accum_dtype),
            g_cum: T.Tensor((B, H, seq_len), accum_dtype),
            w: T.Tensor((B, seq_len, H, DK), dtype),
            u: T.Tensor((B, seq_len, H, DV), dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, BT), H, B, threads=threads) as (bt, bh, bb):
            k_shared = T.alloc_shared((BT, DK), dtype)
            v_shared = T.alloc_shared((BT, DV), dtype)
            L_shared = T.alloc_shared((BT, BT), accum_dtype)
            X_shared = T.alloc_shared((BT, BT), accum_dtype)    # the inverse, float32
            Xh_shared = T.alloc_shared((BT, BT), dtype)         # ... as a GEMM operand
            R_shared = T.alloc_shared((BT, BT), dtype)
            Q_shared = T.alloc_shared((BT, BT), dtype)
            G = T.alloc_shared((BT,), accum_dtype)
            beta_local = T.alloc_shared((BT,), accum_dtype)
            kkt = T.alloc_fragment((BT, BT), accum_dtype)
            prod = T.alloc_fragment((sub, BT), accum_dtype)
            row = T.alloc_fragment((BT,), accum_dtype)
            merge = T.alloc_fragment((BT, BT), accum_dtype)
            w_local = T.alloc_fragment((BT, DK), accum_dtype)
            u_local = T.alloc_fragment((BT, DV), accum_dtype)

            t0 = bt * BT
            T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
            T.copy(g[bb, t0:t0 + BT, bh], G)
            T.copy(beta[bb, t0:t0 + BT, bh], beta_local)
            T.cumsum(G, dim=0)
            T.copy(G, g_cum[bb, bh, t0:t0 + BT])

            # L = strictly lower part of diag(beta) (K K^T) * exp(G_r - G_i)
            T.gemm(k_shared, k_shared, kkt, transpose_B=True, clear_accum=True)
            for r, i in T.Parallel(BT, BT):
                L_shared[r, i] = T.if_then_else(
                    r > i, beta_local[r] * kkt[r, i] * T.exp(G[r] - G[i]), 0)

            wy_inverse(L_shared, X_shared, Xh_shared, R_shared, Q_shared, prod, row, merge)

            # w = X diag(beta * exp(G)) K,  u = X diag(beta) V (V read only now: its tile
            # takes the place of L's, which is no longer needed)
            T.copy(v[bb, t0:t0 + BT, bh, :], v_shared)
            for i, d in T.Parallel(BT, DK):
                k_shared[i, d] = k_shared[i, d] * beta_local[i] * T.exp(G[i])
            for i, d in T.Parallel(BT, DV):
                v_shared[i, d] = v_shared[i, d] * beta_local[i]
            T.gemm(Xh_shared, k_shared, w_local, clear_accum=True)
            T.gemm(Xh_shared, v_shared, u_local, clear_accum=True)
            T.copy(w_local, w[bb, t0:t0 + BT, bh, :])
            T.copy(u_local, u[bb, t0:t0 + BT, bh, :])

    return main


@tilecraft.jit(out_idx=[-3, -2, -1])
def chunk_state(B, seq_len, H, DK, DV, chunk_size=64, block_DV=64, num_stages=2, threads=128,
                use_initial_state=False, dtype="float16", accum_dtype="float32"):
    """The scan over chunks; initial_state is read only with use_initial_state."""
    BT = chunk_size
    NT = T.ceildiv(seq_len, BT)

    @T.prim_func
    def main(
            k: T.Tensor((B, seq_len, H, DK), dtype),
            w: T.Tensor((B, seq_len, H, DK), dtype),
            u: T.Tensor((B, seq_len, H, DV), dtype),
            g_cum: T.Tensor((B, H, seq_len), accum_dtype),
            initial_state: T.Tensor((B, H, DK, DV), accum_dtype),
            h: T.Tensor((B, NT, H, DK, DV), dtype),
            v_new: T.Tensor((B, seq_len, H, DV), dtype),
            final_state: T.Tensor((B, H, DK, DV), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(DV, block_DV), H, B, threads=threads) as (bv, bh, bb):
            S = T.alloc_fragment((DK, block_DV), accum_dtype)
            S_shared = T.alloc_shared((DK, block_DV), dtype)
            k_shared = T.alloc_shared((BT, DK), dtype)
            w_shared = T.alloc_shared((BT, DK), dtype)
            u_shared = T.alloc_shared((BT, block_DV), dtype)
            ws_local = T.alloc_fragment((BT, block_DV), accum_dtype)
            vn_shared = T.alloc_shared((BT, block_DV), dtype)
            vd_shared = T.alloc_shared((BT, block_DV), dtype)
            G = T.alloc_shared((BT,), accum_dtype)

            v0 = bv * block_DV
            if use_initial_state:
                T.copy(initial_state[bb, bh, :, v0:v0 + block_DV], S)
            else:
                T.clear(S)
            for c in T.Pipelined(NT, num_stages=num_stages):
                t0 = c * BT
                T.copy(w[bb, t0:t0 + BT, bh, :], w_shared)
                T.copy(u[bb, t0:t0 + BT, bh, v0:v0 + block_DV], u_shared)
                T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
                T.copy(g_cum[bb, bh, t0:t0 + BT], G)
                T.copy(S, S_shared)
                T.copy(S_shared, h[bb, c, bh, :, v0:v0 + block_DV])
                # U = u - w S0, and its rows decayed to the chunk's end: exp(G_last - G_i) U
                # (rows past seq_len are zero: their w and u tiles are read as zeros)
                g_last = G[T.min(BT, seq_len - t0) - 1]
                T.gemm(w_shared, S_shared, ws_local, clear_accum=True)
                for i, j in T.Parallel(BT, block_DV):
                    vn_shared[i, j] = u_shared[i, j] - ws_local[i, j]
                    vd_shared[i, j] = (u_shared[i, j] - ws_local[i, j]) * T.exp(g_last - G[i])
                T.copy(vn_shared, v_new[bb, t0:t0 + BT, bh, v0:v0 + block_DV])
                # S_next = exp(G_last) S0 + K^T (exp(G_last - G_i) U)
                for d, j in T.Parallel(DK, block_DV):
                    S[d, j] = S[d, j] * T.exp(g_last)
                T.gemm(k_shared, vd_shared, S, transpose_A=True)
            T.copy(S, final_state[bb, bh, :, v0:v0 + block_DV])

    return main


@tilecraft.jit(out_idx=[-1])
def chunk_output(B, seq_len, H, DK, DV, chunk_size=64, block_DV=64, threads=128, scale=None,
                 dtype="float16", accum_dtype="float32"):
    BT = chunk_size
    NT = T.ceildiv(seq_len, BT)
    scale = DK ** -0.5 if scale is None else scale

    @T.prim_func
    def main(
            q: T.Tensor((B, seq_len, H, DK), dtype),
            k: T.Tensor((B, seq_len, H, DK), dtype),
            v_new: T.Tensor((B, seq_len, H, DV), dtype),
            h: T.Tensor((B, NT, H, DK, DV), dtype),
            g_cum: T.Tensor((B, H, seq_len), accum_dtype),
            o: T.Tensor((B, seq_len, H, DV), dtype),
    ):
        with T.Kernel(T.ceildiv(DV, block_DV), NT, B * H, threads=threads) as (bv, bt, bbh):
            q_shared = T.alloc_shared((BT, DK), dtype)
            k_shared = T.alloc_shared((BT, DK), dtype)
            h_shared = T.alloc_shared((DK, block_DV), dtype)
            vn_shared = T.alloc_shared((BT, block_DV), dtype)
            P_shared = T.alloc_shared((BT, BT), dtype)
            G = T.alloc_shared((BT,), accum_dtype)
            P = T.alloc_fragment((BT, BT), accum_dtype)
            o_local = T.alloc_fragment((BT, block_DV), accum_dtype)

            bb, bh = bbh // H, bbh % H
            t0, v0 = bt * BT, bv * block_DV
            T.copy(q[bb, t0:t0 + BT, bh, :], q_shared)
            T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
            T.copy(h[bb, bt, bh, :, v0:v0 + block_DV], h_shared)
            T.copy(v_new[bb, t0:t0 + BT, bh, v0:v0 + block_DV], vn_shared)
            T.copy(g_cum[bb, bh, t0:t0 + BT], G)
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


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False, chunk_size=64, block_DV=64, threads=128,
                           state_block_DV=None):
    """The forward pass with flash-linear-attention's signature (q, k, v [B, T, H, D] float16
    or bfloat16; g, beta [B, T, H] float32; initial_state [B, H, DK, DV] float32 or None):
    three launches; returns (o, final_state), final_state None unless output_final_state.
    Tensors may be torch tensors on the GPU or numpy arrays (run on the interpreter).
    state_block_DV: the value columns of the state one block of the scan carries; by default
    scan_block_DV's choice for the GPU the tensors are on."""
    B, seq_len, H, DK = q.shape
    DV = v.shape[-1]
    sizes = (B, seq_len, H, DK, DV)
    dtype = str(q.dtype).replace("torch.", "")
    if state_block_DV is None:
        state_block_DV = scan_block_DV(B, H, DV, block_DV, _multiprocessors(q))
    g_cum, w, u = chunk_prepare(*sizes, chunk_size=chunk_size, threads=threads,
                                dtype=dtype)(k, v, g, beta)
    state = chunk_state(*sizes, chunk_size=chunk_size, block_DV=state_block_DV,
                        threads=threads, use_initial_state=initial_state is not None,
                        dtype=dtype)
    if initial_state is None:
        initial_state = _unread_state(q, (B, H, DK, DV))
    h, v_new, final_state = state(k, w, u, g_cum, initial_state)
    o = chunk_output(*sizes, chunk_size=chunk_size, block_DV=block_DV, threads=threads,
                     scale=scale, dtype=dtype)(q, k, v_new, h, g_cum)
    return o, (final_state if output_final_state else None)


def scan_block_DV(B, H, DV, block_DV, multiprocessors) -> int:
    """The value columns one block of chunk_state carries: block_DV, or half of it where the
    scan's B * H * DV / block_DV blocks would leave some of the multiprocessors idle (its
    chunks run one after another in a block)."""
    if B * H * -(-DV // block_DV) < multiprocessors and block_DV >= 32:
        return block_DV // 2
    return block_DV


def _multiprocessors(like) -> int:
    """The multiprocessors of the GPU a torch tensor lives on (0 for numpy arrays)."""
    if isinstance(like, np.ndarray):
        return 0
    import torch
    return torch.cuda.get_device_properties(like.device).multi_processor_count


def _unread_state(like, shape):
    """A float32 tensor of shape where chunk_state takes an initial state it does not read."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, np.float32)
    import torch
    return torch.empty(shape, dtype=torch.float32, device=like.device)


def ref_program(q, k, v, g, beta, initial_state=None, scale=None):
    """The per-token recurrence of the module docstring in float64; returns (o, final_state)."""
    q, k, v, g, beta = (x.astype(np.float64) for x in (q, k, v, g, beta))
    B, seq_len, H, DK = q.shape
    scale = DK ** -0.5 if scale is None else scale
    o = np.zeros(v.shape)
    S = np.zeros((B, H, DK, v.shape[-1])) if initial_state is None else \
        initial_state.astype(np.float64).copy()
    for t in range(seq_len):
        S *= np.exp(g[:, t])[:, :, None, None]
        kt, vt = k[:, t], v[:, t]  # [B, H, D]
        err = vt - np.einsum("bhkv,bhk->bhv", S, kt)
        S += beta[:, t][:, :, None, None] * kt[..., :, None] * err[..., None, :]
        o[:, t] = scale * np.einsum("bhkv,bhk->bhv", S, q[:, t])
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


def run(B=1, seq_len=128, H=2, DK=32, DV=32, seed=0, initial_state=False, **config):
    """Run the three kernels on random inputs (with a random initial state when asked), check
    o and the final state against ref_program and return the largest absolute error."""
    inputs = make_inputs(B, seq_len, H, DK, DV, seed)
    h0 = None
    if initial_state:
        h0 = np.random.default_rng(seed + 1).standard_normal((B, H, DK, DV)).astype(np.float32)
    o, final_state = chunk_gated_delta_rule(*inputs, initial_state=h0, output_final_state=True,
                                            **config)
    ref_o, ref_state = ref_program(*inputs, initial_state=h0)
    assert o.shape == ref_o.shape and o.dtype == np.float16
    np.testing.assert_allclose(o.astype(np.float32), ref_o, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(final_state, ref_state, rtol=1e-2, atol=1e-2)
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
