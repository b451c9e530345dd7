"""@tilecraft.autotune on several GPUs (tilecraft/autotuner/gpus.py), on the CPU: the GPUs are
faked (which devices there are and their models), the candidates are tiny GEMMs on the
interpreter. One test spawns a real measuring process per faked GPU; the others run the
measuring processes' tasks in this process (InlineGpu), which lets a test give each GPU its
own pace. What is checked: every built candidate is measured once, on one of the GPUs, and the
results are merged; the fastest are confirmed in rounds dealt evenly to the GPUs; a GPU that
cannot measure, or settings that cannot travel, leave the run to this process; only GPUs of
the tuned one's model take part; the tuning cache is per GPU model."""
import json
import os
from concurrent.futures import Future

import numpy as np
import pytest

import tilecraft
from tilecraft.autotuner import gpus, measure
from tilecraft.backends.cuda.runtime import device as device_module
from tilecraft.backends.cuda.runtime import driver
from tilecraft.errors import TileError

from test_autotuner import gemm_factory, gemm_truncating_k, ref_gemm


def gemm_some_wrong(M, N, K, block_M=32, block_K=16, threads=128):
    """block_K=32 drops the K tail (K=48 here): a wrong result."""
    if block_K == 32:
        return gemm_truncating_k(M, N, K, block_K)
    return gemm_factory(M, N, K, block_M=block_M, block_K=block_K, threads=threads)


def base_ms(config) -> float:
    return config.get("block_M", 32) / 10 + config.get("block_K", 16) / 1000


def logging_timer(kernel, inputs, *, warmup, rep, config):
    """A timer that can travel to a measuring process: base_ms, and a line saying which GPU
    (the process's CUDA_VISIBLE_DEVICES) and process measured the candidate."""
    with open(os.environ["MEASURED_LOG"], "a") as f:
        f.write(json.dumps({"config": config, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "pid": os.getpid()}) + "\n")
    return base_ms(config)


TIMED = []


def here_timer(kernel, inputs, *, warmup, rep, config):
    TIMED.append((config["block_M"], os.getpid()))
    return base_ms(config)


def tuned(factory=gemm_factory, **options):
    options.setdefault("verbose", False)
    return tilecraft.autotune(**options)(
        tilecraft.jit(out_idx=[-1], target="interp")(factory))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("TILECRAFT_DISABLE_CACHE", "TILECRAFT_AUTOTUNE_GPUS"):
        monkeypatch.delenv(name, raising=False)
    TIMED.clear()
    return tmp_path / "cache"


def test_each_candidate_is_measured_once_in_one_process_per_gpu(monkeypatch, tmp_path):
    log = tmp_path / "measured.jsonl"
    monkeypatch.setenv("MEASURED_LOG", str(log))   # the spawned processes inherit it
    monkeypatch.setattr(gpus, "devices_for", lambda backend, model, gpus=None: ["3", "5"])
    configs = [{"block_M": 64}, {"block_M": 16}, {"block_K": 32}, {"block_M": 32},
               {"threads": 2048}]
    t = tuned(gemm_some_wrong, configs=configs, measure=logging_timer, ref_prog=ref_gemm,
              max_workers=2)
    kernel = t(64, 64, 48)
    result = t.result
    assert result.gpus == 2 and "on 2 x cpu" in result.table()
    status = {json.dumps(r.config): r.status for r in result.trials}
    assert status == {'{"block_M": 64}': "ok", '{"block_M": 16}': "ok",
                      '{"block_K": 32}': "wrong result", '{"block_M": 32}': "ok",
                      '{"threads": 2048}': "compile error"}
    assert kernel.config == {"block_M": 16} and result.latency == base_ms({"block_M": 16})
    assert all(r.latency_ms == base_ms(r.config) for r in result.trials if r.ok)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(line["config"]["block_M"] for line in lines) == [16, 32, 64]  # once each
    by_gpu = {}
    for line in lines:
        by_gpu.setdefault(line["gpu"], set()).add(line["pid"])
    assert set(by_gpu) == {"3", "5"}                   # both GPUs measured
    assert all(len(pids) == 1 for pids in by_gpu.values())  # one process per GPU
    assert by_gpu["3"] != by_gpu["5"] and os.getpid() not in by_gpu["3"] | by_gpu["5"]
    rng = np.random.default_rng(0)
    A, B = (rng.uniform(-1, 1, s).astype(np.float16) for s in ((64, 48), (48, 64)))
    np.testing.assert_allclose(kernel(A, B).astype(np.float32), ref_gemm(A, B), atol=1e-2)


PACE = {"a": 1.0, "b": 1.1}   # GPU b runs 10% slower
ON = [None]                    # the GPU the running task is on


class InlineGpu:
    """Stands in for a GPU's measuring process: runs each task here and now, on GPU `name`."""

    def __init__(self, name, tasks):
        self.name, self.tasks = name, tasks

    def submit(self, fn, *args):
        ON[0] = self.name
        self.tasks.append((self.name, fn.__name__, args))
        future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - as a process would hand it back
            future.set_exception(e)
        return future

    def shutdown(self, wait=True, cancel_futures=False):
        pass


@pytest.fixture
def inline_gpus(monkeypatch):
    """Two GPUs, "a" and "b", whose tasks run in this process; the tasks as (GPU, task, args)."""
    tasks = []

    def process(name, run):
        monkeypatch.setattr(gpus, "_run", run)
        return InlineGpu(name, tasks)
    monkeypatch.setattr(gpus, "devices_for", lambda backend, model, gpus=None: ["a", "b"])
    monkeypatch.setattr(gpus, "_process", process)
    for name, value in (("_impl", None), ("_kernels", {}), ("_bench", None), ("_unable", "")):
        monkeypatch.setattr(gpus, name, value)
    return tasks


def test_the_fastest_are_confirmed_in_rounds_dealt_evenly_to_the_gpus(inline_gpus, monkeypatch):
    # block_M 32 is the fastest but is screened on the slow GPU b, 16 on a: the screen ranks
    # 16 first. Every contender is then timed once on each GPU (CONFIRM_ROUNDS // 2 rounds
    # each, the second in reverse order), which ranks them truly.
    base = {16: 1.02, 32: 1.0, 64: 1.5, 128: 2.0, 256: 3.0}
    timed = []

    def scripted(kernel, inputs, *, warmup, rep, config=None):
        timed.append((config["block_M"], ON[0], warmup, rep))
        return base[config["block_M"]] * PACE[ON[0]]
    monkeypatch.setattr(measure, "default_measure", scripted)
    t = tuned(configs={"block_M": [16, 32, 64, 128, 256]}, warmup=7, rep=40, max_workers=1)
    t(256, 32, 32)
    screened = {m: gpu for m, gpu, warmup, rep in timed if (warmup, rep) != (7, 40)}
    assert screened == {16: "a", 32: "b", 64: "a", 128: "b", 256: "a"}
    rounds = [(gpu, args[0]) for gpu, task, args in inline_gpus if task == "confirm_task"]
    # The screen's fastest four per GPU: all five here, in the screen's order.
    contenders = [{"block_M": m} for m in (16, 32, 64, 128, 256)]
    assert rounds == [("a", contenders), ("b", contenders[::-1])]
    confirmed = [(m, gpu) for m, gpu, warmup, rep in timed if (warmup, rep) == (7, 40)]
    assert confirmed == [(m, "a") for m in (16, 32, 64, 128, 256)] + \
        [(m, "b") for m in (256, 128, 64, 32, 16)]
    assert t.best_config == {"block_M": 32} and t.result.gpus == 2
    latency = {r.config["block_M"]: r.latency_ms for r in t.result.trials}
    assert latency[32] == pytest.approx(1.05) and latency[16] == pytest.approx(1.071)
    assert latency[256] == pytest.approx(3.15)


def test_a_candidate_screened_on_a_slower_gpu_still_reaches_the_confirmation(inline_gpus,
                                                                             monkeypatch):
    # block_M 128 is the fastest, screened on the slow GPU b: four candidates screened on a
    # look faster. Four contenders would leave it out; with two GPUs eight are confirmed.
    base = {16: 1.02, 32: 1.5, 64: 1.03, 128: 1.0, 256: 1.05, 512: 3.0, 1024: 1.08}
    timed = []

    def scripted(kernel, inputs, *, warmup, rep, config=None):
        timed.append((config["block_M"], ON[0], warmup, rep))
        return base[config["block_M"]] * PACE[ON[0]]
    monkeypatch.setattr(measure, "default_measure", scripted)
    t = tuned(configs={"block_M": list(base)}, warmup=7, rep=40, max_workers=1)
    t(256, 32, 32)
    screened = {m: gpu for m, gpu, warmup, rep in timed if (warmup, rep) != (7, 40)}
    assert [m for m in base if screened[m] == "b"] == [32, 128, 512]
    screen_rank = sorted(base, key=lambda m: base[m] * PACE[screened[m]])
    assert screen_rank.index(128) == 4                         # fifth after the screen
    assert t.best_config == {"block_M": 128}
    latency = {r.config["block_M"]: r.latency_ms for r in t.result.trials}
    assert latency[128] == pytest.approx(1.05)


def test_a_gpu_that_cannot_measure_leaves_the_run_to_this_process(inline_gpus, monkeypatch,
                                                                  caplog):
    monkeypatch.setattr(gpus, "_unable", "CUDA started in a measuring process")
    caplog.set_level("INFO", logger="tilecraft.autotuner")
    t = tuned(configs={"block_M": [16, 32, 64]}, measure=here_timer, max_workers=1)
    kernel = t(64, 64, 32)
    assert t.result.gpus == 1 and kernel.config == {"block_M": 16}
    assert sorted(TIMED) == [(16, os.getpid()), (32, os.getpid()), (64, os.getpid())]
    assert any("measuring on this process's GPU alone" in r.getMessage() and
               "CUDA started in a measuring process" in r.getMessage() for r in caplog.records)


def test_settings_that_cannot_travel_keep_the_run_here(monkeypatch, caplog):
    monkeypatch.setattr(gpus, "devices_for", lambda backend, model, gpus=None: ["a", "b"])
    monkeypatch.setattr(gpus, "_process", lambda name, run: pytest.fail("a process started"))
    caplog.set_level("INFO", logger="tilecraft.autotuner")
    t = tuned(configs={"block_M": [16, 32]}, measure=here_timer,
              ref_prog=lambda A, B: ref_gemm(A, B))
    t(64, 64, 32)
    assert t.result.gpus == 1 and len(TIMED) == 2
    assert any("cannot be sent to measuring processes" in r.getMessage()
               for r in caplog.records)


MODELS = {0: "NVIDIA H100 80GB HBM3, 132 SMs", 1: "NVIDIA A100-SXM4-80GB, 108 SMs",
          2: "NVIDIA H100 80GB HBM3, 132 SMs", 3: "NVIDIA H100 80GB HBM3, 132 SMs"}


@pytest.fixture
def four_gpus(monkeypatch):
    """Devices 0, 2 and 3 are H100s, 1 an A100; the current device is 2."""
    monkeypatch.setattr(device_module, "has_cuda_device", lambda: True)
    monkeypatch.setattr(device_module, "current_ordinal", lambda: 2)
    monkeypatch.setattr(driver, "device_count", lambda: 4)
    monkeypatch.setattr(measure, "device_name", lambda backend, ordinal=None: MODELS[ordinal])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_only_gpus_of_the_tuned_model_measure_the_current_one_first(four_gpus, monkeypatch):
    h100 = MODELS[0]
    assert gpus.devices_for("cuda", h100) == ["2", "0", "3"]
    assert gpus.devices_for("cuda", MODELS[1]) == []         # one A100: measured here
    assert gpus.devices_for("interp", h100) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")     # names as the caller sees them
    assert gpus.devices_for("cuda", h100) == ["6", "4", "7"]
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_GPUS", "2")
    assert gpus.devices_for("cuda", h100) == ["6", "4"]
    monkeypatch.setenv("TILECRAFT_AUTOTUNE_GPUS", "1")
    assert gpus.devices_for("cuda", h100) == []
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("TILECRAFT_AUTOTUNE_GPUS", bad)
        with pytest.raises(TileError, match="TILECRAFT_AUTOTUNE_GPUS must be a whole number"):
            gpus.devices_for("cuda", h100)


def test_the_settings_name_how_many_gpus_or_which(four_gpus):
    h100 = MODELS[0]
    assert gpus.devices_for("cuda", h100, 2) == ["2", "0"]
    assert gpus.devices_for("cuda", h100, 1) == []             # measured here
    assert gpus.devices_for("cuda", h100, (3, 0)) == ["3", "0"]
    with pytest.raises(TileError, match="cuda:1, a NVIDIA A100"):
        gpus.devices_for("cuda", h100, (0, 1))
    with pytest.raises(TileError, match="cuda:7, but this host has 4 GPU"):
        gpus.devices_for("cuda", h100, (0, 7))
    for bad in (0, [1, 1], "all", True):
        with pytest.raises(TileError, match="gpus must be a number of GPUs"):
            tilecraft.autotune(configs=[{"block_M": 16}], gpus=bad)


def test_a_gpu_model_is_its_name_and_sm_count(monkeypatch):
    props = device_module.DeviceProperties("NVIDIA H100 PCIe", "sm_90a", (9, 0), 114, 1024,
                                           232448, 233472, 65536, 65536, 52428800, 1755000,
                                           1593000, 5120)
    asked = []
    monkeypatch.setattr(device_module, "has_cuda_device", lambda: True)
    monkeypatch.setattr(device_module, "device_properties",
                        lambda ordinal=None: asked.append(ordinal) or props)
    assert measure.device_name("cuda", 1) == "NVIDIA H100 PCIe, 114 SMs" and asked == [1]
    assert measure.device_name("interp") == "cpu"


def test_a_result_is_kept_per_gpu_model_and_serves_one_gpu_or_several(inline_gpus,
                                                                       monkeypatch):
    model = ["GPU-A, 132 SMs"]
    monkeypatch.setattr(measure, "device_name", lambda backend, ordinal=None: model[0])
    configs = {"block_M": [16, 32]}
    first = tuned(configs=configs, measure=here_timer, max_workers=1)
    first(64, 64, 32)                                   # measured on the two GPUs "a", "b"
    assert first.result.gpus == 2 and len(TIMED) == 2 and not first.result.from_cache
    monkeypatch.setattr(gpus, "devices_for", lambda backend, model, gpus=None: [])
    again = tuned(configs=configs, measure=here_timer)
    again(64, 64, 32)                                   # one GPU of the model: the same entry
    assert again.result.from_cache and again.best_config == first.best_config
    assert len(TIMED) == 2
    model[0] = "GPU-B, 114 SMs"
    other = tuned(configs=configs, measure=here_timer)
    other(64, 64, 32)                                   # another card: tuned afresh
    assert not other.result.from_cache and len(TIMED) == 4
    assert other.result.device == "GPU-B, 114 SMs" != again.result.device


def test_the_heater_keeps_the_gpu_busy_only_between_tasks():
    """A measuring process's _Heater: running while resumed, and a pause returns only once its
    last launches are done, after which it launches nothing until resumed."""
    import threading
    import time
    events, lock = [], threading.Lock()

    def heat(until):
        while not until():
            with lock:
                events.append("launch")
            time.sleep(0.002)
        with lock:
            events.append("done")

    def launches():
        with lock:
            return events.count("launch")
    heater = gpus._Heater(heat)
    time.sleep(0.05)
    assert launches() == 0                                # not before the first resume
    heater.resume()
    deadline = time.time() + 5
    while launches() < 3 and time.time() < deadline:
        time.sleep(0.005)
    heater.pause()
    assert launches() >= 3 and events[-1] == "done"       # its batch finished within pause()
    paused_at = len(events)
    time.sleep(0.05)
    assert len(events) == paused_at                       # quiet while a task runs
    heater.resume()
    while launches() < paused_at + 2 and time.time() < deadline:
        time.sleep(0.005)
    heater.stop()
    assert events[-1] == "done" and len(events) > paused_at
    stopped_at = len(events)
    heater.resume()                                       # a stopped heater stays stopped
    time.sleep(0.05)
    assert len(events) == stopped_at
