"""Compiling candidate configurations (and predicting many of them with the cost model) in
worker processes, each compile with a time limit.

Lowering is pure Python and nvcc a subprocess, so threads would serialize on the interpreter
lock: candidates compile in a spawn-started process pool instead (spawn, not fork: a forked
child of a process that has touched CUDA or holds torch's threads is unsafe). A worker sends
back only what happened, never the kernel: the compiled program lands in the on-disk compile
cache (runtime/program.py), so the parent's own compile of a successful candidate is a cache
load without lowering or nvcc.

A worker finds the factory by module and qualified name, which is how a spawned process can
reach user code at all; a factory that cannot be found that way (defined inside a function,
in an interactive session, or rebound since) is compiled in the calling process instead.

Each task enforces its own limit inside the worker with a timer signal, so time spent waiting
in the queue does not count and a stopped compile leaves its worker usable. The parent only
keeps an outer bound for a worker stuck where signals do not reach.
"""
from __future__ import annotations

import contextlib
import importlib
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from ..errors import TileError
from .results import COMPILE_ERROR, OK, TIMEOUT, one_line
from .space import factory_config, own_pass_configs
from .store import source_hash

UNAVAILABLE = "unavailable"   # the worker could not reach the factory: compile in the caller
_STARTUP_GRACE_S = 60.0       # a worker's start (spawn, imports) on a loaded machine
_DEFAULT_MAX_WORKERS = 32     # each worker holds an interpreter and runs an nvcc at a time


class CompileTimeout(BaseException):
    """Raised by the timer inside a compile. A BaseException so that no `except Exception`
    in the compiler swallows it."""


@contextlib.contextmanager
def deadline(seconds: float | None):
    """Interrupt the block after `seconds` with CompileTimeout. Effective in a process's main
    thread on platforms with SIGALRM; elsewhere the block runs unbounded."""
    usable = (seconds is not None and seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise CompileTimeout(f"compiling took longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class CompileTask:
    index: int
    module: str
    qualname: str
    code_hash: str         # the parent's source hash of the factory, to detect a rebinding
    args: tuple
    kwargs: dict
    config: dict
    out_idx: object
    target: str            # a concrete backend or arch: workers never probe for a GPU
    pass_configs: dict
    timeout: float | None


@dataclass
class CompileOutcome:
    index: int
    status: str
    message: str = ""
    seconds: float = 0.0


def address_of(fn) -> tuple[str, str] | None:
    """(module, qualname) by which a spawned worker can import fn, or None."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        return None
    if module == "__main__":
        main = sys.modules.get("__main__")
        if not getattr(main, "__file__", None):
            return None  # an interactive session: a worker has no script to import
    return module, qualname


def _resolve(module: str, qualname: str):
    from ..carver.recommend import underlying
    obj = sys.modules["__main__"] if module == "__main__" else importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    # A module-level name usually holds the decorated object; unwrap to the plain factory.
    while True:
        inner = underlying(obj)
        if inner is obj:
            return obj
        obj = inner


def reach(module: str, qualname: str, code_hash: str) -> tuple:
    """(the factory at module.qualname, "") as the caller has it, or (None, why not): it cannot
    be imported here, or its source is not the caller's (rebound since)."""
    try:
        fn = _resolve(module, qualname)
    except Exception as e:  # noqa: BLE001 - any import failure means: not from here
        return None, one_line(e)
    if source_hash(fn) != code_hash:
        return None, f"{module}.{qualname} differs in the worker"
    return fn, ""


def jit_of(fn, out_idx, target: str, pass_configs: dict):
    """The caller's @jit of the factory, rebuilt in a worker."""
    from ..jit import jit
    return jit(out_idx=out_idx, target=target, pass_configs=pass_configs)(fn)


def compile_task(task: CompileTask) -> CompileOutcome:
    """The worker's job: build and compile one configuration (filling the disk cache)."""
    start = time.perf_counter()
    fn, why = reach(task.module, task.qualname, task.code_hash)
    if fn is None:  # compile in the caller
        return CompileOutcome(task.index, UNAVAILABLE, why)
    try:
        with deadline(task.timeout):
            impl = jit_of(fn, task.out_idx, task.target, task.pass_configs)
            impl.with_pass_configs(own_pass_configs(task.config))(
                *task.args, **task.kwargs, **factory_config(task.config))
    except CompileTimeout as e:
        return CompileOutcome(task.index, TIMEOUT, str(e), time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - a candidate's failure is data, reported per candidate
        return CompileOutcome(task.index, COMPILE_ERROR, one_line(e),
                              time.perf_counter() - start)
    return CompileOutcome(task.index, OK, "", time.perf_counter() - start)


def warm_task(module: str, qualname: str) -> bool:
    """Start-up work of a compile worker, done before it has a candidate: the interpreter, the
    user's module and the compiler's passes and runtime imported."""
    try:
        _resolve(module, qualname)
        from ..backends.cuda import pipeline  # noqa: F401
        from ..backends.cuda.runtime import program  # noqa: F401
    except Exception:  # noqa: BLE001 - the compile task reports what fails, in its own words
        return False
    return True


@dataclass(frozen=True)
class PredictTask:
    module: str
    qualname: str
    code_hash: str
    args: tuple
    kwargs: dict
    configs: list
    target: str            # the cost model's hardware
    timeout: float | None


def predict_task(task: PredictTask):
    """The worker's job: the cost model's Prediction for a chunk of configurations, or None
    when the factory cannot be reached here."""
    from .space import predict_one
    fn, _ = reach(task.module, task.qualname, task.code_hash)
    if fn is None:  # the caller predicts these itself
        return None
    return [predict_one(fn, task.args, task.kwargs, c, task.target, task.timeout)
            for c in task.configs]


class Workers:
    """The spawn process pool of one tuning run, started on first use and shared by the
    prediction and the compile phases (a worker's start costs an interpreter and imports)."""

    # Configurations per prediction task: one costs tens of milliseconds, about what sending
    # a task costs, so they travel in chunks.
    CHUNK = 16

    def __init__(self, max_workers: int | None = None):
        self.size = max(1, max_workers or min(os.cpu_count() or 1, _DEFAULT_MAX_WORKERS))
        self._pool = None
        self._stuck = False

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.size,
                                             mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            if self._stuck:
                _stop(self._pool)
            self._pool.shutdown(wait=not self._stuck, cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def warm(self, address) -> None:
        """Start every worker now, so that their start (an interpreter, imports: seconds) runs
        while the caller is still predicting; nothing waits for these tasks."""
        try:
            pool = self._executor()
            for _ in range(self.size):
                pool.submit(warm_task, *address)
        except Exception:  # noqa: BLE001 - a pool that cannot start is met again at compile
            pass

    def predict(self, address, code_hash, problem, configs: list, target: str,
                timeout: float | None, on_done=None) -> list | None:
        """Predictions for configs, computed in the workers; None when any chunk could not be
        (the caller then predicts in its own process). on_done(n) after each chunk of n."""
        chunks = [configs[i:i + self.CHUNK] for i in range(0, len(configs), self.CHUNK)]
        tasks = [PredictTask(address[0], address[1], code_hash, problem.args, problem.kwargs,
                             chunk, target, timeout) for chunk in chunks]
        answers: list = [None] * len(tasks)
        try:
            futures = {self._executor().submit(predict_task, t): i for i, t in enumerate(tasks)}
            for future in as_completed(futures):
                answers[futures[future]] = future.result()
                if answers[futures[future]] is None:
                    break
                if on_done is not None:
                    on_done(len(tasks[futures[future]].configs))
        except Exception:  # noqa: BLE001 - a broken pool or an unpicklable argument
            broken = self._pool
            self._pool = None  # the compile phase starts a fresh pool
            broken.shutdown(wait=False, cancel_futures=True)
            return None
        if any(a is None for a in answers):
            return None
        return [p for answer in answers for p in answer]

    def compile(self, tasks: list, on_done=None) -> list:
        """compile_task over tasks; one CompileOutcome per task, in the tasks' order.
        on_done(outcome) is called as each finishes."""
        if not tasks:
            return []
        outcomes: dict = {}
        limit = tasks[0].timeout
        rounds = math.ceil(len(tasks) / self.size) + 1
        bound = None if limit is None else _STARTUP_GRACE_S + limit * rounds
        futures = {self._executor().submit(compile_task, t): t for t in tasks}
        try:
            for future in as_completed(futures, timeout=bound):
                task = futures[future]
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    # Most often a worker that could not start (e.g. a script without an
                    # `if __name__ == "__main__":` guard, which spawned workers import): the
                    # candidate is compiled in the caller instead.
                    outcome = CompileOutcome(task.index, UNAVAILABLE,
                                             "a compile worker process died")
                except Exception as e:  # noqa: BLE001 - e.g. an argument that cannot be pickled
                    outcome = CompileOutcome(task.index, UNAVAILABLE, one_line(e))
                outcomes[task.index] = outcome
                if on_done is not None:
                    on_done(outcome)
        except FuturesTimeout:
            self._stuck = True
            for task in futures.values():
                if task.index not in outcomes:
                    outcomes[task.index] = CompileOutcome(
                        task.index, TIMEOUT, f"no answer from the compile worker in {bound:g} s")
                    if on_done is not None:
                        on_done(outcomes[task.index])
        return [outcomes[t.index] for t in tasks]


_KILL_AFTER_S = 1.0    # how long a stuck worker has to leave after SIGTERM before SIGKILL


def _stop(pool: ProcessPoolExecutor) -> None:
    # The executor has no public way to stop a worker that ignores its deadline; its process
    # table is the only handle on the processes this pool started. A worker whose signals are
    # blocked (stuck in native code that masks them) outlives SIGTERM: SIGKILL then.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    until = time.monotonic() + _KILL_AFTER_S
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=max(0.0, until - time.monotonic()))
        with contextlib.suppress(Exception):
            if process.is_alive():
                process.kill()
                process.join(timeout=_KILL_AFTER_S)


def compile_here(impl, problem, config: dict, timeout: float | None):
    """Compile one configuration in this process under the same limit: (kernel or None,
    CompileOutcome)."""
    start = time.perf_counter()
    try:
        with deadline(timeout):
            kernel = impl.with_pass_configs(own_pass_configs(config))(
                *problem.args, **problem.call_kwargs(config))
    except CompileTimeout as e:
        return None, CompileOutcome(-1, TIMEOUT, str(e), time.perf_counter() - start)
    except TileError as e:
        return None, CompileOutcome(-1, COMPILE_ERROR, one_line(e), time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - a candidate's failure is data, reported per candidate
        return None, CompileOutcome(-1, COMPILE_ERROR, one_line(e), time.perf_counter() - start)
    return kernel, CompileOutcome(-1, OK, "", time.perf_counter() - start)
