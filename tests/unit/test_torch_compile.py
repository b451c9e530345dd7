"""A compiled kernel is a torch operator (tilecraft/torch_op.py): torch.compile traces calls to
it with no graph break and no recompilation per call, in-place kernels included; autograd
refuses to pass a gradient through a kernel with no backward, and tilecraft.differentiable
pairs a forward kernel with its backward, eager and compiled. On CPU tensors, through the
interpreter."""
import pytest

torch = pytest.importorskip("torch")
dynamo = pytest.importorskip("torch._dynamo")

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402

BLOCK = 32


def elementwise(n, body, outputs=1):
    """A kernel over vectors of n float32: body(x, y, i) -> the value stored at i of the
    output (outputs=1), or body(x, i) written back into x (outputs=0)."""
    if outputs:
        @T.prim_func
        def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"),
                 Out: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
                for i in T.Parallel(BLOCK):
                    if bx * BLOCK + i < n:
                        Out[bx * BLOCK + i] = body(X, Y, bx * BLOCK + i)
        return tilecraft.compile(main, out_idx=[-1], target="interp")

    @T.prim_func
    def main(X: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
            for i in T.Parallel(BLOCK):
                if bx * BLOCK + i < n:
                    X[bx * BLOCK + i] = body(X, bx * BLOCK + i)
    return tilecraft.compile(main, target="interp")


def counting_backend(calls):
    """A torch.compile backend that counts the graphs it is given and runs them as traced."""
    def backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward
    return backend


N = 77   # not a multiple of the block: the last block is ragged


@pytest.fixture(scope="module")
def kernels():
    scale_add = elementwise(N, lambda x, y, i: x[i] * 2 + y[i])
    add_one = elementwise(N, lambda x, i: x[i] + 1, outputs=0)
    return scale_add, add_one


def test_two_kernels_trace_into_one_graph_without_breaks(kernels):
    scale_add, add_one = kernels

    def f(x, y):
        z = scale_add(x, y)
        add_one(z)            # in place: the graph must keep it, after scale_add
        return torch.relu(z) * 3
    x, y = torch.randn(N), torch.randn(N)
    want = f(x, y)
    explained = dynamo.explain(f)(x, y)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, \
        explained.break_reasons
    graphs = []
    g = torch.compile(f, fullgraph=True, backend=counting_backend(graphs))
    for _ in range(3):
        x, y = torch.randn(N), torch.randn(N)
        torch.testing.assert_close(g(x, y), f(x, y))
    assert len(graphs) == 1, "recompiled for calls of the same shapes"
    torch.testing.assert_close(g(*_inputs()), f(*_inputs()))
    assert want.shape == (N,)


def _inputs():
    gen = torch.Generator().manual_seed(3)
    return torch.randn(N, generator=gen), torch.randn(N, generator=gen)


def test_inductor_runs_the_kernels_as_written(kernels):
    scale_add, add_one = kernels

    def f(x, y):
        z = scale_add(x + 1, y)
        add_one(z)
        return z.sum()
    x, y = _inputs()
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x, y), f(x, y))


def test_a_symbolic_size_follows_the_inputs():
    n = T.dynamic("n")

    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Out: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
            for i in T.Parallel(BLOCK):
                if bx * BLOCK + i < n:
                    Out[bx * BLOCK + i] = X[bx * BLOCK + i] * X[bx * BLOCK + i]
    square = tilecraft.compile(main, out_idx=[-1], target="interp")
    graphs = []
    g = torch.compile(lambda x: square(x) + 1, fullgraph=True, dynamic=True,
                      backend=counting_backend(graphs))
    for size in (40, 77, 130):
        x = torch.randn(size)
        out = g(x)
        assert out.shape == (size,)
        torch.testing.assert_close(out, x * x + 1)
    assert len(graphs) == 1


def test_a_kernel_without_backward_refuses_a_gradient(kernels):
    scale_add, _ = kernels
    x = torch.randn(N, requires_grad=True)
    out = scale_add(x, torch.randn(N))
    assert out.requires_grad         # recorded by autograd, not silently detached
    with pytest.raises(RuntimeError, match="has no backward"):
        out.sum().backward()
    with torch.no_grad():
        assert not scale_add(x, torch.randn(N)).requires_grad
    # a detached call stays on the kernel's own path
    assert not scale_add(x.detach(), torch.randn(N)).requires_grad


@pytest.fixture(scope="module")
def product():
    multiply = elementwise(N, lambda x, y, i: x[i] * y[i])

    def backward(x, y, grad):        # d(x * y) = grad * y, grad * x, by the same kernel
        return multiply(grad, y), multiply(grad, x)
    return tilecraft.differentiable(multiply, backward, save=("X", "Y"))


@pytest.mark.parametrize("compiled", [False, True])
def test_differentiable_pairs_forward_and_backward(product, compiled):
    weights = torch.linspace(-1, 2, N)

    def loss(x, y):
        return (product(x, y) * weights).sum()
    x = torch.randn(N, requires_grad=True)
    y = torch.randn(N, requires_grad=True)
    run = torch.compile(loss, fullgraph=True, backend="aot_eager") if compiled else loss
    value = run(x, y)
    value.backward()
    torch.testing.assert_close(value, (x * y * weights).sum())
    torch.testing.assert_close(x.grad, y.detach() * weights)
    torch.testing.assert_close(y.grad, x.detach() * weights)


def test_differentiable_checks_what_it_is_given():
    multiply = elementwise(N, lambda x, y, i: x[i] * y[i])
    with pytest.raises(TypeError, match="save names"):
        tilecraft.differentiable(multiply, lambda *a: a, save=("X", "Z"))
    with pytest.raises(TypeError, match="compiled kernel"):
        tilecraft.differentiable(lambda x: x, lambda *a: a)
    add_one = elementwise(N, lambda x, i: x[i] + 1, outputs=0)
    with pytest.raises(TypeError, match="in place"):
        tilecraft.differentiable(add_one, lambda *a: a)
    one_grad = tilecraft.differentiable(multiply, lambda x, y, out, g: g)  # saves X, Y, Out
    x = torch.randn(N, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned 1 gradient"):
        one_grad(x, torch.randn(N)).sum().backward()


def test_the_operator_schema_declares_what_the_kernel_writes(kernels):
    from tilecraft.torch_op import schema
    scale_add, add_one = kernels
    assert schema(scale_add) == "(Tensor X_0, Tensor Y_1) -> Tensor"
    assert schema(add_one) == "(Tensor(a0!) X_0) -> ()"


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_example_is_a_differentiable_drop_in(is_causal):
    """examples/flash_attention_bwd.py's attention() against torch's SDPA (math, float32) on a
    ragged length: outputs and the gradients of all three inputs."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "flash_attention_bwd.py"
    spec = importlib.util.spec_from_file_location("flash_attention_bwd_for_autograd", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gen = torch.Generator().manual_seed(5)
    q, k, v, w = (torch.randn(1, 2, 40, 16, generator=gen).half() for _ in range(4))
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = [x.float().requires_grad_() for x in (q, k, v)]
    out = module.attention(*ours, is_causal=is_causal)
    (out.float() * w.float()).sum().backward()
    want = torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=is_causal)
    (want * w.float()).sum().backward()
    torch.testing.assert_close(out.float(), want, atol=2e-3, rtol=2e-3)
    for a, b in zip(ours, ref):
        assert float((a.grad.float() - b.grad).norm() / b.grad.norm()) < 1e-2
