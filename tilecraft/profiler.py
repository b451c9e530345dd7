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


def make_input(p: Buffer, supply: TensorSupplyType, rng: np.random.Generator) -> np.ndarray:
    shape = p.static_shape()
    if shape is None:
        raise TileError(f"cannot make an input for {p.name}: its shape is symbolic; pass "
                        "input_tensors")
    d = p.dtype
    if supply == TensorSupplyType.Zero:
        return np.zeros(shape, d.numpy)
    if supply == TensorSupplyType.One:
        return np.ones(shape, d.numpy)
    if d.is_bool:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if d.is_int:
        low = 0 if d.is_unsigned else -2
        return rng.integers(low, 3, shape).astype(d.numpy)
    if supply in (TensorSupplyType.Normal, TensorSupplyType.Randn):
        values = rng.standard_normal(shape)
    elif supply == TensorSupplyType.Integer:
        values = rng.integers(-2, 3, shape)
    else:
        values = rng.uniform(-1.0, 1.0, shape)
    return values.astype(np.float32).astype(d.numpy)


def make_input_on_gpu(p: Buffer, supply: TensorSupplyType, seed: int):
    """make_input's values drawn on the GPU by torch (an 8192 x 8192 input drawn by numpy and
    copied over costs about a second): the same distributions, not the same numbers."""
    import torch
    shape = p.static_shape()
    if shape is None:
        raise TileError(f"cannot make an input for {p.name}: its shape is symbolic; pass "
                        "input_tensors")
    d, want = p.dtype, arrays.torch_dtype(p.dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    kw = dict(device="cuda", generator=gen)
    if supply == TensorSupplyType.Zero:
        return torch.zeros(shape, dtype=want, device="cuda")
    if supply == TensorSupplyType.One:
        return torch.ones(shape, dtype=want, device="cuda")
    if d.is_bool:
        return torch.randint(0, 2, shape, **kw).bool()
    if d.is_int:
        return torch.randint(0 if d.is_unsigned else -2, 3, shape, **kw).to(want)
    if supply in (TensorSupplyType.Normal, TensorSupplyType.Randn):
        values = torch.randn(shape, **kw)
    elif supply == TensorSupplyType.Integer:
        values = torch.randint(-2, 3, shape, **kw).float()
    else:
        values = torch.rand(shape, **kw) * 2 - 1
    return values.to(want)


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
            return cuda_median_ms(lambda: fn(*inputs), warmup, rep, flush_l2)
        for _ in range(min(warmup, 1)):
            fn(*inputs)
        times = []
        for _ in range(max(1, min(rep, 3))):
            t0 = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))


def cuda_median_ms(run, warmup: int = 25, rep: int = 100, flush_l2: bool = True) -> float:
    """Median of CUDA-event timings of run(); with flush_l2, a 256 MiB buffer is overwritten
    before each timed run so every run starts from a cold L2."""
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
            scratch.zero_()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return float(np.median([s.elapsed_time(e) for s, e in zip(starts, ends)]))
