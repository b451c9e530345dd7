"""A kernel's Profiler (`kernel.get_profiler()`): TileLang's checks and timings of one compiled
kernel on inputs it makes itself (random values per TensorSupplyType) or is given."""
from __future__ import annotations

import sys

import numpy as np

from .. import arrays
from ..errors import TileError
from ..ir.expr import Var
from .bench import bench, check_bench_options, cuda_device, cuda_median_ms, wall_times
from .compare import compare
from .supply import TensorSupplyType, make_input

# On the host (the interpreter) a kernel run takes long: the fixed-count timer caps its runs.
_HOST_WARMUP, _HOST_REP = 1, 3


def _size_bindings(params, constraints) -> dict:
    """{id(size var): int} from dynamic_symbolic_constraints ({name or var: int})."""
    if constraints is None:
        return {}
    if not isinstance(constraints, dict):
        raise TileError("dynamic_symbolic_constraints must be a dict {size name: int}, got "
                        f"{type(constraints).__name__}")
    by_name = {}
    for key, value in constraints.items():
        name = key.name if isinstance(key, Var) else key
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TileError(f"dynamic_symbolic_constraints[{name!r}] must be a size (an int "
                            f">= 0), got {value!r}")
        by_name[name] = value
    sizes, known = {}, set()
    for p in params:
        for d in getattr(p, "shape", ()):
            if isinstance(d, Var):
                known.add(d.name)
                if d.name in by_name:
                    sizes[id(d)] = by_name[d.name]
    unknown = sorted(set(by_name) - known)
    if unknown:
        raise TileError(f"dynamic_symbolic_constraints names {', '.join(unknown)}, which no "
                        f"parameter's shape uses (symbolic sizes: "
                        f"{', '.join(sorted(known)) or 'none'})")
    return sizes


def _as_list(outputs) -> list:
    """A kernel's or a reference's result as a list of outputs."""
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


class Profiler:
    def __init__(self, kernel, supply=None):
        self.kernel = kernel
        self.supply = TensorSupplyType(supply) if supply is not None else TensorSupplyType.Auto

    def _inputs(self, seed: int = 0, constraints=None):
        from ..kernel_args import bound_shape
        rng = np.random.default_rng(seed)
        sizes = _size_bindings(self.kernel.params, constraints)
        out = []
        for i in self.kernel.inputs:
            p = self.kernel.params[i]
            if isinstance(p, Var):
                raise TileError(f"cannot choose a value for the scalar parameter {p.name}; pass "
                                "input_tensors")
            out.append(make_input(p, self.supply, rng, bound_shape(p, sizes)[0]))
        if self.kernel.backend == "cuda":
            return [arrays.from_numpy(a, True).cuda() for a in out]
        if "torch" in sys.modules:
            out = [arrays.from_numpy(a, True) for a in out]
        return out

    def run_once(self, func=None, input_tensors=None):
        """func (default: the kernel) run once on the profiler's inputs; its result."""
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        return (func or self.kernel)(*inputs)

    def _output_names(self) -> list:
        return [self.kernel.params[i].name for i in self.kernel.out_idx] or ["output"]

    @property
    def func(self):
        """The kernel as a callable (TileLang's Profiler.func: what do_bench times by default)."""
        return self.kernel

    def _outputs_and_reference(self, reference_program, input_tensors):
        """(kernel outputs, reference outputs), each a list, on the same inputs."""
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        return _as_list(self.kernel(*inputs)), _as_list(reference_program(*inputs))

    def assert_allclose(self, reference_program, input_tensors=None, atol=1e-2, rtol=1e-2,
                        max_mismatched_ratio=0.01):
        """Run the kernel and reference_program on the same random inputs and compare."""
        got, want = self._outputs_and_reference(reference_program, input_tensors)
        if len(got) != len(want):
            raise AssertionError(f"the kernel returned {len(got)} output(s), the reference "
                                 f"{len(want)}")
        names = self._output_names()
        for name, g, w in zip(names, got, want):
            compare(name, g, w, atol, rtol, max_mismatched_ratio)

    def manual_assert_close(self, reference_program, input_tensors=None,
                            manual_check_prog=None):
        """Run the kernel and reference_program on the same inputs and hand both outputs to
        manual_check_prog(outputs, reference_outputs), which raises where they differ."""
        if not callable(manual_check_prog):
            raise TileError("manual_assert_close: manual_check_prog must be a function of "
                            "(outputs, reference_outputs)")
        got, want = self._outputs_and_reference(reference_program, input_tensors)
        manual_check_prog(got, want)

    def assert_consistent(self, repeat: int = 10):
        """Run the kernel `repeat` times on the same inputs: every run's outputs must equal the
        first's bit for bit (a race or an uninitialized read shows as a difference)."""
        inputs = self._inputs()
        first = _as_list(self.kernel(*inputs))
        names = self._output_names()
        for run in range(1, repeat):
            for name, a, b in zip(names, first, _as_list(self.kernel(*inputs))):
                a, b = (arrays.to_numpy(x.cpu() if arrays.is_torch(x) else x, name)
                        for x in (a, b))
                if a.tobytes() != b.tobytes():
                    raise AssertionError(f"assert_consistent: output {name} of run {run + 1} "
                                         "differs from the first run's")

    def _device(self, inputs, device):
        """The CUDA device a GPU kernel's timing runs on (its inputs'), None on the host."""
        if self.kernel.backend != "cuda":
            if device is not None and "cuda" in str(device):
                raise TileError(f"do_bench: kernel {self.kernel.func.name} runs on the host "
                                f"({self.kernel.backend}); it cannot be timed on {device}")
            return None
        on = next((t.device for t in inputs if arrays.is_torch(t) and t.is_cuda), None)
        return cuda_device(device if device is not None else on)

    def do_bench(self, func=None, warmup: float = 25, rep: float = 100, n_warmup: int = 0,
                 n_repeat: int = 0, input_tensors=None, backend: str = "event",
                 quantiles=None, return_mode: str = "mean", dynamic_symbolic_constraints=None,
                 device=None, early_stop_baseline=None):
        """Milliseconds of func (default: the kernel) on input_tensors or inputs made for the
        kernel's parameters, by tilecraft.profiler.do_bench's rules: warmup / rep are time
        budgets in milliseconds, n_warmup / n_repeat > 0 run counts; the mean of the timed
        runs unless return_mode or quantiles say otherwise. A GPU kernel is timed with CUDA
        events on its inputs' GPU, the L2 flushed before each run; a kernel on the interpreter
        or the emulator by the host clock. dynamic_symbolic_constraints: {size name: int} for
        inputs made for parameters with symbolic sizes."""
        check_bench_options(warmup, rep, n_warmup, n_repeat, quantiles, return_mode, backend,
                            early_stop_baseline=early_stop_baseline)
        inputs = list(input_tensors) if input_tensors is not None else \
            self._inputs(constraints=dynamic_symbolic_constraints)
        fn = func or self.kernel
        return bench(lambda: fn(*inputs), device=self._device(inputs, device), warmup=warmup,
                     rep=rep, n_warmup=n_warmup, n_repeat=n_repeat, quantiles=quantiles,
                     return_mode=return_mode, backend=backend,
                     early_stop_baseline=early_stop_baseline)

    def median_ms(self, func=None, warmup: int = 25, rep: int = 100, input_tensors=None) -> float:
        """Median milliseconds of func (default: the kernel) over `rep` timed runs after
        `warmup` untimed ones (counts): the autotuner's timer. On the GPU each run is between
        CUDA events after an L2 flush; on the host at most 1 and 3 runs by the host clock."""
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        fn = func or self.kernel
        device = self._device(inputs, None)
        if device is not None:
            import torch
            with torch.cuda.device(device):
                return cuda_median_ms(lambda: fn(*inputs), warmup, rep)
        wall_times(lambda: fn(*inputs), min(warmup, _HOST_WARMUP), lambda: None)
        return float(np.median(wall_times(lambda: fn(*inputs), max(1, min(rep, _HOST_REP)),
                                          lambda: None)))
