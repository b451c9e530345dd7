"""Gemms over sub-tiles of one shared tile split along K (q[:, :D] and q[:, D:], the form of
MLA's "nope" and "rope" parts) run on wgmma on sm_90a (the descriptors address the tile's
own swizzled layout from a later K start), and gemms accumulating into one fragment always
share an instruction, so the fragment keeps one layout: checked on the Hopper emulator and
the sm_80 one against numpy."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

M, N, D, DT = 64, 64, 128, 64


def split_k(b_layout):
    """P = Q @ KV^T with Q's one shared tile read as Q[:, :D] and Q[:, D:]; KV as two tiles
    stored N x K (b_layout "nk") or as one K x N tile split along its rows ("kn")."""
    @T.prim_func
    def main(Q: T.Tensor((M, D + DT), "float16"), KV: T.Tensor((N, D + DT), "float16"),
             KVt: T.Tensor((D + DT, N), "float16"), P: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            Q_s = T.alloc_shared((M, D + DT), "float16")
            K_s = T.alloc_shared((N, D), "float16")
            Kt_s = T.alloc_shared((N, DT), "float16")
            B_s = T.alloc_shared((D + DT, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(Q[0, 0], Q_s)
            T.clear(acc)
            if b_layout == "nk":
                T.copy(KV[0, 0], K_s)
                T.copy(KV[0, D], Kt_s)
                T.gemm(Q_s[:, :D], K_s, acc, transpose_B=True)
                T.gemm(Q_s[:, D:], Kt_s, acc, transpose_B=True)
            else:
                T.copy(KVt[0, 0], B_s)
                T.gemm(Q_s[:, :D], B_s[:D, :], acc)
                T.gemm(Q_s[:, D:], B_s[D:, :], acc)
            T.copy(acc, P)
    return main


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
@pytest.mark.parametrize("target", ["emulator:sm_90a", "emulator"])
def test_split_k_gemms_agree_with_numpy(target, b_layout):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((M, D + DT)).astype(np.float16)
    kv = rng.standard_normal((N, D + DT)).astype(np.float16)
    p = np.full((M, N), np.nan, np.float32)
    kernel = tilecraft.compile(split_k(b_layout), target=target)
    kernel(q, kv, np.ascontiguousarray(kv.T), p)
    assert not kernel.reports
    np.testing.assert_allclose(p, q.astype(np.float32) @ kv.astype(np.float32).T,
                               rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("b_layout", ["nk", "kn"])
def test_both_halves_run_on_wgmma(b_layout):
    source = tilecraft.compile(split_k(b_layout), target="sm_90a").get_kernel_source()
    assert source.count("wgmma_m64n") >= 2 and "mma_m16n8k16" not in source


def test_one_accumulator_one_instruction():
    """A gemm wgmma cannot run (a sub-tile starting mid-k-step) makes every gemm into the same
    accumulator mma.sync, rather than a layout conflict."""
    @T.prim_func
    def main(Q: T.Tensor((M, 72), "float16"), K: T.Tensor((N, 64), "float16"),
             P: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            Q_s = T.alloc_shared((M, 72), "float16")
            K_s = T.alloc_shared((N, 64), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(Q[0, 0], Q_s)
            T.copy(K[0, 0], K_s)
            T.clear(acc)
            T.gemm(Q_s[:, :64], K_s, acc, transpose_B=True)
            T.gemm(Q_s[:, 8:72], K_s, acc, transpose_B=True)    # starts at k = 8
            T.copy(acc, P)
    kernel = tilecraft.compile(main, target="emulator:sm_90a")
    rng = np.random.default_rng(4)
    q = rng.standard_normal((M, 72)).astype(np.float16)
    k = rng.standard_normal((N, 64)).astype(np.float16)
    p = np.full((M, N), np.nan, np.float32)
    kernel(q, k, p)
    qf, kf = q.astype(np.float32), k.astype(np.float32)
    np.testing.assert_allclose(p, qf[:, :64] @ kf.T + qf[:, 8:] @ kf.T, rtol=1e-3, atol=1e-2)
    source = tilecraft.compile(main, target="sm_90a").get_kernel_source()
    assert "wgmma_m64n" not in source
