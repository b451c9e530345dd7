"""Checking a kernel against a reference program, and timing it."""
from __future__ import annotations

import sys
import time
from enum import IntEnum

import numpy as np

from . import arrays
from .errors import TileError
from .ir.buffer import Buffer
from .ir.expr import Var


class TensorSupplyType(IntEnum):
    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


class _NumpyRandom:
    """Values for host arrays, from a numpy Generator."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def full(self, shape, value, d):
        return np.full(shape, value, d.numpy)

    def integers(self, low, high, shape):
        return self.rng.integers(low, high, shape)

    def normal(self, shape):
        return self.rng.standard_normal(shape)

    def uniform(self, shape):
        return self.rng.uniform(-1.0, 1.0, shape)

    def cast(self, values, d):
        # through float32: numpy cannot convert float64 to every ml_dtypes type directly
        return values.astype(np.float32).astype(d.numpy) if d.is_float else values.astype(d.numpy)


class TorchRandom:
    """Values drawn on the GPU by torch, seeded: an 8192 x 8192 input drawn by numpy and copied
    over costs about a second. The same distributions as on the host, not the same numbers."""

    def __init__(self, seed: int, device: str = "cuda"):
        import torch
        self.torch, self.device = torch, device
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def full(self, shape, value, d):
        return self.torch.full(shape, value, dtype=arrays.torch_dtype(d), device=self.device)

    def integers(self, low, high, shape):
        return self.torch.randint(low, high, shape, generator=self.gen, device=self.device)

    def normal(self, shape):
        return self.torch.randn(shape, generator=self.gen, device=self.device)

    def uniform(self, shape):
        return self.torch.rand(shape, generator=self.gen, device=self.device) * 2 - 1

    def cast(self, values, d):
        return (values.float() if d.is_float else values).to(arrays.torch_dtype(d))


def make_input(p: Buffer, supply: TensorSupplyType, rng):
    """Random values for input p: rng is a numpy Generator (a host array) or a TorchRandom (a
    tensor on its device)."""
    draw = rng if isinstance(rng, TorchRandom) else _NumpyRandom(rng)
    shape = p.static_shape()
    if shape is None:
        raise TileError(f"cannot make an input for {p.name}: its shape is symbolic; pass "
                        "input_tensors")
    d = p.dtype
    if supply in (TensorSupplyType.Zero, TensorSupplyType.One):
        return draw.full(shape, int(supply == TensorSupplyType.One), d)
    if d.is_bool:
        return draw.cast(draw.integers(0, 2, shape), d)
    if d.is_int:
        return draw.cast(draw.integers(0 if d.is_unsigned else -2, 3, shape), d)
    if supply in (TensorSupplyType.Normal, TensorSupplyType.Randn):
        values = draw.normal(shape)
    elif supply == TensorSupplyType.Integer:
        values = draw.integers(-2, 3, shape)
    else:
        values = draw.uniform(shape)
    return draw.cast(values, d)


def compare(name: str, got, want, atol: float, rtol: float, max_mismatched_ratio: float):
    """Raise AssertionError when more than max_mismatched_ratio of the elements differ."""
    if arrays.is_torch(got) and arrays.is_torch(want) and got.device == want.device and \
            got.shape == want.shape:
        # On the tensors' device: copying an 8192 x 8192 output to the host and comparing it
        # there costs about a second per candidate an autotuner checks.
        g, w = got.detach().double(), want.detach().double()
        close = sys.modules["torch"].isclose(g, w, rtol=rtol, atol=atol, equal_nan=False)
        bad = int(close.numel() - int(close.sum()))
        if bad <= max_mismatched_ratio * max(1, close.numel()):
            return
    g = np.asarray(_as_numpy(got), dtype=np.float64)
    w = np.asarray(_as_numpy(want), dtype=np.float64)
    if g.shape != w.shape:
        raise AssertionError(f"{name}: shape {g.shape} differs from the reference's {w.shape}")
    close = np.isclose(g, w, atol=atol, rtol=rtol, equal_nan=False)
    bad = int(np.size(close) - np.count_nonzero(close))
    if bad > max_mismatched_ratio * max(1, close.size):
        where = np.argwhere(~close)[0]
        idx = tuple(int(i) for i in where)
        raise AssertionError(
            f"{name}: {bad} of {close.size} elements differ beyond atol={atol}, rtol={rtol} "
            f"(first at {idx}: got {g[idx]!r}, expected {w[idx]!r}; max abs diff "
            f"{np.nanmax(np.abs(g - w)) if np.isfinite(g - w).any() else 'nan'})")


def _as_numpy(x):
    if arrays.is_torch(x):
        t = sys.modules["torch"]
        x = x.detach().cpu()
        if x.dtype in (t.bfloat16, t.float16) or "float8" in str(x.dtype):
            x = x.float()
        return x.numpy()
    return np.asarray(x, dtype=np.float64) if not isinstance(x, np.ndarray) else \
        x.astype(np.float64)


class Profiler:
    def __init__(self, kernel, supply=None):
        self.kernel = kernel
        self.supply = TensorSupplyType(supply) if supply is not None else TensorSupplyType.Auto

    def _inputs(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        out = []
        for i in self.kernel.inputs:
            p = self.kernel.params[i]
            if isinstance(p, Var):
                raise TileError(f"cannot choose a value for the scalar parameter {p.name}; pass "
                                "input_tensors")
            out.append(make_input(p, self.supply, rng))
        if self.kernel.backend == "cuda":
            return [arrays.from_numpy(a, True).cuda() for a in out]
        if "torch" in sys.modules:
            out = [arrays.from_numpy(a, True) for a in out]
        return out

    def assert_allclose(self, reference_program, input_tensors=None, atol=1e-2, rtol=1e-2,
                        max_mismatched_ratio=0.01):
        """Run the kernel and reference_program on the same random inputs and compare."""
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        got = self.kernel(*inputs)
        want = reference_program(*inputs)
        got = got if isinstance(got, (list, tuple)) else [got]
        want = want if isinstance(want, (list, tuple)) else [want]
        if len(got) != len(want):
            raise AssertionError(f"the kernel returned {len(got)} output(s), the reference "
                                 f"{len(want)}")
        names = [self.kernel.params[i].name for i in self.kernel.out_idx] or ["output"]
        for name, g, w in zip(names, got, want):
            compare(name, g, w, atol, rtol, max_mismatched_ratio)

    def do_bench(self, func=None, warmup=25, rep=100, input_tensors=None, flush_l2=True,
                 **_unused) -> float:
        """Median milliseconds of func (default: the kernel). On the GPU: CUDA events around
        each run, the L2 cache flushed before it; `warmup` runs first, then `rep` timed runs.
        On the interpreter: wall-clock time of a few runs."""
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        fn = func or self.kernel
        if self.kernel.backend == "cuda":
            import torch
            # The kernel runs where its inputs are; the events and the flush must be there too.
            on = next((t.device for t in inputs if arrays.is_torch(t) and t.is_cuda), None)
            with torch.cuda.device(on):
                return cuda_median_ms(lambda: fn(*inputs), warmup, rep, flush_l2)
        for _ in range(min(warmup, 1)):
            fn(*inputs)
        times = []
        for _ in range(max(1, min(rep, 3))):
            t0 = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))


def cuda_median_ms(run, warmup: int = 25, rep: int = 100, flush_l2: bool | str = True) -> float:
    """Median of CUDA-event timings of run(); with flush_l2, a 256 MiB buffer is overwritten
    before each timed run so every run starts from a cold L2 (as Triton's do_bench does). That
    leaves the L2 full of dirty lines, and the timed run pays for writing them back as its
    loads evict them: up to 50 MB of extra DRAM traffic, which a short kernel feels most.
    flush_l2="clean" reads the buffer instead: just as cold, nothing left to write back."""
    if flush_l2 not in (False, True, "clean"):
        raise ValueError(f"flush_l2 takes False, True or 'clean', got {flush_l2!r}")
    import torch
    scratch = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda") \
        if flush_l2 else None
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for start, end in zip(starts, ends):
        if scratch is not None:
            scratch.sum() if flush_l2 == "clean" else scratch.zero_()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return float(np.median([s.elapsed_time(e) for s, e in zip(starts, ends)]))
