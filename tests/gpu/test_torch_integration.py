"""Compiled kernels inside torch programs on the GPU (tilecraft/torch_op.py): torch.compile with
fullgraph, also under mode="reduce-overhead" (CUDA graphs), and the attention example's
forward and backward as one autograd operator against SDPA's math backend, through a few
steps of training. Random inputs, ragged lengths."""
import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from gpu_helpers import rel_error  # noqa: E402


def _gemm(example, M, N, K):
    return tilecraft.compile(underlying(example("gemm").matmul)(
        M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=256), out_idx=[-1])


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_function_calls_the_gemm_in_its_graph(example, mode):
    M, N, K = 300, 260, 192
    gemm = _gemm(example, M, N, K)

    def f(a, b, bias):
        return torch.relu(gemm(a, b) + bias)
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    kwargs = dict(mode=mode) if mode else dict(backend=counting)
    g = torch.compile(f, fullgraph=True, **kwargs)
    for _ in range(4):
        a = torch.rand(M, K, device="cuda").sub_(0.5).half()
        b = torch.rand(K, N, device="cuda").sub_(0.5).half()
        bias = torch.randn(N, device="cuda").half()
        got = g(a, b, bias).clone()     # CUDA graphs reuse their output memory
        want = torch.relu(a.double() @ b.double() + bias.double())
        assert rel_error(got, want) < 1e-2
    if mode is None:
        assert len(graphs) == 1


@pytest.mark.parametrize("seq_len, is_causal", [(200, False), (333, True)])
def test_attention_gradients_match_sdpa_math(example, seq_len, is_causal):
    attention = example("flash_attention_bwd").attention
    shape = (2, 4, seq_len, 64)
    q, k, v, w = (torch.randn(shape, device="cuda").half() for _ in range(4))
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = [x.float().requires_grad_() for x in (q, k, v)]
    out = attention(*ours, is_causal=is_causal)
    (out.float() * w.float()).sum().backward()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        want = torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=is_causal)
    (want * w.float()).sum().backward()
    assert rel_error(out, want) < 5e-3
    for a, b in zip(ours, ref):
        assert rel_error(a.grad, b.grad) < 1e-2


class TwoLayerAttention(torch.nn.Module):
    """Two self-attention layers with projections, attention given as a function."""

    def __init__(self, dim, heads, attend):
        super().__init__()
        self.heads, self.attend = heads, attend
        self.layers = torch.nn.ModuleList(
            torch.nn.ModuleDict({"qkv": torch.nn.Linear(dim, 3 * dim),
                                 "out": torch.nn.Linear(dim, dim)}) for _ in range(2))

    def forward(self, x):
        b, s, d = x.shape
        for layer in self.layers:
            q, k, v = layer["qkv"](x).view(b, s, 3, self.heads, d // self.heads).unbind(2)
            a = self.attend(*(t.transpose(1, 2) for t in (q, k, v)))
            x = x + layer["out"](a.transpose(1, 2).reshape(b, s, d))
        return x


def test_training_steps_follow_the_sdpa_model(example):
    attention = example("flash_attention_bwd").attention
    torch.manual_seed(0)
    x = torch.randn(2, 130, 256, device="cuda").half()
    target = torch.randn(2, 130, 256, device="cuda").half()
    models = [TwoLayerAttention(256, 4, lambda q, k, v: attention(q, k, v, is_causal=True)),
              TwoLayerAttention(256, 4, lambda q, k, v: torch.nn.functional.
                                scaled_dot_product_attention(q, k, v, is_causal=True))]
    models[1].load_state_dict(models[0].state_dict())
    losses = []
    for model in models:
        model.cuda().half()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        curve = []
        for _ in range(5):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x).float(), target.float())
            loss.backward()
            opt.step()
            curve.append(loss.item())
        losses.append(curve)
    ours, theirs = losses
    assert ours[-1] < ours[0]
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= 2e-2 * abs(b), (ours, theirs)
