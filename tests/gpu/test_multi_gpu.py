"""Two GPUs. Kernels run on the device their tensors are on: the GEMM, MHA and MLA examples on
cuda:1 while cuda:0 is current (by the checked and the planned call path, on fresh random
inputs with poisoned outputs, against float32 torch), on cuda:1's current stream, inside CUDA
graphs captured on cuda:1, and timed there by the profiler; cuda:0 stays current. Tensors on
two GPUs are refused with their names. The autotuner measures on both GPUs and keeps its result
per GPU model. Skipped unless two GPUs are present. The example runners are
bench/bench_multi_gpu.py's, which a 2-GPU host runs as the issue's check."""
import pathlib
import sys

import pytest

from gpu_requirements import require_cuda

torch = require_cuda()
if torch.cuda.device_count() < 2:
    pytest.skip("needs two GPUs", allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import bench_multi_gpu as multi  # noqa: E402
from gpu_helpers import capture  # noqa: E402
import tilecraft  # noqa: E402
from tilecraft.backends.cuda.runtime import driver, launcher  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402

ONE = "cuda:1"


@pytest.fixture(autouse=True)
def current_is_cuda0():
    torch.cuda.set_device(0)
    yield
    assert torch.cuda.current_device() == 0                   # a launch elsewhere left it so
    assert driver.current_context() == driver.primary_context(0)


@pytest.mark.parametrize("name", ["gemm", "mha", "mla"])
def test_examples_on_the_second_gpu(name):
    kernel, shapes, out_shape, reference = multi.examples(quick=True)[name]
    assert multi.check_example(kernel, shapes, out_shape, reference, ONE, calls=3) < 1e-2


def test_an_allocated_output_is_on_the_inputs_gpu():
    found = multi.out_idx_device(ONE)
    assert found["device"] == ONE and found["rel_error"] < 1e-2


def test_tensors_on_two_gpus_are_refused_with_their_names():
    message = multi.mixed_device_error(ONE)
    assert "its tensor arguments are on 2 devices: A on cuda:0; B on cuda:1" in message


def test_a_launch_goes_to_the_current_stream_of_the_tensors_gpu():
    """cuda:1's current stream is a side stream that sleeps, then refills A; the kernel, called
    while cuda:0 is current, must queue behind the refill there."""
    kernel = tilecraft.compile(underlying(multi.matmul)(512, 256, 128), out_idx=[-1])
    a = torch.randn(512, 128, device=ONE, dtype=torch.float16)
    b = torch.randn(128, 256, device=ONE, dtype=torch.float16)
    fresh = torch.randn(512, 128, device=ONE, dtype=torch.float16)
    kernel(a, b)                                              # loaded and planned
    side = torch.cuda.Stream(device=ONE)
    with torch.cuda.stream(side):                             # cuda:1 current, side its stream
        side.wait_stream(torch.cuda.default_stream(ONE))
        torch.cuda._sleep(200_000_000)
        a.copy_(fresh)
        with torch.cuda.device(0):
            assert launcher.torch_stream(1) == side.cuda_stream
            c = kernel(a, b)
    side.synchronize()
    assert multi.rel_error(c, fresh.float() @ b.float()) < 5e-3


@pytest.mark.parametrize("first_call_in_capture", [False, True])
def test_a_graph_captured_on_the_second_gpu_replays_there(first_call_in_capture):
    M, N, K = 1000, 520, 300
    kernel = tilecraft.compile(underlying(multi.matmul)(M, N, K), out_idx=[-1])
    a = torch.randn(M, K, device=ONE, dtype=torch.float16)
    b = torch.randn(K, N, device=ONE, dtype=torch.float16)
    if first_call_in_capture:
        with torch.cuda.device(1):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                c = kernel(a, b)
    else:
        with torch.cuda.device(1):
            graph, c = capture(lambda: kernel(a, b))
    assert c.device == torch.device(ONE)
    for _ in range(2):                                        # replayed while cuda:0 is current
        a.copy_(torch.randn(M, K, device=ONE))
        b.copy_(torch.randn(K, N, device=ONE))
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize(ONE)
        assert multi.rel_error(c, a.float() @ b.float()) < 5e-3


def test_the_profiler_times_on_the_inputs_gpu():
    """A 4096^3 GEMM takes well over 0.1 ms on any GPU: events recorded on cuda:0 around a
    launch on cuda:1 would time next to nothing."""
    n = 4096
    kernel = multi.matmul(n, n, n)
    a = torch.randn(n, n, device=ONE, dtype=torch.float16)
    ms = kernel.get_profiler().do_bench(warmup=2, rep=5, input_tensors=[a, a])
    assert ms > 2 * n ** 3 / 2e15 * 1e3


def test_the_tuner_measures_on_both_gpus_and_keeps_the_result_per_model(monkeypatch, tmp_path):
    from tilecraft.autotuner import measure
    if measure.device_name("cuda", 0) != measure.device_name("cuda", 1):
        pytest.skip("the two GPUs are different models: each tunes alone")
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILECRAFT_DISABLE_CACHE", raising=False)
    monkeypatch.delenv("TILECRAFT_AUTOTUNE_GPUS", raising=False)
    configs = [{"block_M": m, "block_N": n, "num_stages": k} for m in (64, 128)
               for n in (64, 128) for k in (2, 3)]

    def tuner():
        return tilecraft.autotune(configs=configs, ref_prog=multi.ref_matmul, warmup=5, rep=20,
                                  verbose=False)(multi.matmul)
    both = tuner().tune(2048, 2048, 1024)
    assert both.gpus == 2 and not both.from_cache
    assert [t.status for t in both.trials] == ["ok"] * len(configs)
    assert all(t.latency_ms > 0 for t in both.trials)
    for where in ("cuda:0", ONE):                             # the winner runs on either GPU
        a = torch.randn(2048, 1024, device=where, dtype=torch.float16)
        b = torch.randn(1024, 2048, device=where, dtype=torch.float16)
        assert multi.rel_error(both.kernel(a, b), a.float() @ b.float()) < 5e-3
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_GPUS", "1")
    alone = tuner().tune(2048, 2048, 1024)                    # one GPU of the model
    assert alone.from_cache and alone.key == both.key and alone.config == both.config
