"""Measuring tuning candidates on every GPU of the host: one process per GPU, each given its
device before CUDA starts in it (its CUDA_VISIBLE_DEVICES names that one GPU), each timing with
the one-GPU run's own functions (measure.py: prepare, screen, confirm_round).

Only GPUs of the tuned one's model measure: a result is the model's (store.py), and times taken
on two models do not compare. With two such GPUs or more, a tuning run (tuner.py, _on_gpus)
- starts one measuring process per GPU beside the compile workers, so that their start (an
  interpreter, torch, a CUDA context) runs while the caller predicts;
- sends each candidate, as soon as its compile worker has built it, to the GPU with the least
  queued work, whose process loads it from the disk cache (compiling stays in the compile
  workers) and screens it: screening overlaps compiling. A process's first candidate makes its
  inputs (the same seeded draw on every GPU) and the reference's outputs, and warms the GPU, as
  a one-GPU run does once; from its first good candidate on, the process keeps its GPU busy
  between tasks (_Heater), so that a candidate arriving after a pause is not timed at the boost
  clock of an idle GPU, until the confirmation;
- times the reference program on a GPU as soon as the first candidate is built;
- confirms the fastest few in rounds, each round the one-GPU run's alternation over all of
  them on one GPU: CONFIRM_ROUNDS // n rounds on each of the n GPUs (one at least), the GPUs
  at once, every other round in reverse order. Each contender has as many samples from each
  GPU as any other, so a GPU a little faster than the others favours none of them, and no
  contender is always timed first; on two GPUs the confirmation takes one round's time where
  one GPU takes three, for two samples per contender instead of three.
What a process needs travels by pickling: the factory by module and name (as to the compile
workers), the settings with their reference, supply and timer callables. Callables that cannot
travel (a lambda) keep the run on one GPU, in the calling process; so does a measuring process
that cannot do its part (it cannot import the factory, CUDA started in it before it was given
its GPU, it died): the caller then measures every candidate itself.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import multiprocessing.util
import os
import pickle
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from .. import knobs
from ..errors import TileError
from . import measure as measuring
from . import space, store, workers
from .results import COMPILE_ERROR, OK, logger, one_line


@dataclass(frozen=True)
class MeasureRun:
    """What the measuring processes of one tuning run share."""
    module: str
    qualname: str
    code_hash: str
    args: tuple
    kwargs: dict
    out_idx: object
    target: str            # the arch the candidates are compiled for
    pass_configs: dict
    settings: object       # the tuner's Settings, without the candidate configurations


@dataclass
class ScreenOutcome:
    index: int
    status: str
    latency_ms: float | None = None
    message: str = ""


# ---- the caller's side -------------------------------------------------------------------------

def gpu_limit() -> int | None:
    """TILECRAFT_AUTOTUNE_GPUS as a number of GPUs, None when unset."""
    text = knobs.autotune_gpus()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise TileError(f"TILECRAFT_AUTOTUNE_GPUS must be a whole number of GPUs, 1 or more; "
                        f"got {text!r}")
    return int(text)


def devices_for(backend: str, model: str, gpus=None) -> list:
    """The CUDA_VISIBLE_DEVICES names of the GPUs to measure on: the visible GPUs whose model
    (measure.device_name) is `model`, the current one first, at most TILECRAFT_AUTOTUNE_GPUS of
    them (gpus: the settings' count, or the device ordinals to use instead); [] when that is
    fewer than two (the caller measures on its own GPU)."""
    limit = gpus if isinstance(gpus, int) else gpu_limit()
    if backend != "cuda" or limit == 1:
        return []
    from ..backends.cuda.runtime import device, driver
    if not device.has_cuda_device():
        return []
    count = driver.device_count()
    here = device.current_ordinal()
    if isinstance(gpus, tuple):
        _check_ordinals(backend, model, gpus, count)
        chosen = list(gpus)
    else:
        same = [i for i in range(count) if measuring.device_name(backend, i) == model]
        chosen = sorted(same, key=lambda i: (i != here, i))[:limit]
    if len(chosen) < 2:
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [n.strip() for n in listed.split(",")] if listed else [str(i) for i in range(count)]
    return [names[i] for i in chosen]


def _check_ordinals(backend: str, model: str, ordinals: tuple, count: int) -> None:
    for i in ordinals:
        if i >= count:
            raise TileError(f"autotune: gpus names cuda:{i}, but this host has {count} GPU(s)")
        if measuring.device_name(backend, i) != model:
            raise TileError(f"autotune: gpus names cuda:{i}, a {measuring.device_name(backend, i)}"
                            f"; the candidates are tuned for {model}, and times taken on two "
                            "models do not compare")


def pool_for(tuned, problem, backend: str, target: str, model: str, address):
    """A GpuPool over the GPUs this run measures on (a context manager), or a null context
    that gives None when the run measures in the calling process."""
    alone = contextlib.nullcontext(None)
    if address is None or knobs.cache_disabled() or knobs.dump_ir_dir():
        return alone  # no factory to send, or no disk cache to carry the compiled candidates
    devices = devices_for(backend, model, tuned.settings.gpus)
    if not devices:
        return alone
    impl = tuned.jit_impl
    run = MeasureRun(address[0], address[1], store.source_hash(tuned.factory), problem.args,
                     problem.kwargs, impl.out_idx, target, dict(impl.options["pass_configs"]),
                     dataclasses.replace(tuned.settings, configs=None))
    try:
        pickle.dumps(run)
    except Exception as e:  # noqa: BLE001 - whatever pickling raises: the run stays here
        logger.info("autotune %s: measuring on one of %d GPUs: the settings cannot be sent to "
                    "measuring processes (%s); module-level functions can", tuned.__name__,
                    len(devices), one_line(e))
        return alone
    return GpuPool(devices, run)


def _process(device: str, run: MeasureRun) -> ProcessPoolExecutor:
    """The measuring process of one GPU (spawned: see workers.py), started on first use."""
    return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=bind, initargs=(device, run))


class GpuPool:
    """The measuring processes of one tuning run, one per GPU (see the module's text)."""

    def __init__(self, devices: list, run: MeasureRun):
        self.devices = list(devices)
        self._pools = [_process(d, run) for d in self.devices]
        self._queued = [[] for _ in self.devices]
        self._sent = [0] * len(self.devices)
        for i in range(self.size):   # each process starts now; nothing waits for this
            self._submit(i, warm_task)

    @property
    def size(self) -> int:
        return len(self._pools)

    def _submit(self, i: int, fn, *args):
        future = self._pools[i].submit(fn, *args)
        self._queued[i].append(future)
        self._sent[i] += 1
        return future

    def _least_busy(self) -> int:
        """The GPU with the fewest unfinished tasks; of equals, the one sent the fewest."""
        for queue in self._queued:
            queue[:] = [f for f in queue if not f.done()]
        return min(range(self.size), key=lambda i: (len(self._queued[i]), self._sent[i]))

    def screen(self, index: int, config: dict):
        """A future ScreenOutcome of candidate `index`."""
        return self._submit(self._least_busy(), screen_task, index, config)

    def reference(self, config: dict):
        """A future of the reference program's milliseconds (None where it cannot be timed)."""
        return self._submit(self._least_busy(), reference_task, config)

    def confirm(self, configs: list, rounds: int) -> list:
        """Confirming rounds over configs, rounds // size of them (one at least) on each GPU,
        the GPUs at once, every other round in reverse order: each round's milliseconds, in
        the configs' order."""
        count = self.size * max(1, rounds // self.size)
        futures = [self._submit(r % self.size, confirm_task, list(configs[::-1] if r % 2
                                                                   else configs))
                   for r in range(count)]
        return [f.result()[::-1] if r % 2 else f.result() for r, f in enumerate(futures)]

    def close(self) -> None:
        # Once every answer is in, the processes are left to exit on their own; otherwise
        # their GPUs must be quiet before the caller measures on one of them.
        answered = all(f.done() for queue in self._queued for f in queue)
        for pool in self._pools:
            pool.shutdown(wait=not answered, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# ---- a measuring process's side ----------------------------------------------------------------

class _Unable(Exception):
    """This process cannot measure the run at all (the caller measures instead)."""


class _Heater:
    """Keeps this process's GPU under load while it waits for its next task: heat(until) runs
    a candidate until until() is true (measure.warm_gpu). Candidates reach a measuring process
    one by one while the others compile, and each task pauses the heater, which returns once
    its last launches have finished, and resumes it when done."""

    def __init__(self, heat):
        self._on, self._idle = threading.Event(), threading.Event()
        self._idle.set()
        self._stopped = False
        threading.Thread(target=self._loop, args=(heat,), daemon=True).start()

    def _loop(self, heat) -> None:
        while not self._stopped:
            self._on.wait()
            self._idle.clear()
            try:
                if self._on.is_set():  # not paused since it woke
                    heat(lambda: not self._on.is_set())
            except Exception:  # noqa: BLE001 - a candidate that fails when run again
                self._stopped = True  # measures no worse for a cooler GPU than for a broken one
            finally:
                self._idle.set()

    def pause(self) -> None:
        self._on.clear()
        self._idle.wait()

    def resume(self) -> None:
        if not self._stopped:
            self._on.set()

    def stop(self) -> None:
        self._stopped = True
        self.pause()


_run: MeasureRun | None = None
_unable = ""           # why this process cannot measure; "" when it can
_impl = None           # the run's @jit of the factory
_kernels: dict = {}    # canonical configuration -> its kernel
_bench = None          # (inputs, the reference's outputs or None), once made
_heater = None         # a _Heater once a candidate has screened well (default timer, GPU)


@contextlib.contextmanager
def _quiet(last: bool = False):
    """A task's time on the GPU, without the heater's load. A confirming round is the last
    kind of task: after it the GPU is left idle, for whoever uses it once tuning returns."""
    if _heater is not None:
        _heater.pause()
    try:
        yield
    finally:
        if _heater is not None and not last:
            _heater.resume()


def _heat_with(kernel, inputs) -> None:
    global _heater
    torch = sys.modules.get("torch")
    if _heater is None and _run.settings.measure is None and kernel.backend == "cuda" and \
            torch is not None and torch.cuda.is_available():
        _heater = _Heater(lambda until: measuring.warm_gpu(kernel, inputs, math.inf, until))
        # The process ends by os._exit: its finalizers are where the heater can be stopped.
        multiprocessing.util.Finalize(None, _heater.stop, exitpriority=10)


def bind(device: str, run: MeasureRun) -> None:
    """A measuring process's initializer: it measures `run` on GPU `device` (a name as
    CUDA_VISIBLE_DEVICES takes it), which then is the only GPU it sees, as cuda:0."""
    global _run, _unable
    _run = run
    torch = sys.modules.get("torch")
    from ..backends.cuda.runtime import driver
    if driver.initialized() or (torch is not None and torch.cuda.is_initialized()):
        _unable = ("CUDA started in a measuring process before it was given its GPU (the main "
                   "module uses the GPU when imported)")
        return
    os.environ["CUDA_VISIBLE_DEVICES"] = device


def warm_task() -> str:
    """A measuring process's start before its first candidate: the factory's module and the
    runtime imported, torch's CUDA context made; "" or why it cannot measure."""
    try:
        _factory()
        from ..backends.cuda.runtime import program  # noqa: F401
        import torch
        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")
    except _Unable as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the candidates' tasks report what fails
        return one_line(e)
    return ""


def _factory():
    global _impl
    if _unable:
        raise _Unable(_unable)
    if _impl is None:
        fn, why = workers.reach(_run.module, _run.qualname, _run.code_hash)
        if fn is None:
            raise _Unable(why)
        _impl = workers.jit_of(fn, _run.out_idx, _run.target, _run.pass_configs)
    return _impl


def _kernel(config: dict):
    """The candidate's kernel, loaded once per process from the disk cache, where its compile
    worker put it."""
    key = space.canonical(config)
    kernel = _kernels.get(key)
    if kernel is None:
        impl = _factory()
        with workers.deadline(_run.settings.timeout):
            kernel = _kernels[key] = impl.with_pass_configs(space.own_pass_configs(config))(
                *_run.args, **_run.kwargs, **space.factory_config(config))
    return kernel


def _prepared(kernel) -> tuple:
    global _bench
    if _bench is None:
        _bench = measuring.prepare(kernel, _run.settings)
    return _bench


def screen_task(index: int, config: dict) -> ScreenOutcome:
    """Check and time one candidate on this process's GPU (measure.screen)."""
    with _quiet():
        try:
            kernel = _kernel(config)
        except _Unable as e:
            return ScreenOutcome(index, workers.UNAVAILABLE, message=str(e))
        except (Exception, workers.CompileTimeout) as e:  # noqa: BLE001 - the candidate's
            return ScreenOutcome(index, COMPILE_ERROR, message=one_line(e))
        try:
            inputs, want = _prepared(kernel)
        except Exception as e:  # noqa: BLE001 - the inputs or the reference: the caller's
            return ScreenOutcome(index, workers.UNAVAILABLE, message=one_line(e))
        status, ms, message = measuring.screen(kernel, inputs, want, _run.settings, config)
        if status == OK:
            _heat_with(kernel, inputs)
        return ScreenOutcome(index, status, ms, message)


def reference_task(config: dict):
    """The reference program's milliseconds on this GPU, None where it cannot be timed."""
    with _quiet():
        try:
            kernel = _kernel(config)
            inputs, _ = _prepared(kernel)
        except (Exception, workers.CompileTimeout):  # noqa: BLE001 - a courtesy, no failure
            return None
        s = _run.settings
        return measuring.time_reference(kernel, s.ref_prog, inputs, s.warmup, s.rep)


def confirm_task(configs: list) -> list:
    """One confirming round on this GPU (measure.confirm_round)."""
    with _quiet(last=True):
        pairs = [(_kernel(c), c) for c in configs]
        inputs, _ = _prepared(pairs[0][0])
        return measuring.confirm_round(pairs, inputs, _run.settings)
