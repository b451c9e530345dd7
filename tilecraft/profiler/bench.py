"""Timing a function: `do_bench`, TileLang's (and Triton's) benchmark, and `cuda_median_ms`,
the fixed-count timer the benchmarks and the autotuner use.

do_bench takes `warmup` and `rep` as time budgets in milliseconds: the function is run once,
then its time is estimated from 5 runs, and the budgets become run counts (at least one each);
`_n_warmup` / `_n_repeat` > 0 give the counts directly. On a CUDA GPU every timed run is
bracketed by CUDA events and preceded by overwriting a `cache_size` MiB buffer, so each one
starts from a cold L2 ("event"); `backend="wall"`, or a machine without a usable GPU, times
each run with the host clock instead (synchronizing the GPU where there is one). The times are
reduced by `return_mode` ("mean", "median", "min", "max"), or to the `quantiles` asked for.
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import TileError

RETURN_MODES = ("min", "max", "mean", "median")
BACKENDS = ("event", "wall")
_NOT_YET = {"cupti": "CUPTI kernel-time profiling", "cudagraph": "CUDA-graph replay"}
_ESTIMATE_RUNS = 5
_WALL_ESTIMATE_MS = 5.0  # a single run at least this long estimates a host-timed function


def check_bench_options(warmup, rep, n_warmup, n_repeat, quantiles, return_mode, backend,
                        cache_size=256, early_stop_baseline=None) -> None:
    """TileError naming the first option do_bench cannot take."""
    def bad(message):
        raise TileError(f"do_bench: {message}")

    for name, value in (("warmup", warmup), ("rep", rep)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            bad(f"{name} is a time budget in milliseconds (a number >= 0), got {value!r}")
    for name, value in (("n_warmup", n_warmup), ("n_repeat", n_repeat)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            bad(f"{name} is a run count (an int >= 0; 0 derives it from the time budget), got "
                f"{value!r}")
    if return_mode not in RETURN_MODES:
        bad(f"return_mode must be one of {', '.join(RETURN_MODES)}, got {return_mode!r}")
    if quantiles is not None:
        if not isinstance(quantiles, (list, tuple)) or not quantiles or not all(
                isinstance(q, (int, float)) and not isinstance(q, bool) and 0 <= q <= 1
                for q in quantiles):
            bad(f"quantiles must be a non-empty list of numbers in [0, 1], got {quantiles!r}")
    if backend in _NOT_YET:
        bad(f"backend={backend!r} ({_NOT_YET[backend]}) is not supported yet; tilecraft times "
            "with CUDA events ('event') or the host clock ('wall')")
    if backend not in BACKENDS:
        bad(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
        bad(f"cache_size is the L2 flush buffer in MiB (an int >= 1), got {cache_size!r}")
    if early_stop_baseline is not None and (isinstance(early_stop_baseline, bool) or
                                            not isinstance(early_stop_baseline, (int, float))):
        bad(f"early_stop_baseline is milliseconds or None, got {early_stop_baseline!r}")


def cuda_device(device=None):
    """The torch CUDA device to time on (device: None for the current one, an ordinal,
    "cuda:1" or a torch.device), or None where torch has no usable GPU or device is the CPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        if device is not None and "cuda" in str(device):
            raise TileError(f"do_bench: device {device!r} asked for, but torch sees no CUDA GPU")
        return None
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    found = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if found.type == "cpu":
        return None
    if found.type != "cuda":
        raise TileError(f"do_bench: cannot time on device {device!r}; give a CUDA device or "
                        "'cpu'")
    return found if found.index is not None else torch.device("cuda",
                                                              torch.cuda.current_device())


def reduce_times(times, quantiles, return_mode: str):
    """The milliseconds to report: the quantiles asked for (one number for one quantile), else
    the times' mean / median / min / max."""
    times = np.asarray(times, dtype=np.float64)
    if quantiles is not None:
        values = [float(v) for v in np.quantile(times, list(quantiles))]
        return values[0] if len(values) == 1 else values
    return float(getattr(np, return_mode)(times))


def run_counts(estimate_ms, warmup: float, rep: float, n_warmup: int, n_repeat: int):
    """(warmup runs, timed runs): the given counts, else the budgets over the estimate (None
    when both counts are given)."""
    each = max(estimate_ms or 0.0, 1e-6)
    return (n_warmup if n_warmup > 0 else max(1, int(warmup / each)),
            n_repeat if n_repeat > 0 else max(1, int(rep / each)))


class _Flush:
    """Overwrites (or, with "clean", reads) a buffer larger than the L2 before a timed run."""

    def __init__(self, device, mebibytes: int, wide: bool = True, mode=True):
        import torch
        self.mode = mode
        self.buffer = None
        if mode:
            count = mebibytes * 1024 * 1024 // (4 if wide else 1)
            self.buffer = torch.empty(count, dtype=torch.int32 if wide else torch.int8,
                                      device=device)

    def __call__(self):
        if self.buffer is not None:
            self.buffer.sum() if self.mode == "clean" else self.buffer.zero_()


def _clear_grads(tensors):
    for t in tensors or ():
        t.grad = None


def event_times(run, count: int, flush, grad_to_none=None) -> list:
    """Milliseconds of `count` runs of run(), each between CUDA events after a flush."""
    import torch
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for start, end in zip(starts, ends):
        _clear_grads(grad_to_none)
        flush()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def wall_times(run, count: int, synchronize, grad_to_none=None) -> list:
    """Milliseconds of `count` runs of run() by the host clock, each synchronized."""
    times = []
    for _ in range(count):
        _clear_grads(grad_to_none)
        start = time.perf_counter()
        run()
        synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _needs_estimate(n_warmup: int, n_repeat: int, early_stop_baseline) -> bool:
    return n_warmup <= 0 or n_repeat <= 0 or early_stop_baseline is not None


def _gpu_bench(fn, device, warmup, rep, n_warmup, n_repeat, grad_to_none, fast_flush,
               cache_size, early_stop_baseline):
    import torch
    with torch.cuda.device(device):
        fn()
        torch.cuda.synchronize()
        flush = _Flush(device, cache_size, wide=fast_flush)
        estimate = None
        if _needs_estimate(n_warmup, n_repeat, early_stop_baseline):
            estimate = float(np.mean(event_times(fn, _ESTIMATE_RUNS, flush)))
            if early_stop_baseline is not None and estimate > early_stop_baseline:
                return None, estimate
        warm, timed = run_counts(estimate, warmup, rep, n_warmup, n_repeat)
        for _ in range(warm):
            fn()
        return event_times(fn, timed, flush, grad_to_none), estimate


def _wall_bench(fn, device, warmup, rep, n_warmup, n_repeat, grad_to_none,
                early_stop_baseline):
    if device is not None:
        import torch
        synchronize = lambda: torch.cuda.synchronize(device)  # noqa: E731
    else:
        synchronize = lambda: None  # noqa: E731
    first = wall_times(fn, 1, synchronize)[0]
    estimate = None
    if _needs_estimate(n_warmup, n_repeat, early_stop_baseline):
        # a slow function (an interpreted kernel) is estimated by its first run alone
        estimate = first if first >= _WALL_ESTIMATE_MS else \
            float(np.mean(wall_times(fn, _ESTIMATE_RUNS, synchronize)))
        if early_stop_baseline is not None and estimate > early_stop_baseline:
            return None, estimate
    warm, timed = run_counts(estimate, warmup, rep, n_warmup, n_repeat)
    wall_times(fn, warm, synchronize)
    return wall_times(fn, timed, synchronize, grad_to_none), estimate


def bench(fn, *, device, warmup=25, rep=100, n_warmup=0, n_repeat=0, grad_to_none=None,
          quantiles=None, fast_flush=True, return_mode="mean", backend="event",
          cache_size=256, early_stop_baseline=None):
    """do_bench with the device already resolved (None: time on the host clock)."""
    check_bench_options(warmup, rep, n_warmup, n_repeat, quantiles, return_mode, backend,
                        cache_size, early_stop_baseline)
    if not callable(fn):
        raise TileError(f"do_bench: fn must be callable, got {type(fn).__name__}")
    if backend == "event" and device is not None:
        times, estimate = _gpu_bench(fn, device, warmup, rep, n_warmup, n_repeat, grad_to_none,
                                     fast_flush, cache_size, early_stop_baseline)
    else:
        times, estimate = _wall_bench(fn, device, warmup, rep, n_warmup, n_repeat,
                                      grad_to_none, early_stop_baseline)
    if times is None:  # stopped early: slower than the baseline already
        return [estimate] * len(quantiles) if quantiles is not None else estimate
    return reduce_times(times, quantiles, return_mode)


def do_bench(fn, warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0,
             grad_to_none=None, quantiles=None, fast_flush: bool = True,
             return_mode: str = "mean", backend: str = "event", cache_size: int = 256,
             early_stop_baseline: float | None = None, device=None):
    """Milliseconds fn() takes (see the module's text for how it is timed). grad_to_none:
    tensors whose .grad is cleared before each timed run (a backward pass timed repeatedly)."""
    return bench(fn, device=cuda_device(device), warmup=warmup, rep=rep, n_warmup=_n_warmup,
                 n_repeat=_n_repeat, grad_to_none=grad_to_none, quantiles=quantiles,
                 fast_flush=fast_flush, return_mode=return_mode, backend=backend,
                 cache_size=cache_size, early_stop_baseline=early_stop_baseline)


def cuda_median_ms(run, warmup: int = 25, rep: int = 100, flush_l2: bool | str = True) -> float:
    """Median of CUDA-event timings of `rep` runs of run() after `warmup` untimed runs (counts,
    not budgets); with flush_l2, a 256 MiB buffer is overwritten before each timed run so every
    run starts from a cold L2 (as Triton's do_bench does). That leaves the L2 full of dirty
    lines, and the timed run pays for writing them back as its loads evict them: up to 50 MB
    of extra DRAM traffic, which a short kernel feels most. flush_l2="clean" reads the buffer
    instead: just as cold, nothing left to write back."""
    if flush_l2 not in (False, True, "clean"):
        raise ValueError(f"flush_l2 takes False, True or 'clean', got {flush_l2!r}")
    import torch
    flush = _Flush("cuda", 256, mode=flush_l2)
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    return float(np.median(event_times(run, rep, flush)))
