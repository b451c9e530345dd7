"""The chunked gated delta net backward (examples/chunk_gated_delta_net_bwd.py): its chunk-by-
chunk gradients in float64 against autograd of the per-token recurrence, and its kernels (the
state-gradient scan, the per-chunk gradients; on the interpreter and the sm_80 / sm_90a
thread-level emulators) and its entry point against those gradients, at a ragged sequence
length, with an initial state and a final state gradient."""
import numpy as np
import pytest

import tilecraft

B, T_, H, DK, DV, BT = 1, 70, 2, 32, 48, 32   # ragged: two chunks of 32 and one of 6


@pytest.fixture
def problem(example):
    gdn = example("chunk_gated_delta_net")
    bwd = example("chunk_gated_delta_net_bwd")
    q, k, v, g, beta = gdn.make_inputs(B, T_, H, DK, DV, seed=3)
    rng = np.random.default_rng(4)
    h0 = rng.standard_normal((B, H, DK, DV)).astype(np.float32)
    do = rng.standard_normal((B, T_, H, DV)).astype(np.float16)
    ds_final = rng.standard_normal((B, H, DK, DV)).astype(np.float32)
    return gdn, bwd, (q, k, v, g, beta, h0, do, ds_final)


def test_chunked_gradients_match_autograd(problem):
    torch = pytest.importorskip("torch")
    gdn, bwd, (q, k, v, g, beta, h0, do, ds_final) = problem
    scale = DK ** -0.5
    ins = [torch.tensor(x.astype(np.float64), requires_grad=True)
           for x in (q, k, v, g, beta, h0)]
    S = ins[5].clone()
    outs = []
    for t in range(T_):
        S = S * torch.exp(ins[3][:, t])[:, :, None, None]
        kt, vt = ins[1][:, t], ins[2][:, t]
        err = vt - torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + ins[4][:, t][:, :, None, None] * kt[..., :, None] * err[..., None, :]
        outs.append(scale * torch.einsum("bhkv,bhk->bhv", S, ins[0][:, t]))
    o = torch.stack(outs, 1)
    ((o * torch.tensor(do.astype(np.float64))).sum() +
     (S * torch.tensor(ds_final.astype(np.float64))).sum()).backward()
    for h in range(H):
        got, _ = bwd.ref_chunk_gradients(q[0, :, h], k[0, :, h], v[0, :, h], g[0, :, h],
                                         beta[0, :, h], h0[0, h], scale, do[0, :, h],
                                         ds_final[0, h], BT)
        want = [x.grad.numpy() for x in ins]
        want = [want[0][0, :, h], want[1][0, :, h], want[2][0, :, h], want[3][0, :, h],
                want[4][0, :, h], want[5][0, h]]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_state_gradient_scan(problem, target):
    gdn, bwd, (q, k, v, g, beta, h0, do, ds_final) = problem
    sizes = (B, T_, H, DK, DV)
    prepare = gdn.chunk_prepare.__wrapped__(*sizes, chunk_size=BT)
    g_cum, w, _ = tilecraft.compile(prepare, out_idx=[-3, -2, -1], target="interp")(
        k, v, g, beta)
    local = tilecraft.compile(bwd.chunk_bwd_dv_local.__wrapped__(*sizes, chunk_size=BT,
                                                                 block_DV=32),
                              out_idx=[-1], target=target)
    du_local = local(q, k, g_cum, do)
    scan = tilecraft.compile(bwd.chunk_bwd_state.__wrapped__(
        *sizes, chunk_size=BT, block_DV=32, use_final_state_grad=True),
        out_idx=[-3, -2, -1], target=target)
    dh, du, dh0 = scan(q, k, w, g_cum, do, du_local, ds_final)
    if target.startswith("emulator"):
        assert local.reports == [] and scan.reports == []
    for h in range(H):
        grads, chunks = bwd.ref_chunk_gradients(q[0, :, h], k[0, :, h], v[0, :, h], g[0, :, h],
                                                beta[0, :, h], h0[0, h], DK ** -0.5,
                                                do[0, :, h], ds_final[0, h], BT)
        want_du = np.concatenate([c[0] for c in chunks])
        close = dict(rtol=2e-2, atol=2e-2 * np.abs(want_du).max())
        np.testing.assert_allclose(du[0, :, h].astype(np.float64), want_du, **close)
        for c, (_, ds1) in enumerate(chunks):
            np.testing.assert_allclose(dh[0, c, h].astype(np.float64), ds1, rtol=2e-2,
                                       atol=2e-2 * np.abs(ds1).max())
        np.testing.assert_allclose(dh0[0, h], grads[5], rtol=2e-2,
                                   atol=2e-2 * np.abs(grads[5]).max())


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_chunk_gradients_kernel(problem, target):
    """chunk_bwd_grads from the forward's and the scan's results (each computed on the
    interpreter) against the float64 chunked gradients."""
    gdn, bwd, (q, k, v, g, beta, h0, do, ds_final) = problem
    sizes, interp = (B, T_, H, DK, DV), dict(target="interp")
    g_cum, w, u = tilecraft.compile(gdn.chunk_prepare.__wrapped__(*sizes, chunk_size=BT),
                                    out_idx=[-3, -2, -1], **interp)(k, v, g, beta)
    h, v_new, _ = tilecraft.compile(gdn.chunk_state.__wrapped__(
        *sizes, chunk_size=BT, block_DV=32, use_initial_state=True), out_idx=[-3, -2, -1],
        **interp)(k, w, u, g_cum, h0)
    du_local = tilecraft.compile(bwd.chunk_bwd_dv_local.__wrapped__(
        *sizes, chunk_size=BT, block_DV=32), out_idx=[-1], **interp)(q, k, g_cum, do)
    dh, du, _ = tilecraft.compile(bwd.chunk_bwd_state.__wrapped__(
        *sizes, chunk_size=BT, block_DV=32, use_final_state_grad=True), out_idx=[-3, -2, -1],
        **interp)(q, k, w, g_cum, do, du_local, ds_final)
    kernel = tilecraft.compile(bwd.chunk_bwd_grads.__wrapped__(*sizes, chunk_size=BT,
                                                               threads=128),
                               out_idx=[-5, -4, -3, -2, -1], target=target)
    got = kernel(q, k, v, g_cum, beta, v_new, h, dh, do, du)
    if target.startswith("emulator"):
        assert kernel.reports == []
    for hh in range(H):
        want, _ = bwd.ref_chunk_gradients(q[0, :, hh], k[0, :, hh], v[0, :, hh], g[0, :, hh],
                                          beta[0, :, hh], h0[0, hh], DK ** -0.5, do[0, :, hh],
                                          ds_final[0, hh], BT)
        for name, x, ref in zip(["dq", "dk", "dv", "dg", "dbeta"], got, want):
            x = x[0, :, hh].astype(np.float64)
            assert np.linalg.norm(x - ref) / np.linalg.norm(ref) < 5e-3, name


def test_backward_entry_point(problem):
    """chunk_gated_delta_rule_bwd (five launches on the interpreter) gives every gradient."""
    gdn, bwd, (q, k, v, g, beta, h0, do, ds_final) = problem
    got = bwd.chunk_gated_delta_rule_bwd(q, k, v, g, beta, do, initial_state=h0,
                                         dht=ds_final, chunk_size=BT, block_DV=32)
    for hh in range(H):
        want, _ = bwd.ref_chunk_gradients(q[0, :, hh], k[0, :, hh], v[0, :, hh], g[0, :, hh],
                                          beta[0, :, hh], h0[0, hh], DK ** -0.5, do[0, :, hh],
                                          ds_final[0, hh], BT)
        for x, ref in zip(got[:5], want[:5]):
            x = x[0, :, hh].astype(np.float64)
            assert np.linalg.norm(x - ref) / np.linalg.norm(ref) < 5e-3
        np.testing.assert_allclose(got[5][0, hh], want[5], rtol=2e-2,
                                   atol=2e-2 * np.abs(want[5]).max())
    none = bwd.chunk_gated_delta_rule_bwd(q, k, v, g, beta, do, chunk_size=BT, block_DV=32)
    assert none[5] is None and np.isfinite(none[0].astype(np.float32)).all()
