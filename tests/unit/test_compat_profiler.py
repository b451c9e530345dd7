"""TileLang's timer as its examples call it: `from tilecraft.profiler import do_bench`, with
warmup / rep as millisecond budgets, _n_warmup / _n_repeat counts, return_mode, quantiles,
early_stop_baseline and grad_to_none; the kernel profiler's do_bench with the same rules and
dynamic_symbolic_constraints. Options the timer cannot honour are refused by name. Timed here
by the host clock (no GPU in CI): the CUDA-event path is exercised by tests/gpu. The functions
that "sleep" advance a fake host clock instead, so the counts the budgets give do not depend on
how loaded the machine is."""
import types

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError
from tilecraft.profiler import bench as bench_module
from tilecraft.profiler import do_bench


class FakeClock:
    now = 0.0

    def perf_counter(self):
        return self.now


@pytest.fixture
def Sleeper(monkeypatch):  # noqa: N802 - used as the class it makes
    """Functions that take the next of `ms` (the last repeated) on the timer's host clock,
    advanced by them instead of by sleeping, and count their calls."""
    clock = FakeClock()
    monkeypatch.setattr(bench_module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))

    class Sleeper:
        def __init__(self, *ms):
            self.ms, self.calls = list(ms), 0

        def __call__(self):
            self.calls += 1
            clock.now += self.ms[min(self.calls, len(self.ms)) - 1] / 1e3
    return Sleeper


def test_budgets_become_run_counts_from_an_estimate(Sleeper):
    fn = Sleeper(2.0)
    ms = do_bench(fn, warmup=10, rep=20)
    assert ms == pytest.approx(2.0)
    # one first run, five to estimate (2 ms < the 5 ms a single run must take to estimate
    # alone), then 10 / 2 warmup and 20 / 2 timed runs
    assert fn.calls == 1 + 5 + 5 + 10


def test_counts_override_the_budgets(Sleeper):
    fn = Sleeper(0.1)
    do_bench(fn, warmup=1000, rep=1000, _n_warmup=2, _n_repeat=4)
    assert fn.calls == 1 + 2 + 4   # both counts given: no estimate runs


def test_return_mode_and_quantiles(Sleeper):
    # first run, one warmup, then timed runs of 5, 10, 15 and 20 ms
    times = (5.0, 5.0, 5.0, 10.0, 15.0, 20.0)
    lo = do_bench(Sleeper(*times), _n_warmup=1, _n_repeat=4, return_mode="min")
    hi = do_bench(Sleeper(*times), _n_warmup=1, _n_repeat=4, return_mode="max")
    mid = do_bench(Sleeper(*times), _n_warmup=1, _n_repeat=4, return_mode="median")
    mean = do_bench(Sleeper(*times), _n_warmup=1, _n_repeat=4)   # TileLang's default: mean
    assert (lo, mid, hi, mean) == pytest.approx((5.0, 12.5, 20.0, 12.5))
    q = do_bench(Sleeper(*times), _n_warmup=1, _n_repeat=4, quantiles=[0.0, 1.0])
    assert isinstance(q, list) and q == pytest.approx([5.0, 20.0])
    one = do_bench(Sleeper(*times), _n_warmup=1, _n_repeat=4, quantiles=[0.0])
    assert isinstance(one, float) and one == pytest.approx(5.0)   # one quantile: one number


def test_early_stop_returns_the_estimate(Sleeper):
    fn = Sleeper(3.0)
    ms = do_bench(fn, early_stop_baseline=1.0)
    assert ms == pytest.approx(3.0) and fn.calls == 1 + 5   # stopped after the estimate
    slow = Sleeper(6.0)   # a run of 5 ms or more is the estimate by itself
    assert do_bench(slow, early_stop_baseline=1.0) == pytest.approx(6.0) and slow.calls == 1
    assert do_bench(Sleeper(3.0), early_stop_baseline=1.0, quantiles=[0.2, 0.8]) == \
        [pytest.approx(3.0)] * 2   # every quantile is the one estimate


def test_wall_backend_and_grad_to_none():
    torch = pytest.importorskip("torch")
    x = torch.ones(4, requires_grad=True)
    seen = []

    def step():
        seen.append(x.grad is None)
        (x * 2).sum().backward()

    do_bench(step, backend="wall", _n_warmup=1, _n_repeat=3, grad_to_none=[x])
    assert seen[-3:] == [True, True, True]   # cleared before every timed run
    assert seen[:2] == [True, False]         # not between the untimed ones


@pytest.mark.parametrize("options,message", [
    ({"return_mode": "average"}, "return_mode must be one of min, max, mean, median"),
    ({"quantiles": [0.5, 1.5]}, "quantiles must be a non-empty list of numbers in [0, 1]"),
    ({"quantiles": []}, "quantiles must be a non-empty list"),
    ({"backend": "cupti"}, "backend='cupti' (CUPTI kernel-time profiling) is not supported yet"),
    ({"backend": "cudagraph"}, "backend='cudagraph' (CUDA-graph replay) is not supported yet"),
    ({"backend": "nsys"}, "backend must be one of event, wall"),
    ({"warmup": -1}, "warmup is a time budget in milliseconds"),
    ({"rep": "100"}, "rep is a time budget in milliseconds"),
    ({"_n_repeat": 2.5}, "n_repeat is a run count"),
    ({"cache_size": 0}, "cache_size is the L2 flush buffer in MiB"),
    ({"early_stop_baseline": "1"}, "early_stop_baseline is milliseconds or None"),
])
def test_options_it_cannot_take_are_refused(options, message, Sleeper):
    fn = Sleeper(0.0)
    with pytest.raises(TileError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        do_bench(fn, **options)
    assert fn.calls == 0   # refused before anything ran


def test_a_gpu_asked_for_where_there_is_none_is_refused():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(TileError, match="torch sees no CUDA GPU"):
        do_bench(lambda: None, device="cuda:0")
    with pytest.raises(TileError, match="must be callable"):
        do_bench(42)


@tilecraft.jit(out_idx=[-1], target="interp")
def add_one(n=None):
    """B = A + 1 over n elements (a size known at launch where n is None)."""
    n = T.symbolic("n") if n is None else n

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < n:
                    B[bx * 32 + i] = A[bx * 32 + i] + 1
    return main


def test_kernel_profiler_follows_the_same_rules():
    profiler = add_one().get_profiler()
    calls = []
    ref = lambda a: (calls.append(a.shape), a + 1)[1]  # noqa: E731
    ms = profiler.do_bench(ref, n_warmup=1, n_repeat=2, dynamic_symbolic_constraints={"n": 96})
    assert ms >= 0 and calls == [(96,)] * 4   # first, warmup, two timed runs, on n = 96
    kernel_ms = profiler.do_bench(n_warmup=1, n_repeat=1, input_tensors=[np.ones(40, "float32")])
    assert kernel_ms > 0
    q = profiler.do_bench(n_warmup=1, n_repeat=3, quantiles=[0.5, 0.9],
                          input_tensors=[np.ones(8, "float32")])
    assert len(q) == 2 and q[0] <= q[1]
    assert profiler.median_ms(warmup=1, rep=2, input_tensors=[np.ones(8, "float32")]) > 0


def test_kernel_profiler_refusals():
    profiler = add_one().get_profiler()
    with pytest.raises(TileError, match="its shape is symbolic; pass input_tensors, or "
                                        "dynamic_symbolic_constraints"):
        profiler.do_bench()
    with pytest.raises(TileError, match="names m, which no parameter's shape uses"):
        profiler.do_bench(dynamic_symbolic_constraints={"m": 4})
    with pytest.raises(TileError, match=r"dynamic_symbolic_constraints\['n'\] must be a size"):
        profiler.do_bench(dynamic_symbolic_constraints={"n": -1})
    with pytest.raises(TileError, match="not supported yet"):
        profiler.do_bench(backend="cudagraph", input_tensors=[np.ones(8, "float32")])
    with pytest.raises(TileError, match="runs on the host"):
        profiler.do_bench(device="cuda:0", input_tensors=[np.ones(8, "float32")])


def test_run_once_and_top_level_names():
    profiler = add_one().get_profiler()
    out = profiler.run_once(input_tensors=[np.zeros(5, "float32")])
    np.testing.assert_array_equal(out, np.ones(5, "float32"))
    assert tilecraft.Profiler is type(profiler)
    assert tilecraft.TensorSupplyType.Auto == 7


def test_gpu_inputs_import_torch_for_a_script_that_never_did():
    """A TileLang script may never import torch itself (its profiler makes the inputs): moving
    them to torch tensors imports torch then, where it had answered None."""
    import subprocess
    import sys
    pytest.importorskip("torch")
    code = ("import sys, numpy as np\n"
            "from tilecraft import arrays\n"
            "assert 'torch' not in sys.modules\n"
            "t = arrays.from_numpy(np.arange(4, dtype=np.float16), True)\n"
            "print(type(t).__module__, t.dtype, t.tolist())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torch", "torch.float16", "[0.0,", "1.0,", "2.0,", "3.0]"]


def test_func_manual_assert_close_and_assert_consistent():
    """TileLang's other Profiler members: func (the kernel, as its examples call it),
    manual_assert_close with the user's check, assert_consistent over repeated runs (a kernel
    whose outputs drift between runs fails it)."""
    profiler = add_one(48).get_profiler()
    x = np.arange(48, dtype=np.float32)
    np.testing.assert_array_equal(profiler.func(x), x + 1)
    seen = []
    profiler.manual_assert_close(lambda a: a + 1, input_tensors=[x],
                                 manual_check_prog=lambda got, want: seen.append(
                                     (np.array_equal(got[0], want[0]), len(got))))
    assert seen == [(True, 1)]
    with pytest.raises(AssertionError):
        profiler.manual_assert_close(lambda a: a + 2, input_tensors=[x],
                                     manual_check_prog=lambda got, want: np.testing.
                                     assert_array_equal(got[0], want[0]))
    with pytest.raises(TileError, match="manual_check_prog must be a function"):
        profiler.manual_assert_close(lambda a: a + 1)
    profiler.assert_consistent(repeat=3)
    kernel = profiler.func

    class Drifting:
        """The kernel, but each run adds its run count (a racy kernel's symptom)."""
        runs = 0

        def __getattr__(self, name):
            return getattr(kernel, name)

        def __call__(self, *args):
            Drifting.runs += 1
            return kernel(*args) + (Drifting.runs > 2)

    profiler.kernel = Drifting()
    with pytest.raises(AssertionError, match="output B of run 3 differs from the first"):
        profiler.assert_consistent(repeat=4)


@pytest.mark.parametrize("supply, mean", [("Normal", -1.0), ("Randn", 0.0)])
def test_normal_inputs_are_drawn_as_tilelang_draws_them(supply, mean):
    """TensorSupplyType.Normal is TileLang's normal(-1, 1) (the tolerances of its examples'
    checks assume it); Randn is the standard normal."""
    from tilecraft.ir import dtypes as dt
    from tilecraft.ir.buffer import Buffer
    from tilecraft.profiler import TensorSupplyType, make_input
    p = Buffer("x", (256, 256), dt.dtype("float32"), "global")
    host = np.asarray(make_input(p, TensorSupplyType[supply], np.random.default_rng(3)))
    assert abs(host.mean() - mean) < 0.02 and abs(host.std() - 1.0) < 0.02
    torch = pytest.importorskip("torch")
    from tilecraft.profiler import TorchRandom
    t = make_input(p, TensorSupplyType[supply], TorchRandom(3, "cpu"))
    assert abs(float(t.mean()) - mean) < 0.02 and abs(float(t.std()) - 1.0) < 0.02
