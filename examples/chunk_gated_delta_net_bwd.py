"""Chunked gated delta net backward: the gradients of examples/chunk_gated_delta_net.py's
forward, chunk by chunk, from dO (and the final state's gradient dS_T).

Per chunk (notation of the forward's docstring: G, gamma, E[r, i] = exp(G_r - G_i) for r >= i,
X, w, u, U = u - w S0, P = tril(Q K^T) * E, f_r = exp(G_last - G_r), lambda = exp(G_last)),
with dS' the gradient of the state after the chunk:

    dU  = scale * P^T dO + diag(f) K dS'
    dS0 = lambda dS' + scale * Q^T diag(gamma) dO - w^T dU       (the state before the chunk)

so the state's gradient runs backwards over the chunks as the state runs forwards. Two kernels
here: chunk_bwd_dv_local (scale * P^T dO, all chunks in parallel: it does not depend on the
state), chunk_bwd_state (the reverse scan: dU and dS' of every chunk, and the initial
state's gradient) and chunk_bwd_grads (dq, dk, dv, dg, dbeta of all chunks in parallel from dU,
dS', the states and the forward's intermediates, back through the WY representation: with
dW = -dU S0^T, dX = dW (diag(beta gamma) K)^T + dU (diag(beta) V)^T and dA = -(X^T dX X^T)
below the diagonal, then through A[r, i] = beta_r (k_r . k_i) E[r, i]; every decay's gradient
gathered into dG and summed backwards over the chunk for dg). ref_chunk_gradients is the same
computation in float64 numpy, checked against autograd of the recurrence in the tests.
chunk_gated_delta_rule_bwd runs them all.
"""
import os
import sys

import numpy as np

import tilecraft
import tilecraft.language as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chunk_gated_delta_net as forward  # noqa: E402


@tilecraft.jit(out_idx=[-1])
def chunk_bwd_dv_local(B, seq_len, H, DK, DV, chunk_size=64, block_DV=64, threads=128,
                       scale=None, dtype="float16", accum_dtype="float32"):
    """dU_local = scale * P^T dO for every chunk, P = tril(Q K^T) * exp(G_r - G_i)."""
    BT = chunk_size
    NT = T.ceildiv(seq_len, BT)
    scale = DK ** -0.5 if scale is None else scale

    @T.prim_func
    def main(
            q: T.Tensor((B, seq_len, H, DK), dtype),
            k: T.Tensor((B, seq_len, H, DK), dtype),
            g_cum: T.Tensor((B, H, seq_len), accum_dtype),
            do: T.Tensor((B, seq_len, H, DV), dtype),
            du_local: T.Tensor((B, seq_len, H, DV), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(DV, block_DV), NT, B * H, threads=threads) as (bv, bt, bbh):
            q_shared = T.alloc_shared((BT, DK), dtype)
            k_shared = T.alloc_shared((BT, DK), dtype)
            do_shared = T.alloc_shared((BT, block_DV), dtype)
            G = T.alloc_shared((BT,), accum_dtype)
            Pt = T.alloc_fragment((BT, BT), accum_dtype)
            Pt_shared = T.alloc_shared((BT, BT), dtype)
            acc = T.alloc_fragment((BT, block_DV), accum_dtype)

            bb, bh = bbh // H, bbh % H
            t0, v0 = bt * BT, bv * block_DV
            T.copy(q[bb, t0:t0 + BT, bh, :], q_shared)
            T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
            T.copy(do[bb, t0:t0 + BT, bh, v0:v0 + block_DV], do_shared)
            T.copy(g_cum[bb, bh, t0:t0 + BT], G)
            # P^T[i, r] = k_i . q_r exp(G_r - G_i) for r >= i
            T.gemm(k_shared, q_shared, Pt, transpose_B=True, clear_accum=True)
            for i, r in T.Parallel(BT, BT):
                Pt_shared[i, r] = T.if_then_else(r >= i, Pt[i, r] * T.exp(G[r] - G[i]) * scale,
                                                 0)
            T.gemm(Pt_shared, do_shared, acc, clear_accum=True)
            T.copy(acc, du_local[bb, t0:t0 + BT, bh, v0:v0 + block_DV])

    return main


@tilecraft.jit(out_idx=[-3, -2, -1])
def chunk_bwd_state(B, seq_len, H, DK, DV, chunk_size=64, block_DV=64, num_stages=2,
                    threads=128, scale=None, use_final_state_grad=False, dtype="float16",
                    accum_dtype="float32"):
    """The reverse scan over chunks: for chunk c from the last, dh[c] = dS' (the gradient of the
    state after it), dU = dU_local + diag(f) K dS', then dS' becomes the gradient of the state
    before it (module docstring); dh0, the initial state's gradient, at the end. dS_T (the
    final state's gradient) is read only with use_final_state_grad."""
    BT = chunk_size
    NT = T.ceildiv(seq_len, BT)
    scale = DK ** -0.5 if scale is None else scale

    @T.prim_func
    def main(
            q: T.Tensor((B, seq_len, H, DK), dtype),
            k: T.Tensor((B, seq_len, H, DK), dtype),
            w: T.Tensor((B, seq_len, H, DK), dtype),
            g_cum: T.Tensor((B, H, seq_len), accum_dtype),
            do: T.Tensor((B, seq_len, H, DV), dtype),
            du_local: T.Tensor((B, seq_len, H, DV), accum_dtype),
            ds_final: T.Tensor((B, H, DK, DV), accum_dtype),
            dh: T.Tensor((B, NT, H, DK, DV), dtype),
            du: T.Tensor((B, seq_len, H, DV), dtype),
            dh0: T.Tensor((B, H, DK, DV), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(DV, block_DV), H, B, threads=threads) as (bv, bh, bb):
            dS = T.alloc_fragment((DK, block_DV), accum_dtype)
            dS_shared = T.alloc_shared((DK, block_DV), dtype)
            q_shared = T.alloc_shared((BT, DK), dtype)
            qg_shared = T.alloc_shared((BT, DK), dtype)
            k_shared = T.alloc_shared((BT, DK), dtype)
            w_shared = T.alloc_shared((BT, DK), dtype)
            do_shared = T.alloc_shared((BT, block_DV), dtype)
            dul_shared = T.alloc_shared((BT, block_DV), accum_dtype)
            kd = T.alloc_fragment((BT, block_DV), accum_dtype)
            du_shared = T.alloc_shared((BT, block_DV), dtype)
            ndu_shared = T.alloc_shared((BT, block_DV), dtype)
            G = T.alloc_shared((BT,), accum_dtype)

            v0 = bv * block_DV
            if use_final_state_grad:
                T.copy(ds_final[bb, bh, :, v0:v0 + block_DV], dS)
            else:
                T.clear(dS)
            for i in T.Pipelined(NT, num_stages=num_stages):
                c = NT - 1 - i
                t0 = c * BT
                T.copy(q[bb, t0:t0 + BT, bh, :], q_shared)
                T.copy(k[bb, t0:t0 + BT, bh, :], k_shared)
                T.copy(w[bb, t0:t0 + BT, bh, :], w_shared)
                T.copy(do[bb, t0:t0 + BT, bh, v0:v0 + block_DV], do_shared)
                T.copy(du_local[bb, t0:t0 + BT, bh, v0:v0 + block_DV], dul_shared)
                T.copy(g_cum[bb, bh, t0:t0 + BT], G)
                T.copy(dS, dS_shared)
                T.copy(dS_shared, dh[bb, c, bh, :, v0:v0 + block_DV])
                g_last = G[T.min(BT, seq_len - t0) - 1]
                # dU = dU_local + diag(exp(G_last - G_r)) K dS' (rows past seq_len are zero:
                # their k and dU_local tiles are read as zeros)
                T.gemm(k_shared, dS_shared, kd, clear_accum=True)
                for r, j in T.Parallel(BT, block_DV):
                    du_shared[r, j] = dul_shared[r, j] + T.exp(g_last - G[r]) * kd[r, j]
                    ndu_shared[r, j] = -(dul_shared[r, j] + T.exp(g_last - G[r]) * kd[r, j])
                T.copy(du_shared, du[bb, t0:t0 + BT, bh, v0:v0 + block_DV])
                # dS0 = exp(G_last) dS' + (scale diag(gamma) Q)^T dO - w^T dU
                for r, d in T.Parallel(BT, DK):
                    qg_shared[r, d] = q_shared[r, d] * (T.exp(G[r]) * scale)
                for d, j in T.Parallel(DK, block_DV):
                    dS[d, j] = dS[d, j] * T.exp(g_last)
                T.gemm(qg_shared, do_shared, dS, transpose_A=True)
                T.gemm(w_shared, ndu_shared, dS, transpose_A=True)
            T.copy(dS, dh0[bb, bh, :, v0:v0 + block_DV])

    return main


@tilecraft.jit(out_idx=[-5, -4, -3, -2, -1])
def chunk_bwd_grads(B, seq_len, H, DK, DV, chunk_size=64, threads=256, scale=None,
                    dtype="float16", accum_dtype="float32"):
    """dq, dk, dv, dg, dbeta of every chunk, all chunks in parallel, from the chunk's state h
    (before it), dh (the gradient of the state after it), dU (the scan's) and dO: the terms of
    ref_chunk_gradients, each BT x BT or BT x D product a tensor-core GEMM. The inverse X is
    recomputed as the forward computes it (forward.wy_inverse_of)."""
    BT = chunk_size
    NT = T.ceildiv(seq_len, BT)
    sub = min(forward.SUB, BT)
    wy_inverse = forward.wy_inverse_of(BT)
    scale = DK ** -0.5 if scale is None else scale

    @T.prim_func
    def main(
            q: T.Tensor((B, seq_len, H, DK), dtype),
            k: T.Tensor((B, seq_len, H, DK), dtype),
            v: T.Tensor((B, seq_len, H, DV), dtype),
            g_cum: T.Tensor((B, H, seq_len), accum_dtype),
            beta: T.Tensor((B, seq_len, H), accum_dtype),
            v_new: T.Tensor((B, seq_len, H, DV), dtype),
            h: T.Tensor((B, NT, H, DK, DV), dtype),
            dh: T.Tensor((B, NT, H, DK, DV), dtype),
            do: T.Tensor((B, seq_len, H, DV), dtype),
            du: T.Tensor((B, seq_len, H, DV), dtype),
            dq: T.Tensor((B, seq_len, H, DK), dtype),
            dk: T.Tensor((B, seq_len, H, DK), dtype),
            dv: T.Tensor((B, seq_len, H, DV), dtype),
            dg: T.Tensor((B, seq_len, H), accum_dtype),
            dbeta: T.Tensor((B, seq_len, H), accum_dtype),
    ):
        with T.Kernel(NT, H, B, threads=threads) as (bt, bh, bb):
            q_s = T.alloc_shared((BT, DK), dtype)
            k_s = T.alloc_shared((BT, DK), dtype)
            v_s = T.alloc_shared((BT, DV), dtype)
            U_s = T.alloc_shared((BT, DV), dtype)
            do_s = T.alloc_shared((BT, DV), dtype)
            du_s = T.alloc_shared((BT, DV), dtype)
            S_s = T.alloc_shared((DK, DV), dtype)
            dS_s = T.alloc_shared((DK, DV), dtype)
            G = T.alloc_shared((BT,), accum_dtype)
            beta_s = T.alloc_shared((BT,), accum_dtype)
            L_s = T.alloc_shared((BT, BT), accum_dtype)
            X_s = T.alloc_shared((BT, BT), accum_dtype)
            Xh = T.alloc_shared((BT, BT), dtype)
            R_s = T.alloc_shared((BT, BT), dtype)
            Q_s = T.alloc_shared((BT, BT), dtype)
            prod = T.alloc_fragment((sub, BT), accum_dtype)
            row = T.alloc_fragment((BT,), accum_dtype)
            sq = T.alloc_fragment((BT, BT), accum_dtype)      # a BT x BT product
            sq2 = T.alloc_fragment((BT, BT), accum_dtype)
            KK_s = T.alloc_shared((BT, BT), dtype)            # K K^T
            dE = T.alloc_fragment((BT, BT), accum_dtype)      # dE * E, summed into dG
            M_s = T.alloc_shared((BT, BT), dtype)             # a BT x BT GEMM operand
            dW_s = T.alloc_shared((BT, DK), dtype)
            acc_k = T.alloc_fragment((BT, DK), accum_dtype)
            dk_acc = T.alloc_fragment((BT, DK), accum_dtype)
            acc_v = T.alloc_fragment((BT, DV), accum_dtype)
            wk = T.alloc_fragment((BT, DK), accum_dtype)
            wv = T.alloc_fragment((BT, DV), accum_dtype)
            ssum = T.alloc_fragment((DK, DV), accum_dtype)
            ssum_row = T.alloc_fragment((DK,), accum_dtype)
            lam_part = T.alloc_fragment((1,), accum_dtype)
            tot = T.alloc_fragment((1,), accum_dtype)
            dG = T.alloc_shared((BT,), accum_dtype)
            r1 = T.alloc_fragment((BT,), accum_dtype)
            r2 = T.alloc_fragment((BT,), accum_dtype)
            r3 = T.alloc_fragment((BT,), accum_dtype)   # column sums: another layout than rows'


            t0 = bt * BT
            T.copy(q[bb, t0:t0 + BT, bh, :], q_s)
            T.copy(k[bb, t0:t0 + BT, bh, :], k_s)
            T.copy(g_cum[bb, bh, t0:t0 + BT], G)
            T.copy(beta[bb, t0:t0 + BT, bh], beta_s)
            last = T.min(BT, seq_len - t0) - 1

            # the forward's inverse X = (I + L)^-1, and K K^T for dA's terms
            T.gemm(k_s, k_s, sq, transpose_B=True, clear_accum=True)
            for r, i in T.Parallel(BT, BT):
                KK_s[r, i] = sq[r, i]
                L_s[r, i] = T.if_then_else(r > i, beta_s[r] * sq[r, i] * T.exp(G[r] - G[i]), 0)
            wy_inverse(L_s, X_s, Xh, R_s, Q_s, prod, row, sq)
            # the rest is read now, into the bytes the inverse's scratch used
            T.copy(v[bb, t0:t0 + BT, bh, :], v_s)
            T.copy(v_new[bb, t0:t0 + BT, bh, :], U_s)
            T.copy(do[bb, t0:t0 + BT, bh, :], do_s)
            T.copy(du[bb, t0:t0 + BT, bh, :], du_s)
            T.copy(h[bb, bt, bh, :, :], S_s)
            T.copy(dh[bb, bt, bh, :, :], dS_s)
            T.copy(X_s, Xh)

            # dP = scale dO U^T (r >= i): dQ and dK through P, and P's part of dE
            T.gemm(do_s, U_s, sq, transpose_B=True, clear_accum=True)
            for r, i in T.Parallel(BT, BT):
                M_s[r, i] = T.if_then_else(r >= i, sq[r, i] * scale * T.exp(G[r] - G[i]), 0)
            T.gemm(q_s, k_s, sq, transpose_B=True, clear_accum=True)
            for r, i in T.Parallel(BT, BT):
                dE[r, i] = M_s[r, i] * sq[r, i]          # dP * E * (Q K^T)
            # dQ = scale diag(gamma) dO S^T + (dP * E) K
            T.gemm(do_s, S_s, acc_k, transpose_B=True, clear_accum=True)
            for r, d in T.Parallel(BT, DK):
                acc_k[r, d] = acc_k[r, d] * (scale * T.exp(G[r]))
            T.gemm(M_s, k_s, acc_k)
            T.copy(acc_k, dq[bb, t0:t0 + BT, bh, :])
            # dK = (dP * E)^T Q + diag(f) U dS'^T + ...
            T.gemm(M_s, q_s, dk_acc, transpose_A=True, clear_accum=True)
            T.gemm(U_s, dS_s, acc_k, transpose_B=True, clear_accum=True)
            for r, d in T.Parallel(BT, DK):
                dk_acc[r, d] = dk_acc[r, d] + T.exp(G[last] - G[r]) * acc_k[r, d]
            # dW = -dU S^T, then X^T dW and X^T dU
            T.gemm(du_s, S_s, acc_k, transpose_B=True, clear_accum=True)
            for r, d in T.Parallel(BT, DK):
                dW_s[r, d] = -acc_k[r, d]
            T.gemm(Xh, dW_s, acc_k, transpose_A=True, clear_accum=True)   # X^T dW
            T.gemm(Xh, du_s, acc_v, transpose_A=True, clear_accum=True)   # X^T dU
            for r, d in T.Parallel(BT, DK):
                dk_acc[r, d] = dk_acc[r, d] + beta_s[r] * T.exp(G[r]) * acc_k[r, d]
                wk[r, d] = acc_k[r, d] * k_s[r, d]
            T.reduce_sum(wk, r1, dim=1)                 # sum_d (X^T dW) k
            for r, j in T.Parallel(BT, DV):
                wv[r, j] = acc_v[r, j] * v_s[r, j]
            T.reduce_sum(wv, r2, dim=1)                 # sum_j (X^T dU) v
            for r in T.Parallel(BT):
                dG[r] = beta_s[r] * r1[r] * T.exp(G[r])          # d gamma's WY part * gamma
                dbeta_r = T.exp(G[r]) * r1[r] + r2[r]
                r1[r] = dbeta_r
            for r, j in T.Parallel(BT, DV):
                acc_v[r, j] = acc_v[r, j] * beta_s[r]
            T.copy(acc_v, dv[bb, t0:t0 + BT, bh, :])
            # d gamma's output part: scale sum_j dO (Q S)
            T.gemm(q_s, S_s, acc_v, clear_accum=True)
            for r, j in T.Parallel(BT, DV):
                wv[r, j] = acc_v[r, j] * do_s[r, j]
            T.reduce_sum(wv, r2, dim=1)
            for r in T.Parallel(BT):
                dG[r] = dG[r] + scale * r2[r] * T.exp(G[r])
            # dX = dW (beta gamma K)^T + dU (beta V)^T, column i scaled by beta_i (gamma_i);
            # dA = -(X^T dX X^T) below the diagonal
            T.gemm(dW_s, k_s, sq, transpose_B=True, clear_accum=True)
            T.gemm(du_s, v_s, sq2, transpose_B=True, clear_accum=True)
            for r, i in T.Parallel(BT, BT):
                M_s[r, i] = beta_s[i] * (T.exp(G[i]) * sq[r, i] + sq2[r, i])
            T.gemm(Xh, M_s, sq, transpose_A=True, clear_accum=True)       # X^T dX
            T.copy(sq, M_s)
            T.gemm(M_s, Xh, sq, transpose_B=True, clear_accum=True)       # (X^T dX) X^T
            # dA = -sq (r > i); dbeta += sum_i dA KK E; B = dA E beta_r; dE += dA beta_r KK
            for r, i in T.Parallel(BT, BT):
                M_s[r, i] = T.if_then_else(
                    r > i, -sq[r, i] * T.exp(G[r] - G[i]) * beta_s[r], 0)     # B
                dE[r, i] = dE[r, i] + T.if_then_else(
                    r > i, -sq[r, i] * beta_s[r] * KK_s[r, i] * T.exp(G[r] - G[i]), 0)
            for r, i in T.Parallel(BT, BT):
                sq[r, i] = T.if_then_else(r > i, -sq[r, i] * KK_s[r, i] * T.exp(G[r] - G[i]), 0)
            T.reduce_sum(sq, r2, dim=1)
            for r in T.Parallel(BT):
                r1[r] = r1[r] + r2[r]
            T.copy(r1, dbeta[bb, t0:t0 + BT, bh])
            T.gemm(M_s, k_s, dk_acc)
            T.gemm(M_s, k_s, dk_acc, transpose_A=True)
            T.copy(dk_acc, dk[bb, t0:t0 + BT, bh, :])
            # dG = rowsum(dE E) - colsum(dE E) + dgamma gamma - df f, dG_last += ...
            T.reduce_sum(dE, r1, dim=1)
            T.reduce_sum(dE, r3, dim=0)
            for r in T.Parallel(BT):
                dG[r] = dG[r] + r1[r] - r3[r]
            # df_r f_r = f_r sum_j (K dS')[r, j] U[r, j];  dlambda lambda = lambda sum dS' S
            T.gemm(k_s, dS_s, acc_v, clear_accum=True)
            for r, j in T.Parallel(BT, DV):
                wv[r, j] = acc_v[r, j] * U_s[r, j] * T.exp(G[last] - G[r])
            T.reduce_sum(wv, r1, dim=1)
            for d, j in T.Parallel(DK, DV):
                ssum[d, j] = dS_s[d, j] * S_s[d, j]
            T.reduce_sum(ssum, ssum_row, dim=1)
            T.reduce_sum(ssum_row, lam_part, dim=0)
            T.reduce_sum(r1, tot, dim=0)
            for r in T.Parallel(BT):
                dG[r] = dG[r] - r1[r] + T.if_then_else(
                    r == last, tot[0] + lam_part[0] * T.exp(G[last]), 0)
            T.cumsum(dG, dim=0, reverse=True)
            T.copy(dG, dg[bb, t0:t0 + BT, bh])

    return main


def chunk_gated_delta_rule_bwd(q, k, v, g, beta, do, scale=None, initial_state=None,
                               dht=None, chunk_size=64, block_DV=None, threads=128):
    """The gradients of forward.chunk_gated_delta_rule's o (do) and final state (dht, or none)
    with respect to q, k, v, g, beta and the initial state: (dq, dk, dv, dg, dbeta, dh0), dh0
    None without an initial state. The forward's intermediates (w, u, the chunk states, the new
    values) are computed again, as fla's backward does. Five launches. block_DV: the value
    columns one block of the two scans carries; by default the forward's scan_block_DV."""
    B, seq_len, H, DK = q.shape
    DV = v.shape[-1]
    sizes = (B, seq_len, H, DK, DV)
    dtype = str(q.dtype).replace("torch.", "")
    if block_DV is None:
        block_DV = forward.scan_block_DV(B, H, DV, 64, forward._multiprocessors(q))
    common = dict(chunk_size=chunk_size, threads=threads, dtype=dtype)
    g_cum, w, u = forward.chunk_prepare(*sizes, **common)(k, v, g, beta)
    state_in = initial_state if initial_state is not None else \
        forward._unread_state(q, (B, H, DK, DV))
    h, v_new, _ = forward.chunk_state(*sizes, block_DV=block_DV,
                                      use_initial_state=initial_state is not None,
                                      **common)(k, w, u, g_cum, state_in)
    du_local = chunk_bwd_dv_local(*sizes, scale=scale, **common)(
        q, k, g_cum, do)
    ds_final = dht if dht is not None else forward._unread_state(q, (B, H, DK, DV))
    dh, du, dh0 = chunk_bwd_state(*sizes, block_DV=block_DV, scale=scale,
                                  use_final_state_grad=dht is not None, **common)(
        q, k, w, g_cum, do, du_local, ds_final)
    # eight warps where the tiles split over them: its many BT x D accumulators would spill
    # from 128 threads' registers at D = 128
    grads_threads = 256 if chunk_size >= 64 and min(DK, DV) >= 64 else threads
    dq, dk, dv, dg, dbeta = chunk_bwd_grads(*sizes, scale=scale, chunk_size=chunk_size,
                                            threads=grads_threads, dtype=dtype)(
        q, k, v, g_cum, beta, v_new, h, dh, do, du)
    return dq, dk, dv, dg, dbeta, (dh0 if initial_state is not None else None)


def ref_chunk_gradients(q, k, v, g, beta, h0, scale, do, ds_final, chunk_size):
    """Every gradient (dq, dk, dv, dg, dbeta, dh0) of one head's forward, chunk by chunk in
    float64 numpy: q, k [T, DK], v, do [T, DV], g, beta [T], h0, ds_final [DK, DV]. Also
    returns each chunk's (dU, dS') for checking the kernels."""
    f64 = [np.asarray(x, np.float64) for x in (q, k, v, g, beta, h0, do, ds_final)]
    q, k, v, g, beta, h0, do, ds_final = f64
    T_, BT = q.shape[0], chunk_size
    spans = [slice(c * BT, min(T_, (c + 1) * BT)) for c in range(-(-T_ // BT))]
    S, fwd = h0.copy(), []
    for sl in spans:
        d = _chunk_forward(q[sl], k[sl], v[sl], g[sl], beta[sl], S)
        fwd.append((S, d))
        S = d["S1"]
    grads = [np.zeros_like(x) for x in (q, k, v, g, beta)]
    dS1, per_chunk = ds_final.copy(), [None] * len(spans)
    for c in reversed(range(len(spans))):
        sl, (S, d) = spans[c], fwd[c]
        Q, K, V, be, dO = q[sl], k[sl], v[sl], beta[sl], do[sl]
        G, gam, E, X, W, U, P, f, low = (d[n] for n in
                                         ("G", "gam", "E", "X", "W", "U", "P", "f", "low"))
        lam, n = np.exp(G[-1]), len(G)
        dU = scale * P.T @ dO + f[:, None] * (K @ dS1)
        dS = lam * dS1 + scale * Q.T @ (gam[:, None] * dO) - W.T @ dU
        per_chunk[c] = (dU, dS1)
        dP = scale * (dO @ U.T) * np.tril(np.ones((n, n)))
        dQ = scale * gam[:, None] * (dO @ S.T) + (dP * E) @ K
        dK = (dP * E).T @ Q + f[:, None] * (U @ dS1.T)
        dgam = scale * (dO * (Q @ S)).sum(1)
        dW = -dU @ S.T
        XtdW, XtdU = X.T @ dW, X.T @ dU
        dK += (be * gam)[:, None] * XtdW
        dbeta = gam * (XtdW * K).sum(1) + (XtdU * V).sum(1)
        dgam += be * (XtdW * K).sum(1)
        dV = be[:, None] * XtdU
        dX = dW @ ((be * gam)[:, None] * K).T + dU @ (be[:, None] * V).T
        dA = -(X.T @ dX @ X.T) * low
        KK = K @ K.T
        dbeta += (dA * KK * E).sum(1)
        Bm = dA * E * be[:, None]
        dK += Bm @ K + Bm.T @ K
        dE = dP * (Q @ K.T) + dA * be[:, None] * KK
        df = ((K @ dS1) * U).sum(1)
        dG = (dE * E).sum(1) - (dE * E).sum(0) + dgam * gam - df * f
        dG[-1] += (df * f).sum() + (dS1 * S).sum() * lam
        for out, x in zip(grads, (dQ, dK, dV, np.cumsum(dG[::-1])[::-1], dbeta)):
            out[sl] = x
        dS1 = dS
    return (*grads, dS1), per_chunk


def _chunk_forward(q, k, v, g, beta, S):
    n = q.shape[0]
    G = np.cumsum(g)
    gam, low = np.exp(G), np.tril(np.ones((n, n)), -1)
    E = np.exp(np.minimum(G[:, None] - G[None, :], 0)) * np.tril(np.ones((n, n)))
    A = beta[:, None] * (k @ k.T) * E * low
    X = np.linalg.inv(np.eye(n) + A)
    W = X @ ((beta * gam)[:, None] * k)
    U = X @ (beta[:, None] * v) - W @ S
    P = np.tril(q @ k.T) * E
    f = np.exp(G[-1] - G)
    return dict(G=G, gam=gam, E=E, X=X, W=W, U=U, P=P, f=f, low=low,
                S1=np.exp(G[-1]) * S + k.T @ (f[:, None] * U))
