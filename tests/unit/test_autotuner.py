"""@tilecraft.autotune on the CPU: tiny GEMMs on the interpreter (its wall time, or a timer
the test supplies), pruning by the cost model, skipped candidates, the result cache, and the
configuration errors. The worker-process compile is exercised on the interpreter target and,
where nvcc is installed, for sm_80 with the disk compile cache."""
import json
import os
import signal
import time

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.autotuner import space, workers
from tilecraft.autotuner.store import source_hash
from tilecraft.carver.recommend import evaluate, recommend
from tilecraft.errors import TileError

from error_expect import expect


def gemm_factory(M, N, K, block_M=32, block_N=32, block_K=16, threads=128, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])
    return main


def gemm_truncating_k(M, N, K, block_K=16):
    """A tiling bug: K // block_K iterations drop the K tail when block_K does not divide K."""
    @T.prim_func
    def main(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
             C: T.Tensor((M, N), T.float16)):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 32), threads=128) as (bx, by):
            A_s = T.alloc_shared((32, block_K), "float16")
            B_s = T.alloc_shared((block_K, 32), "float16")
            C_l = T.alloc_fragment((32, 32), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // block_K, num_stages=1):
                T.copy(A[by * 32, k * block_K], A_s)
                T.copy(B[k * block_K, bx * 32], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * 32, bx * 32])
    return main


def gemm_mn(M, N, K, block_M=64, block_N=64):
    """A GEMM whose only tunables are the output tile: a small space for the recommender."""
    return gemm_factory(M, N, K, block_M=block_M, block_N=block_N, block_K=32)


def gemm_sleepy(M, N, K, block_M=32, nap=0.0):
    """A compile that hangs for `nap` seconds."""
    time.sleep(nap)
    return gemm_factory(M, N, K, block_M=block_M)


def gemm_deaf(M, N, K, block_M=32):
    """A compile stuck where the worker's timer signal cannot reach it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(60)
    return gemm_factory(M, N, K, block_M=block_M)


def gemm_deafer(M, N, K, block_M=32):
    """A compile stuck with SIGTERM blocked as well: only SIGKILL stops it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM})
    time.sleep(60)
    return gemm_factory(M, N, K, block_M=block_M)


def ref_gemm(A, B):
    return A.astype(np.float32) @ B.astype(np.float32)


class FakeTimer:
    """Milliseconds from a function of the configuration; records what it was asked to time."""

    def __init__(self, times):
        self.times = times
        self.calls = []

    def __call__(self, kernel, inputs, *, warmup, rep, config):
        assert isinstance(kernel, tilecraft.JITKernel) and len(inputs) == 2
        self.calls.append(config)
        return self.times(config)


def tuned(factory=gemm_factory, target="interp", **options):
    options.setdefault("verbose", False)
    return tilecraft.autotune(**options)(tilecraft.jit(out_idx=[-1], target=target)(factory))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILECRAFT_DISABLE_CACHE", raising=False)
    return tmp_path / "cache"


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "tilecraft.autotuner" and r.levelname == "WARNING"]


# --- choosing the best --------------------------------------------------------------------

def test_best_is_the_least_measured_time_on_the_interpreter():
    t = tuned(configs={"block_M": [16, 64], "block_N": [16, 64]}, ref_prog=ref_gemm)
    kernel = t(64, 64, 32)
    result = t.result
    assert [r.status for r in result.results] == ["ok"] * 4
    assert all(r.latency_ms > 0 for r in result.results)
    fastest = min(result.results, key=lambda r: r.latency_ms)
    assert t.best_config == fastest.config == kernel.config
    assert kernel.latency == fastest.latency_ms and kernel.ref_latency > 0
    assert kernel is t.jit_impl(64, 64, 32, **fastest.config)
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (64, 32)).astype(np.float16)
    B = rng.uniform(-1, 1, (32, 64)).astype(np.float16)
    np.testing.assert_allclose(kernel(A, B).astype(np.float32), ref_gemm(A, B), atol=1e-2)


def test_the_fastest_few_are_timed_again_and_judged_by_their_median(monkeypatch):
    # The default timer, scripted: every candidate is screened by a short timing, then the
    # four fastest are timed with the full warmup / rep in three alternating rounds. block_M 16
    # was screened at a lucky moment, and its later timings expose it.
    from tilecraft.autotuner import measure
    script = {16: [1.0, 1.6, 1.5, 1.55], 32: [1.1, 1.05, 1.0, 1.1], 64: [1.2, 1.3, 1.3, 1.25],
              128: [5.0, 5.2, 4.8, 5.1], 256: [9.0]}
    seen = []

    def scripted(kernel, inputs, *, warmup, rep, config=None):
        seen.append((config["block_M"], warmup, rep))
        return script[config["block_M"]][sum(m == config["block_M"] for m, _, _ in seen) - 1]

    monkeypatch.setattr(measure, "default_measure", scripted)
    t = tuned(configs={"block_M": [16, 32, 64, 128, 256], "block_N": [32]}, warmup=7, rep=40)
    t(256, 32, 32)
    assert t.best_config["block_M"] == 32
    screen = (measure.SCREEN_WARMUP, measure.SCREEN_REP)
    assert seen == [(m, *screen) for m in (16, 32, 64, 128, 256)] + \
        [(m, 7, 40) for m in (16, 32, 64, 128)] * 3
    latency = {r.config["block_M"]: r.latency_ms for r in t.result.results}
    assert latency == {16: 1.55, 32: 1.05, 64: 1.3, 128: 5.1, 256: 9.0}


def test_the_timer_sees_every_candidate_once_and_the_least_time_wins():
    times = {16: 3.0, 32: 1.0, 64: 2.0}
    timer = FakeTimer(lambda c: times[c["block_M"]] + c["block_N"] / 1000)
    configs = [{"block_M": m, "block_N": n} for m in (64, 16, 32) for n in (32, 16)]
    t = tuned(configs=configs, measure=timer)
    kernel = t(64, 64, 32)
    assert timer.calls == configs                       # given order, no pruning by default
    assert kernel.config == {"block_M": 32, "block_N": 16}
    assert t.result.measured[0].config == kernel.config
    assert [r.latency_ms for r in t.result.measured] == sorted(r.latency_ms for r in t.results)


def test_the_table_is_printed_with_the_best_marked(capsys):
    t = tuned(configs=[{"block_M": 16}, {"block_M": 32}], verbose=True,
              measure=FakeTimer(lambda c: c["block_M"]))
    t(32, 32, 16)
    err = capsys.readouterr().err
    assert "2 candidates (2 ok); best block_M=16" in err
    best_row = next(line for line in err.splitlines() if "ok, best" in line)
    assert best_row.split()[:2] == ["1", "16"]


# --- pruning ------------------------------------------------------------------------------

@pytest.mark.parametrize("fraction, kept", [(0.25, 2), (0.3, 3), (0.01, 1)])
def test_pruning_keeps_the_top_fraction_by_predicted_time(fraction, kept):
    configs = [{"block_M": m, "block_N": n} for m in (16, 32, 64, 128) for n in (32, 128)]
    problem = (256, 256, 64)
    predicted = [evaluate(gemm_factory, problem, c, "h100") for c in configs]
    times = [p.time if p.ok else float("inf") for p in predicted]
    timer = FakeTimer(lambda c: 1.0)
    t = tuned(configs=configs, top_fraction=fraction, measure=timer)
    t(*problem)
    assert len(timer.calls) == kept
    measured_times = [times[configs.index(c)] for c in timer.calls]
    pruned_times = [times[i] for i, c in enumerate(configs) if c not in timer.calls]
    assert measured_times == sorted(measured_times)     # fastest predicted measured first
    assert max(measured_times) <= min(pruned_times)
    statuses = [r.status for r in t.results]
    assert statuses.count("pruned") == len(configs) - kept
    assert all(r.predicted_s is not None for r in t.results)


def test_many_predictions_are_made_in_worker_processes(monkeypatch):
    from tilecraft.autotuner import tuner

    def not_here(*args, **kwargs):
        raise AssertionError("predicted in the calling process")
    monkeypatch.setattr(tuner, "PARALLEL_PREDICTION_MIN", 4)
    monkeypatch.setattr(space, "predict_one", not_here)  # workers import their own copy
    configs = [{"block_M": m, "block_N": n} for m in (16, 32, 64, 128) for n in (32, 128)]
    problem = (256, 256, 64)
    timer = FakeTimer(lambda c: 1.0)
    t = tuned(configs=configs, top_fraction=0.25, measure=timer, max_workers=2)
    t(*problem)
    predicted = [evaluate(gemm_factory, problem, c, "h100") for c in configs]
    times = {space.canonical(c): p.time if p.ok else float("inf")
             for c, p in zip(configs, predicted)}
    assert {space.canonical(r.config): r.predicted_s for r in t.results} == times
    assert timer.calls == sorted(configs, key=lambda c: times[space.canonical(c)])[:2]


def test_recommended_configs_are_the_cost_models_best():
    timer = FakeTimer(lambda c: 1000.0 / c["block_M"])
    t = tuned(gemm_mn, configs=None, top_fraction=0.1, measure=timer)
    t(512, 512, 64)
    ranked = recommend(gemm_mn, (512, 512, 64), target="h100", top=None)
    keep = space.keep_count(len(ranked), 0.1)
    assert timer.calls == [c.config for c in ranked[:keep]]
    assert t.best_config == max(timer.calls, key=lambda c: c["block_M"])


def test_with_enough_workers_a_recommended_search_is_predicted_in_them(monkeypatch):
    """Every configuration predicted exactly in the workers (not pruned by bounds here): the
    same ones are measured as when this process prunes."""
    from tilecraft.autotuner import tuner

    def not_here(*args, **kwargs):
        raise AssertionError("predicted in the calling process")
    monkeypatch.setattr(tuner, "PARALLEL_PREDICTION_CPUS", 2)
    monkeypatch.setattr(tuner, "PARALLEL_PREDICTION_MIN", 4)
    monkeypatch.setattr(space, "predict_best", not_here)
    monkeypatch.setattr(space, "predict_one", not_here)  # workers import their own copy
    timer = FakeTimer(lambda c: 1000.0 / c["block_M"])
    t = tuned(gemm_mn, configs=None, top_fraction=0.1, measure=timer, max_workers=2)
    t(512, 512, 64)
    ranked = recommend(gemm_mn, (512, 512, 64), target="h100", top=None)
    assert timer.calls == [c.config for c in ranked[:space.keep_count(len(ranked), 0.1)]]


# --- skipping failures --------------------------------------------------------------------

def test_a_failing_config_is_logged_in_one_line_and_skipped(caplog):
    configs = [{"threads": 128, "block_M": 32}, {"threads": 2048}, {"threads": 128}]
    t = tuned(configs=configs, measure=FakeTimer(lambda c: c.get("block_M", 32) / 10))
    kernel = t(64, 64, 32)
    lines = _warnings(caplog)
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "threads=2048" in lines[0] and "compile error" in lines[0]
    assert "1024" in lines[0]                           # the compiler's own reason
    assert [r.status for r in t.results] == ["ok", "compile error", "ok"]
    assert kernel.config in (configs[0], configs[2])


def test_a_wrong_result_is_skipped_when_a_reference_is_given(caplog):
    # block_K=32 does not divide K=48: its result misses the K tail but it times fastest.
    timer = FakeTimer(lambda c: 1.0 if c["block_K"] == 32 else 2.0)
    t = tuned(gemm_truncating_k, configs={"block_K": [16, 32]}, ref_prog=ref_gemm, measure=timer)
    kernel = t(32, 32, 48)
    assert kernel.config == {"block_K": 16}
    assert [r.status for r in t.results] == ["ok", "wrong result"]
    assert timer.calls == [{"block_K": 16}]             # a wrong kernel is not timed
    lines = _warnings(caplog)
    assert len(lines) == 1 and "block_K=32" in lines[0] and "wrong result" in lines[0]
    unchecked = tuned(gemm_truncating_k, configs={"block_K": [16, 32]}, measure=timer)
    assert unchecked(32, 32, 48).config == {"block_K": 32}


def test_a_hanging_compile_times_out():
    t = tuned(gemm_sleepy, configs=[{"nap": 0.0}, {"nap": 30.0}], timeout=0.5,
              measure=FakeTimer(lambda c: 1.0))
    start = time.perf_counter()
    assert t(32, 32, 16).config == {"nap": 0.0}
    assert time.perf_counter() - start < 10
    assert [r.status for r in t.results] == ["ok", "timeout"]


def test_when_every_candidate_fails_the_error_says_why():
    t = tuned(configs=[{"threads": 2048}, {"threads": 4096}])
    with pytest.raises(TileError) as info:
        t(32, 32, 16)
    assert "none of the 2 candidate(s)" in info.value.message
    assert "2 compile error" in info.value.message and "1024" in info.value.message


# --- the result cache ---------------------------------------------------------------------

def test_the_cache_is_hit_for_the_same_shape_and_missed_for_another(cache_dir):
    configs = [{"block_M": 16}, {"block_M": 32}, {"block_M": 64}]
    timer = FakeTimer(lambda c: abs(c["block_M"] - 32) + 1.0)
    first = tuned(configs=configs, measure=timer)
    kernel = first(64, 64, 32)
    assert len(timer.calls) == 3 and kernel.config == {"block_M": 32}
    assert first(64, 64, 32) is kernel and len(timer.calls) == 3   # same call, same process

    again = tuned(configs=configs, measure=timer)       # a new process would see the same
    hit = again(64, 64, 32)
    assert len(timer.calls) == 3 and again.result.from_cache
    assert hit.config == {"block_M": 32} and hit.latency == kernel.latency
    assert [r.status for r in again.results] == ["ok"] * 3
    assert len(again.jit_impl.cache) == 1              # only the best one was compiled

    other = again(96, 64, 32)                           # another shape: tuned afresh
    assert len(timer.calls) == 6 and not again.result.from_cache
    assert other.config == {"block_M": 32} and other is not hit
    entries = [os.path.join(d, f) for d, _, files in os.walk(cache_dir / "autotuner")
               for f in files if f.endswith(".json")]
    assert len(entries) == 2
    parts = [json.load(open(e))["parts"] for e in entries]
    assert {p["device"] for p in parts} == {"cpu"}
    assert sorted(p["params"][0][1][0] for p in parts) == ["64", "96"]


def test_the_cache_key_follows_the_search_and_can_be_turned_off(monkeypatch):
    timer = FakeTimer(lambda c: c["block_M"])
    tuned(configs=[{"block_M": 16}, {"block_M": 32}], measure=timer)(64, 64, 32)
    tuned(configs=[{"block_M": 16}, {"block_M": 64}], measure=timer)(64, 64, 32)
    assert len(timer.calls) == 4                        # another search is another key
    tuned(configs=[{"block_M": 16}, {"block_M": 32}], measure=timer, cache=False)(64, 64, 32)
    assert len(timer.calls) == 6
    monkeypatch.setenv("TILECRAFT_DISABLE_CACHE", "1")
    tuned(configs=[{"block_M": 16}, {"block_M": 32}], measure=timer)(64, 64, 32)
    assert len(timer.calls) == 8


# --- pins ---------------------------------------------------------------------------------

def test_given_tunables_are_pinned_and_all_given_skips_tuning():
    timer = FakeTimer(lambda c: c["block_M"] + c["block_N"] / 100)
    t = tuned(configs={"block_M": [16, 32], "block_N": [16, 32]}, measure=timer)
    kernel = t(64, 64, 32, block_N=32)
    assert timer.calls == [{"block_M": 16, "block_N": 32}, {"block_M": 32, "block_N": 32}]
    assert kernel.config == {"block_M": 16, "block_N": 32}
    direct = t(64, 64, 32, 64, block_N=64)              # block_M given positionally
    assert len(timer.calls) == 2 and direct is t.jit_impl(64, 64, 32, 64, block_N=64)


# --- configuration errors -----------------------------------------------------------------

def test_an_empty_config_list_points_at_the_decorator():
    def program():
        tilecraft.autotune(configs=[])(tilecraft.jit(out_idx=[-1])(gemm_factory))  # <- here
    expect(program, "configs for gemm_factory is empty", "tilecraft.autotune")


def test_an_unknown_parameter_points_at_the_decorator():
    def program():
        @tilecraft.autotune(configs=[{"block_M": 32}, {"blockN": 32}])  # <- here
        @tilecraft.jit(out_idx=[-1])
        def matmul(M, N, K, block_M=32, block_N=32):
            return gemm_factory(M, N, K, block_M, block_N)
    err = expect(program, "config 1 sets 'blockN', which is not a keyword parameter",
                 "tilecraft.autotune")
    assert "matmul(M, N, K, block_M, block_N); did you mean 'block_N'?" in err.message


def test_a_configs_function_is_checked_when_called():
    @tilecraft.autotune(configs=lambda M, N, K: [] if M > 64 else [{"block_M": 16}],
                        measure=FakeTimer(lambda c: 1.0), verbose=False)
    @tilecraft.jit(out_idx=[-1], target="interp")
    def matmul(M, N, K, block_M=32):
        return gemm_factory(M, N, K, block_M)
    line = matmul.declared_at.line
    assert matmul(32, 32, 16).config == {"block_M": 16}
    with pytest.raises(TileError) as info:
        matmul(128, 32, 16)
    assert "configs for matmul is empty" in info.value.message
    assert info.value.span.line == line


@pytest.mark.parametrize("options, message", [
    ({"configs": [{"block_M": 16}], "top_fraction": 0}, "top_fraction must be in (0, 1]"),
    ({"configs": [{"block_M": 16}], "rep": 0}, "rep must be an int >= 1"),
    ({"configs": [{"block_M": 16}], "timeout": -1}, "timeout must be a positive number"),
    ({"configs": "block_M=16"}, "configs must be a list of dicts"),
    ({"configs": [("block_M", 16)]}, "config 0 of gemm_factory must be a dict"),
    ({"configs": [{"block_M": 16}], "cost_target": "tpu"}, "cost_target: unknown target"),
])
def test_bad_settings_are_tile_errors(options, message):
    with pytest.raises(TileError) as info:
        tilecraft.autotune(**options)(tilecraft.jit(out_idx=[-1])(gemm_factory))
    assert message in info.value.message
    assert info.value.span is not None and info.value.span.filename == __file__


def test_measuring_needs_the_gpu_compiled_for():
    from tilecraft.autotuner.measure import device_arch
    other = "sm_80" if device_arch() != "sm_80" else "sm_89"
    t = tuned(target=other, configs=[{"block_M": 16}, {"block_M": 32}])
    with pytest.raises(TileError) as info:
        t(32, 32, 16)
    assert f"compiled for {other} needs such a GPU" in info.value.message


def test_autotune_needs_a_jit_factory_below_it():
    with pytest.raises(TileError) as info:
        tilecraft.autotune(configs=[{"block_M": 16}])(gemm_factory)
    assert "stacked above @tilecraft.jit" in info.value.message
    with pytest.raises(TileError) as info:
        tuned(lambda M, block_Q=1: None, configs=None)
    assert "takes none of the parameters it tunes" in info.value.message


# --- compiling in worker processes --------------------------------------------------------

def _task(index, qualname, config, factory, timeout=30.0, target="interp"):
    return workers.CompileTask(index, __name__, qualname, source_hash(factory), (32, 32, 16), {},
                               config, [-1], target, {}, timeout)


def test_workers_compile_each_task_under_its_own_limit():
    tasks = [_task(0, "gemm_sleepy", {"nap": 0.0}, gemm_sleepy, timeout=1.0),
             _task(1, "gemm_sleepy", {"nap": 30.0}, gemm_sleepy, timeout=1.0),
             _task(2, "gemm_factory", {"threads": 2048}, gemm_factory),
             _task(3, "no_such_factory", {}, gemm_factory),
             _task(4, "gemm_factory", {}, gemm_sleepy)]  # the name now holds other code
    done = []
    start = time.perf_counter()
    with workers.Workers(max_workers=2) as pool:
        outcomes = pool.compile(tasks, on_done=done.append)
    assert time.perf_counter() - start < 20
    assert [o.status for o in outcomes] == ["ok", "timeout", "compile error", "unavailable",
                                            "unavailable"]
    assert "1024" in outcomes[2].message
    assert sorted(o.index for o in done) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("stuck", [gemm_deaf, gemm_deafer], ids=["sigterm", "sigkill"])
def test_a_worker_deaf_to_its_timer_is_stopped_by_the_caller(monkeypatch, stuck):
    monkeypatch.setattr(workers, "_STARTUP_GRACE_S", 1.0)
    start = time.perf_counter()
    with workers.Workers(max_workers=1) as pool:
        outcomes = pool.compile([_task(0, stuck.__name__, {}, stuck, timeout=1.0)])
        processes = list(pool._pool._processes.values())
    assert time.perf_counter() - start < 15
    assert [o.status for o in outcomes] == ["timeout"]
    assert "no answer from the compile worker" in outcomes[0].message
    for process in processes:
        assert _ended(process)


def _ended(process, timeout=5.0) -> bool:
    """The worker process is gone. is_alive() alone can say True for a process that has
    exited: the executor's management thread may reap it first (waitpid), and then this
    Process object never learns its exit status; its pid is gone all the same."""
    process.join(timeout=timeout)
    if not process.is_alive():
        return True
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_only_module_level_factories_go_to_workers():
    def local_factory(M, N, K, block_M=32):
        return gemm_factory(M, N, K, block_M)
    assert workers.address_of(local_factory) is None
    assert workers.address_of(gemm_factory) == (__name__, "gemm_factory")


@pytest.mark.skipif(not __import__("tilecraft.backends.cuda.runtime", fromlist=["has_nvcc"]).has_nvcc(),
                    reason="nvcc is not installed")
def test_sm80_candidates_compile_in_workers_and_load_from_the_disk_cache(monkeypatch, cache_dir):
    from tilecraft.backends.cuda.runtime import program

    def fingerprint():
        monkeypatch.setattr(program, "_fingerprint", [])
        return program.compiler_fingerprint()

    def no_build(*args, **kwargs):
        raise AssertionError("the calling process lowered a program a worker had compiled")
    monkeypatch.setattr(program.CudaProgram, "_build", staticmethod(no_build))
    before = fingerprint()
    timer = FakeTimer(lambda c: c["block_M"] / 10)
    t = tuned(target="sm_80", configs={"block_M": [64, 24, 32]}, measure=timer, max_workers=2)
    try:
        kernel = t(64, 64, 32)
    except TileError:
        if fingerprint() != before:
            # Program keys include the compiler's own files: an edit to tilecraft during the
            # test rightly keeps the workers' programs from the caller.
            pytest.skip("tilecraft's sources changed while the test ran")
        raise
    assert [r.status for r in t.results] == ["ok", "compile error", "ok"]
    assert "24x32 tile" in t.results[1].message
    assert kernel.config == {"block_M": 32} and kernel.n_regs > 0
    if not _has_gpu():
        assert t.result.device == "no-gpu"
    assert os.listdir(cache_dir / "programs")


def _has_gpu():
    from tilecraft.backends.cuda.runtime.device import has_cuda_device
    return has_cuda_device()


@pytest.mark.parametrize("dtype,supply,low,high", [
    ("float16", "Uniform", -1, 1), ("bfloat16", "Normal", -10, 10), ("int8", "Auto", -2, 2),
    ("uint8", "Auto", 0, 2), ("float32", "Integer", -2, 2), ("float16", "One", 1, 1)])
def test_inputs_drawn_by_torch_follow_the_host_distributions(dtype, supply, low, high):
    torch = pytest.importorskip("torch")
    from tilecraft.ir import dtypes as dt
    from tilecraft.ir.buffer import Buffer
    from tilecraft.profiler import TensorSupplyType, TorchRandom, make_input
    p = Buffer("x", (64, 48), dt.dtype(dtype), "global")
    kind = TensorSupplyType[supply]
    t = make_input(p, kind, TorchRandom(7, "cpu"))
    host = make_input(p, kind, np.random.default_rng(7))
    assert t.shape == host.shape == (64, 48) and str(t.dtype).endswith(str(host.dtype))
    assert low <= float(t.min()) and float(t.max()) <= high
    again = make_input(p, kind, TorchRandom(7, "cpu"))
    assert torch.equal(t, again)  # seeded


@pytest.mark.parametrize("flush", ["dirty", 2, None])
def test_the_timer_refuses_a_flush_it_does_not_know(flush):
    from tilecraft.profiler import cuda_median_ms
    with pytest.raises(ValueError, match="flush_l2 takes False, True or 'clean'"):
        cuda_median_ms(lambda: None, flush_l2=flush)


def pass_config_timer(kernel, inputs, *, warmup, rep, config):
    """Fast only where the kernel was compiled with its configuration's own pass configs."""
    return 1.0 if kernel.pass_configs.get("tl.disable_tma_lower") else 2.0


def test_a_configuration_may_carry_its_own_pass_configs(tmp_path, monkeypatch):
    # TileLang's per-config form: "pass_configs" in a configuration is compiled with, over the
    # jit's own, and never passed to the factory.
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    configs = [{"block_M": 32, "pass_configs": {"tl.disable_warp_specialized": True}},
               {"block_M": 32, "pass_configs": {"tl.disable_tma_lower": True}},
               {"block_M": 16}]
    tuned = tilecraft.autotune(configs=configs, measure=pass_config_timer, verbose=False,
                               max_workers=1)(
        tilecraft.jit(out_idx=[-1], target="interp",
                      pass_configs={"tl.disable_wgmma": True})(gemm_factory))
    kernel = tuned(64, 64, 32)
    assert kernel.config == configs[1]
    assert kernel.pass_configs["tl.disable_tma_lower"] is True
    assert kernel.pass_configs["tl.disable_wgmma"] is True     # the jit's own stay
    assert "tl.disable_warp_specialized" not in kernel.pass_configs
    a = np.random.default_rng(0).uniform(-1, 1, (64, 32)).astype(np.float16)
    b = np.random.default_rng(1).uniform(-1, 1, (32, 64)).astype(np.float16)
    np.testing.assert_allclose(kernel(a, b).astype(np.float32),
                               a.astype(np.float32) @ b.astype(np.float32), atol=2e-2)


def test_a_configurations_unknown_pass_config_is_named():
    with pytest.raises(TileError) as info:
        tilecraft.autotune(configs=[{"block_M": 32, "pass_configs": {"tl.no_such": 1}}],
                           verbose=False)(tilecraft.jit(target="interp")(gemm_factory))(
            64, 64, 32)
    assert "config 0" in info.value.message and "tl.no_such" in info.value.message
