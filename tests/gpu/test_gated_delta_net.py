"""The chunked gated delta net forward (examples/chunk_gated_delta_net.py) on the GPU against the
per-token recurrence in float64: random inputs, ragged sequence lengths (T not a multiple of
the chunk), with and without an initial state, float16 and bfloat16."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("B, T, H, DK, DV, initial_state, state_block_DV", [
    (2, 100, 2, 64, 64, False, 64),
    (1, 200, 3, 128, 128, True, None),   # the scan's default for few heads: 32 columns
    (1, 37, 1, 128, 64, True, 64),       # shorter than one chunk
])
def test_forward_matches_float64_recurrence(example, dtype, B, T, H, DK, DV, initial_state,
                                            state_block_DV):
    gdn = example("chunk_gated_delta_net")
    q, k, v, g, beta = gdn.make_inputs(B, T, H, DK, DV, seed=T)
    h0 = np.random.default_rng(T).standard_normal((B, H, DK, DV)).astype(np.float32) \
        if initial_state else None
    t = getattr(torch, dtype)

    def dev(x, to=None):
        return torch.from_numpy(x).cuda().to(to or torch.float32)
    o, state = gdn.chunk_gated_delta_rule(
        dev(q, t), dev(k, t), dev(v, t), dev(g), dev(beta),
        initial_state=None if h0 is None else dev(h0), output_final_state=True,
        state_block_DV=state_block_DV)
    # the reference sees the inputs as the kernels do (rounded to dtype)
    as_dtype = [dev(x, t).float().cpu().numpy() for x in (q, k, v)]
    ref_o, ref_state = gdn.ref_program(*as_dtype, g, beta, initial_state=h0)
    o, state = o.float().cpu().numpy(), state.cpu().numpy()
    assert np.isfinite(o).all() and np.isfinite(state).all()
    assert np.linalg.norm(o - ref_o) / np.linalg.norm(ref_o) < 1e-2
    assert np.linalg.norm(state - ref_state) / np.linalg.norm(ref_state) < 1e-2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("B, T, H, D, initial_state", [
    (1, 100, 2, 64, False),
    (2, 150, 2, 128, True),   # ragged, D = 128: chunk_bwd_grads on eight warps
    (3, 90, 24, 128, True),   # 144 scan blocks of 64 columns: more than one wave, persistent
])
def test_backward_matches_float64_chunk_gradients(example, dtype, B, T, H, D, initial_state):
    gdn = example("chunk_gated_delta_net")
    bwd = example("chunk_gated_delta_net_bwd")
    q, k, v, g, beta = gdn.make_inputs(B, T, H, D, D, seed=T + 1)
    rng = np.random.default_rng(T)
    h0 = rng.standard_normal((B, H, D, D)).astype(np.float32) if initial_state else None
    do = rng.standard_normal((B, T, H, D)).astype(np.float32)
    dht = rng.standard_normal((B, H, D, D)).astype(np.float32)
    t = getattr(torch, dtype)

    def dev(x, to=None):
        return torch.from_numpy(x).cuda().to(to or torch.float32)
    args = [dev(q, t), dev(k, t), dev(v, t), dev(g), dev(beta)]
    got = bwd.chunk_gated_delta_rule_bwd(*args, dev(do, t), scale=D ** -0.5,
                                         initial_state=None if h0 is None else dev(h0),
                                         dht=dev(dht))
    assert (got[5] is None) == (h0 is None)
    rounded = [x.float().cpu().numpy() for x in args[:3] + [dev(do, t)]]
    zero = np.zeros((D, D))
    for b in range(B):
        for h in range(H):
            want, _ = bwd.ref_chunk_gradients(
                rounded[0][b, :, h], rounded[1][b, :, h], rounded[2][b, :, h], g[b, :, h],
                beta[b, :, h], zero if h0 is None else h0[b, h], D ** -0.5,
                rounded[3][b, :, h], dht[b, h], 64)
            for name, x, ref in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), got, want):
                if x is None:
                    continue
                x = x.float().cpu().numpy()
                x = x[b, h] if name == "dh0" else x[b, :, h]
                assert np.isfinite(x).all(), name
                err = np.linalg.norm(x - ref) / np.linalg.norm(ref)
                assert err < 1e-2, (name, b, h, err)
