"""Flash attention backward: the gradients dQ, dK, dV of O = softmax(Q K^T / sqrt(d)) V on
[batch, seq, heads, dim] tensors, given dO and the forward's log-sum-exp (flash_attention_lse in
flash_attention.py), in three launches of one program:

1. Delta[b, h, i] = sum_d O[b, i, h, d] * dO[b, i, h, d] per query row, and dQ_accum zeroed
   (both workspaces: T.alloc_global).
2. One block per block_N-row key tile: K and V stay in shared memory while the query tiles
   stream through a T.Pipelined loop. With the probabilities recomputed from the LSE,
   P^T = exp2(K Q^T * scale - LSE) and dS^T = P^T * (V dO^T - Delta), the block accumulates
   dV += P^T dO and dK += dS^T Q in registers and adds its share of dQ = dS K into the float32
   dQ_accum with atomics (every key tile contributes to every query row it sees).
3. dQ = dQ_accum, converted to the input dtype.

Working in the transposed orientation (keys as rows) keeps P^T and dS^T in the layout the dV and
dK gemms take as their register operand, as the forward keeps P for its PV gemm. `is_causal`
skips the query tiles wholly above the diagonal and masks the diagonal ones; seq_len need not be
a multiple of the tiles (rows past it load as zeros and contribute nothing).
"""
import argparse
import os
import sys

import numpy as np

import tilecraft
import tilecraft.language as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flash_attention import FAST_MATH, LOG2E, flash_attention_lse  # noqa: E402


@tilecraft.jit(out_idx=[-3, -2, -1], pass_configs=FAST_MATH)
def flash_attention_bwd(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64,
                        num_stages=1, threads=128, dtype="float16", accum_dtype="float"):
    sm_scale = (1.0 / dim) ** 0.5
    scale = sm_scale * LOG2E  # the forward's scale, in base 2
    shape = [batch, seq_len, heads, dim]
    rows = [batch, heads, seq_len]

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             O: T.Tensor(shape, dtype), dO: T.Tensor(shape, dtype),
             LSE: T.Tensor(rows, accum_dtype), dQ: T.Tensor(shape, dtype),
             dK: T.Tensor(shape, dtype), dV: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            # Workspaces of the three launches, made by the launcher at each call.
            Delta = T.alloc_global(rows, accum_dtype)
            dQ_accum = T.alloc_global(shape, accum_dtype)
            prod = T.alloc_fragment([block_M, dim], accum_dtype)
            delta = T.alloc_fragment([block_M], accum_dtype)
            for i, j in T.Parallel(block_M, dim):
                prod[i, j] = T.cast(O[bz, bx * block_M + i, by, j], accum_dtype) * \
                    T.cast(dO[bz, bx * block_M + i, by, j], accum_dtype)
            T.reduce_sum(prod, delta, dim=1)
            T.copy(delta, Delta[bz, by, bx * block_M:(bx + 1) * block_M])
            T.clear(prod)
            T.copy(prod, dQ_accum[bz, bx * block_M:(bx + 1) * block_M, by, :])

        with T.Kernel(T.ceildiv(seq_len, block_N), heads, batch, threads=threads) as (bx, by, bz):
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            dO_shared = T.alloc_shared([block_M, dim], dtype)
            lse_shared = T.alloc_shared([block_M], accum_dtype)
            delta_shared = T.alloc_shared([block_M], accum_dtype)
            dsT_shared = T.alloc_shared([block_N, block_M], dtype)
            pT = T.alloc_fragment([block_N, block_M], accum_dtype)
            pT_cast = T.alloc_fragment([block_N, block_M], dtype)
            dsT = T.alloc_fragment([block_N, block_M], accum_dtype)
            dsT_cast = T.alloc_fragment([block_N, block_M], dtype)
            dv = T.alloc_fragment([block_N, dim], accum_dtype)
            dk = T.alloc_fragment([block_N, dim], accum_dtype)
            dq = T.alloc_fragment([block_M, dim], accum_dtype)

            T.copy(K[bz, bx * block_N:(bx + 1) * block_N, by, :], K_shared)
            T.copy(V[bz, bx * block_N:(bx + 1) * block_N, by, :], V_shared)
            T.clear(dv)
            T.clear(dk)
            # A causal key tile is seen only by the query rows at or below its first row.
            first = bx * block_N // block_M if is_causal else 0
            for k in T.Pipelined(first, T.ceildiv(seq_len, block_M), num_stages=num_stages):
                T.copy(Q[bz, k * block_M:(k + 1) * block_M, by, :], Q_shared)
                T.copy(dO[bz, k * block_M:(k + 1) * block_M, by, :], dO_shared)
                T.copy(LSE[bz, by, k * block_M:(k + 1) * block_M], lse_shared)
                T.copy(Delta[bz, by, k * block_M:(k + 1) * block_M], delta_shared)
                T.clear(pT)
                T.clear(dsT)
                T.gemm(K_shared, Q_shared, pT, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.gemm(V_shared, dO_shared, dsT, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_N, block_M):
                    if is_causal:
                        pT[i, j] = T.if_then_else(bx * block_N + i <= k * block_M + j,
                                                  T.exp2(pT[i, j] * scale - lse_shared[j]), 0)
                    else:
                        pT[i, j] = T.exp2(pT[i, j] * scale - lse_shared[j])
                for i, j in T.Parallel(block_N, block_M):
                    dsT[i, j] = pT[i, j] * (dsT[i, j] - delta_shared[j]) * sm_scale
                T.copy(pT, pT_cast)
                T.copy(dsT, dsT_cast)
                T.gemm(pT_cast, dO_shared, dv, policy=T.GemmWarpPolicy.FullRow)
                T.gemm(dsT_cast, Q_shared, dk, policy=T.GemmWarpPolicy.FullRow)
                T.copy(dsT_cast, dsT_shared)
                T.clear(dq)
                T.gemm(dsT_shared, K_shared, dq, transpose_A=True, policy=T.GemmWarpPolicy.FullCol)
                T.atomic_add(dQ_accum[bz, k * block_M:(k + 1) * block_M, by, :], dq)
            T.copy(dv, dV[bz, bx * block_N:(bx + 1) * block_N, by, :])
            T.copy(dk, dK[bz, bx * block_N:(bx + 1) * block_N, by, :])

        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            acc = T.alloc_fragment([block_M, dim], accum_dtype)
            T.copy(dQ_accum[bz, bx * block_M:(bx + 1) * block_M, by, :], acc)
            T.copy(acc, dQ[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


_differentiable = {}


def attention(query, key, value, is_causal=False):
    """torch.nn.functional.scaled_dot_product_attention's call for float16 torch tensors of shape
    (batch, heads, seq, dim), default scale, no mask or dropout: the forward above with its LSE
    and this backward paired into one differentiable operator (tilecraft.differentiable), so
    loss.backward() and torch.compile go through both."""
    batch, heads, seq_len, dim = query.shape
    shape_key = (batch, heads, seq_len, dim, bool(is_causal))
    if shape_key not in _differentiable:
        forward = flash_attention_lse(*shape_key)
        backward = flash_attention_bwd(*shape_key)

        def grads(Q, K, V, O, LSE, dO, dLSE):   # saved tensors, then the outputs' gradients
            return backward(Q, K, V, O, dO.contiguous(), LSE)
        _differentiable[shape_key] = tilecraft.differentiable(forward, grads)
    q, k, v = (x.transpose(1, 2).contiguous() for x in (query, key, value))
    out, _ = _differentiable[shape_key](q, k, v)
    return out.transpose(1, 2)


def ref_grads(Q, K, V, dO, is_causal):
    """(dQ, dK, dV) of dense attention in float64 on [batch, seq, heads, dim] inputs."""
    q, k, v, do = (x.astype(np.float64) for x in (Q, K, V, dO))
    sm_scale = 1 / np.sqrt(q.shape[-1])
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * sm_scale
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, v)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) * sm_scale
    dq = np.einsum("bhqk,bkhd->bqhd", ds, k)
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q)
    return dq, dk, dv


def run(batch=1, heads=2, seq_len=100, dim=32, is_causal=False, seed=0, **config):
    """The forward (with its LSE) and the backward on random inputs, checked against float64
    gradients; returns the largest relative error (norm of the difference over the norm)."""
    rng = np.random.default_rng(seed)
    shape = (batch, seq_len, heads, dim)
    Q, K, V, dO = (rng.standard_normal(shape).astype(np.float16) for _ in range(4))
    O, LSE = flash_attention_lse(batch, heads, seq_len, dim, is_causal)(Q, K, V)
    kernel = flash_attention_bwd(batch, heads, seq_len, dim, is_causal, **config)
    got = kernel(Q, K, V, O, dO, LSE)
    errors = []
    for name, g, want in zip(("dQ", "dK", "dV"), got, ref_grads(Q, K, V, dO, is_causal)):
        assert g.shape == want.shape and g.dtype == np.float16, name
        err = float(np.linalg.norm(g.astype(np.float64) - want) / np.linalg.norm(want))
        assert err < 1e-2, (name, err)
        errors.append(err)
    return max(errors)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=100)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--is_causal", action="store_true")
    args = parser.parse_args()
    err = run(args.batch, args.heads, args.seq_len, args.dim, args.is_causal)
    print(f"flash_attention_bwd (causal={args.is_causal}): ok (max relative error {err:.2e})")
