"""TileLang's class form of autotuning (`from tilecraft.autotuner import AutoTuner`) and
set_autotune_inputs, on the interpreter with a timer the test supplies: the builder tunes a
plain function over the configs, the result carries latency / config / ref_latency / kernel /
func / libcode, and captured inputs are what every candidate and the reference run on."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.autotuner import AutoTuner, get_autotune_inputs, set_autotune_inputs
from tilecraft.errors import TileError

M = N = 64
K = 32


def matmul(block_M=None, block_N=None, num_stages=1):
    """TileLang's example shape: the problem from the enclosing scope, every tunable a default."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, K), "float16")
            B_s = T.alloc_shared((K, block_N), "float16")
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            T.copy(A[by * block_M, 0], A_s)
            T.copy(B[0, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])
    return main


def ref(A, B):
    return (A.astype(np.float32) @ B.astype(np.float32)).astype(np.float16)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))


CONFIGS = [{"block_M": 16, "block_N": 32}, {"block_M": 32, "block_N": 32},
           {"block_M": 64, "block_N": 16}]


def test_the_builder_tunes_a_plain_function(monkeypatch):
    from tilecraft.profiler import Profiler
    real, timed = Profiler.median_ms, []

    def recording(self, func=None, warmup=25, rep=100, input_tensors=None):
        timed.append((func is None, warmup, rep))
        return real(self, func, warmup, rep, input_tensors)

    monkeypatch.setattr(Profiler, "median_ms", recording)
    result = AutoTuner.from_kernel(kernel=matmul, configs=CONFIGS) \
        .set_compile_args(out_idx=[-1], target="interp") \
        .set_profile_args(ref_prog=ref, supply_type=tilecraft.TensorSupplyType.Integer) \
        .run(warmup=3, rep=7)
    measured = [t for t in result.trials if t.ok]
    assert len(measured) == 3 and result.config in CONFIGS
    assert result.latency == min(t.latency_ms for t in measured) > 0
    assert result.ref_latency is not None and result.ref_latency > 0
    # each candidate timed with run's warmup / rep (the default timer screens with at most
    # 2 and 10 runs first, then times the fastest again), the reference once
    assert (True, 2, 7) in timed and (True, 3, 7) in timed and (False, 3, 7) in timed
    assert result.func is result.kernel.func and result.func.params[0].shape == (M, K)
    assert result.libcode == result.kernel.get_kernel_source()
    rng = np.random.default_rng(0)
    A = rng.integers(-2, 3, (M, K)).astype(np.float16)
    B = rng.integers(-2, 3, (K, N)).astype(np.float16)
    np.testing.assert_array_equal(result.kernel(A, B), ref(A, B))


def test_the_builder_checks_its_arguments():
    with pytest.raises(TileError, match="execution_backend='cython' is not supported"):
        AutoTuner.from_kernel(matmul, CONFIGS).set_compile_args(execution_backend="cython")
    with pytest.raises(TileError, match="TL_DISABLE_SAFE_MEMORY_ACCESS"):
        AutoTuner.from_kernel(matmul, CONFIGS).set_compile_args(
            pass_configs={tilecraft.PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS: True})
    with pytest.raises(TileError, match="manual_check_prog is not supported yet"):
        AutoTuner.from_kernel(matmul, CONFIGS).set_profile_args(
            manual_check_prog=lambda got, want: None)
    with pytest.raises(TileError, match="must be a function returning a @T.prim_func"):
        AutoTuner.from_kernel(kernel=42, configs=CONFIGS)
    with pytest.raises(TileError, match="manual_check_prog is not supported yet"):
        tilecraft.autotune(configs=CONFIGS, manual_check_prog=lambda got, want: None)


def test_run_takes_tilelangs_scheduling_and_gpu_keywords(monkeypatch):
    from tilecraft.autotuner import api
    seen = []
    real = api.autotune

    def recording(*args, **kwargs):
        seen.append(kwargs.get("gpus"))
        return real(*args, **kwargs)
    monkeypatch.setattr("tilecraft.autotuner.builder.autotune", recording)
    tuner = AutoTuner.from_kernel(matmul, CONFIGS[:1]).set_compile_args(out_idx=[-1],
                                                                        target="interp")
    result = tuner.run(warmup=1, rep=2, use_pipeline=True, enable_grouped_compile=True,
                       group_compile_size=4, benchmark_multi_gpu=False)
    assert result.config == CONFIGS[0] and seen == [1]         # one GPU, as TileLang's False
    tuner.run(warmup=1, rep=2, benchmark_devices=[0])
    assert seen[-1] == [0]
    with pytest.raises(TileError, match="benchmark_multi_gpu=False asks for one"):
        tuner.run(benchmark_multi_gpu=False, benchmark_devices=[0, 1])
    with pytest.raises(TileError, match="group_compile_size must be an int >= 1"):
        tuner.run(group_compile_size=0)
    with pytest.raises(TileError, match="use_pipeline must be True or False"):
        tuner.run(use_pipeline="yes")
    with pytest.raises(TypeError, match="rpe"):
        tuner.run(rpe=5)


@tilecraft.jit(out_idx=[-1], target="interp")
def scaled(n, block=32, factor=2.0):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    B[bx * block + i] = A[bx * block + i] * factor
    return main


def test_captured_inputs_are_what_candidates_and_the_reference_run_on():
    seen = []

    def timer(kernel, inputs, *, warmup, rep, config):
        seen.append(inputs[0])
        return float(config["block"])

    def reference(a):
        seen.append(a)
        return a * 2

    tuned = tilecraft.autotune(configs=[{"block": 32}, {"block": 64}], ref_prog=reference,
                               measure=timer, verbose=False)(scaled)
    mine = np.linspace(-1, 1, 96).astype("float32")
    assert get_autotune_inputs() is None
    with set_autotune_inputs([mine]):
        assert get_autotune_inputs()[0] is mine
        kernel = tuned(96)
    assert get_autotune_inputs() is None
    assert kernel.config == {"block": 32}
    assert seen and all(np.array_equal(x, mine) for x in seen)
    # without a capture the same call is a different tuning (random inputs), run afresh
    seen.clear()
    tuned(96)
    assert seen and not any(np.array_equal(x, mine) for x in seen)


def test_captured_inputs_must_match_the_kernel():
    tuned = tilecraft.autotune(configs=[{"block": 32}], verbose=False,
                               measure=lambda k, i, *, warmup, rep, config: 1.0)(scaled)
    a = np.ones(64, "float32")
    with pytest.raises(TileError, match="set_autotune_inputs gave 2 tensor"):
        with set_autotune_inputs(a, a):
            tuned(64)
    with_supply = tilecraft.autotune(configs=[{"block": 32}], verbose=False,
                                     supply_prog=lambda params: [a])(scaled)
    with pytest.raises(TileError, match="both supply_prog and set_autotune_inputs"):
        with set_autotune_inputs(a):
            with_supply(64)


def test_early_stop_times_in_full_only_candidates_near_the_fastest():
    """TileLang's early_stop: after the screening, candidates more than early_stop_factor times
    slower than the fastest are not timed again with the full warmup / rep."""
    from tilecraft.autotuner.measure import confirm
    from tilecraft.autotuner.results import Trial
    from tilecraft.autotuner.tuner import Settings

    def contenders(settings):
        trials = [Trial({"i": i}, None, "ok", ms) for i, ms in enumerate((1.0, 1.5, 2.5, 3.0))]
        seen = []

        def rounds(pairs, n):
            seen.append([t.config["i"] for t in pairs])
            return [[1.0] * len(pairs)] * n
        confirm(trials, settings, rounds)
        return seen[0]

    assert contenders(Settings()) == [0, 1, 2, 3]
    assert contenders(Settings(early_stop=True, early_stop_factor=2.0)) == [0, 1]
    assert contenders(Settings(early_stop=True, early_stop_factor=3.0)) == [0, 1, 2, 3]


def test_early_stop_factor_below_one_is_refused():
    with pytest.raises(TileError, match="early_stop_factor must be a number >= 1"):
        tilecraft.autotune(configs=[{"block": 32}], early_stop=True, early_stop_factor=0.5)
