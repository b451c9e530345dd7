"""Running candidates: the inputs they share, the check against a reference program, and the
timer.

Every candidate of one problem runs on the same random inputs (made once, from the first
compiled candidate's parameters), so their times and their outputs compare like for like. The
reference runs once, on copies, and each candidate's check runs on fresh copies too: a kernel
that writes into an input cannot corrupt the next candidate's check.

The default timer is the kernel's profiler: on the GPU the median of CUDA-event timings with
the L2 flushed before each run (`warmup` runs first, then `rep` timed ones; the tuner screens
every candidate with fewer and gives the full counts to the fastest few), after the GPU has
been kept busy for a second so that its clocks have settled (warm_gpu); on the
interpreter the wall time of a few runs, which is enough to exercise tuning on a CPU. A
`measure(kernel, inputs, *, warmup, rep, config)` callable returning milliseconds replaces it.
"""
from __future__ import annotations

import math
import statistics
import sys

import numpy as np

from .. import arrays
from ..errors import TileError
from ..ir.buffer import Buffer
from .results import OK, RUN_ERROR, WRONG, one_line


def device_name(backend: str, ordinal: int | None = None) -> str:
    """What the times were measured on: the GPU's model (its name and SM count: a result is
    kept per model, store.py) of the current device or device `ordinal`, "cpu" for the
    interpreter and the emulator, or "no-gpu" when compiling for an arch on a machine without
    one."""
    if backend != "cuda":
        return "cpu"
    from ..backends.cuda.runtime.device import device_properties, has_cuda_device
    if not has_cuda_device():
        return "no-gpu"
    try:
        properties = device_properties(ordinal)
    except TileError:
        return "no-gpu"
    return f"{properties.name}, {properties.sm_count} SMs"


def device_arch() -> str | None:
    """The current GPU's arch ("sm_90a", ...), or None without one."""
    from ..backends.cuda.runtime.device import current_arch, has_cuda_device
    if not has_cuda_device():
        return None
    try:
        return current_arch()
    except TileError:
        return None


def make_inputs(kernel, supply_prog=None, supply_type=None, seed: int = 0) -> list:
    """The inputs all candidates run on: supply_prog(params) when given, else random values
    (TensorSupplyType, default Auto) of each input parameter's shape and dtype; on the GPU as
    torch CUDA tensors, on the CPU as numpy arrays."""
    if supply_prog is not None:
        return list(supply_prog([kernel.params[i] for i in kernel.inputs]))
    from ..profiler import TensorSupplyType, TorchRandom, make_input
    supply = TensorSupplyType(supply_type) if supply_type is not None else TensorSupplyType.Auto
    rng = np.random.default_rng(seed)
    on_gpu = kernel.backend == "cuda" and device_name("cuda") != "no-gpu"
    values = []
    for i in kernel.inputs:
        p = kernel.params[i]
        if not isinstance(p, Buffer):
            raise TileError(f"autotune: cannot choose a value for the scalar parameter {p.name} "
                            f"of {kernel.func.name}; pass supply_prog= to make the inputs")
        values.append(make_input(p, supply, TorchRandom(seed + len(values)) if on_gpu else rng))
    return values


def _copy(value):
    if arrays.is_torch(value):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def copies(inputs: list) -> list:
    return [_copy(v) for v in inputs]


def as_list(outputs) -> list:
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def reference_outputs(ref_prog, inputs: list) -> list:
    """ref_prog's outputs on copies of the inputs (its own errors are the caller's to see)."""
    return as_list(ref_prog(*copies(inputs)))


def check(kernel, inputs: list, want: list, atol: float, rtol: float,
          max_mismatched_ratio: float) -> None:
    """Run the kernel on copies of the inputs and compare each output with the reference's;
    AssertionError names the first output that differs."""
    from ..profiler import compare
    got = as_list(kernel(*copies(inputs)))
    if len(got) != len(want):
        raise AssertionError(f"the kernel returned {len(got)} output(s), the reference "
                             f"{len(want)}")
    names = [kernel.params[i].name for i in kernel.out_idx] or ["output"] * len(got)
    for name, g, w in zip(names, got, want):
        compare(name, g, w, atol, rtol, max_mismatched_ratio)


# With the default timer every candidate is first screened by a short timing (SCREEN_WARMUP
# and SCREEN_REP runs at most): enough to tell the few that can win from the many that cannot
# (the kept candidates of a large GEMM are far apart). Only the fastest CONTENDERS then get the
# full warmup / rep, in each of CONFIRM_ROUNDS alternating rounds (sharing the rep runs between
# the rounds measured faster but chose worse configs on an H100: bench/overhead.md); on
# several GPUs the rounds are dealt to them (gpus.py), and CONTENDERS are confirmed per GPU:
# a candidate screened on a GPU whose clocks run a little lower must not miss the
# confirmation for it, and the GPUs time the larger field in the time one times four.
SCREEN_WARMUP, SCREEN_REP = 2, 10
CONTENDERS, CONFIRM_ROUNDS = 4, 3


def prepare(kernel, s) -> tuple:
    """(inputs, the reference's outputs or None) of a tuning run with settings `s`, made with
    its first compiled candidate; for the default timer the GPU is then kept busy for a second
    (warm_gpu). The reference's own errors are the caller's to see."""
    inputs = make_inputs(kernel, s.supply_prog, s.supply_type)
    want = reference_outputs(s.ref_prog, inputs) \
        if s.ref_prog is not None and not s.skip_check else None
    if s.measure is None:
        try:
            warm_gpu(kernel, inputs)
        except Exception:  # noqa: BLE001 - the candidate's own run reports it
            pass
    return inputs, want


def screen(kernel, inputs: list, want, s, config: dict) -> tuple:
    """(status, milliseconds or None, message) of one candidate: checked against the
    reference's outputs when there are any, then timed, by the default timer with the
    screening counts, by a custom one (s.measure) with warmup / rep."""
    warmup, rep = (s.warmup, s.rep) if s.measure is not None else \
        (min(s.warmup, SCREEN_WARMUP), min(s.rep, SCREEN_REP))
    try:
        if want is not None:
            check(kernel, inputs, want, s.atol, s.rtol, s.max_mismatched_ratio)
        ms = timed(s.measure or default_measure, kernel, inputs, warmup, rep, config)
        torch_synchronize()
    except AssertionError as e:
        return WRONG, None, one_line(e)
    except Exception as e:  # noqa: BLE001 - a candidate's failure is data
        return RUN_ERROR, None, one_line(e)
    return OK, ms, ""


def confirm_round(pairs: list, inputs: list, s) -> list:
    """One round of the confirmation: each (kernel, config) in turn, timed by the default timer
    with the full warmup / rep; the milliseconds in the same order."""
    return [timed(default_measure, kernel, inputs, s.warmup, s.rep, config)
            for kernel, config in pairs]


def confirm(ok: list, s, rounds, gpus: int = 1) -> None:
    """Time the fastest few of the screened trials `ok` (with s.early_stop, those within
    s.early_stop_factor of the fastest) again with the full warmup / rep, in
    alternation, and keep each one's median: a GPU's clocks drift by several percent over a
    tuning run (power and heat), enough to crown a candidate that was merely measured at a good
    moment. A custom timer (s.measure) is trusted as it is. rounds(contenders, CONFIRM_ROUNDS)
    times them: a list of rounds, each the milliseconds in the contenders' order. `gpus`: how
    many GPUs screened and confirm them (CONTENDERS each)."""
    contenders = sorted(ok, key=lambda t: t.latency_ms)[:CONTENDERS * gpus]
    if getattr(s, "early_stop", False) and contenders:
        # TileLang's early_stop: a candidate the screening found more than early_stop_factor
        # times slower than the fastest is clearly worse and is not timed in full
        limit = contenders[0].latency_ms * s.early_stop_factor
        contenders = [t for t in contenders if t.latency_ms <= limit]
    if s.measure is not None or len(contenders) < 2:
        return
    samples = rounds(contenders, CONFIRM_ROUNDS)
    for i, t in enumerate(contenders):
        t.latency_ms = statistics.median(r[i] for r in samples)


def default_measure(kernel, inputs: list, *, warmup: int, rep: int, config=None) -> float:
    """Milliseconds of one run of the kernel, by its profiler (see the module's text)."""
    return kernel.get_profiler().median_ms(warmup=warmup, rep=rep, input_tensors=inputs)


def time_reference(kernel, ref_prog, inputs: list, warmup: int, rep: int) -> float | None:
    """The reference program's time by the same profiler, or None where it cannot run
    (e.g. it takes or returns what the profiler cannot time)."""
    try:
        return float(kernel.get_profiler().median_ms(func=ref_prog, warmup=warmup, rep=rep,
                                                     input_tensors=inputs))
    except Exception:  # noqa: BLE001 - the reference's time is a courtesy, never a failure
        return None


def timed(measure, kernel, inputs: list, warmup: int, rep: int, config: dict) -> float:
    """measure's answer as milliseconds, rejected unless a positive finite number."""
    ms = measure(kernel, inputs, warmup=warmup, rep=rep, config=dict(config))
    try:
        ms = float(ms)
    except (TypeError, ValueError):
        raise ValueError(f"the timer returned {ms!r}, not a number of milliseconds") from None
    if not math.isfinite(ms) or ms < 0:
        raise ValueError(f"the timer returned {ms!r} ms")
    return ms


WARM_SECONDS = 1.0


def warm_gpu(kernel, inputs: list, seconds: float = WARM_SECONDS, until=None) -> None:
    """Run the kernel for about `seconds` (or until until() says stop) before anything is
    timed. A GPU left idle runs at its boost clock and settles lower under a sustained load (an
    H100 from 1.98 GHz to about 1.4 under GEMMs): without this the candidates timed first, the
    best predicted, would look faster than they are against those timed later."""
    torch = sys.modules.get("torch")
    if kernel.backend != "cuda" or torch is None or not torch.cuda.is_available():
        return
    import time
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and not (until is not None and until()):
        for _ in range(8):
            kernel(*inputs)
        torch.cuda.synchronize()


def torch_synchronize() -> None:
    """Wait for queued GPU work, so a failed launch is charged to the candidate that made it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
