"""Compile-only mode for a census run: every kernel an example builds is compiled for the
target arch (TILECRAFT_TARGET, sm_90a) and recorded; asking for a kernel's profiler ends the
entry being run, since measuring needs the GPU this machine lacks; a call returns its outputs
unrun (zeros of the right shape and dtype, after the usual argument checks), so that the
kernels an example builds after its first call are built too. torch calls that ask for a CUDA
device get the CPU instead (torch_on_cpu), so that a script gets as far as building its
kernels. On a machine with a GPU (the census's --gpu) kernels and profilers run for real and
torch keeps its device: a script's own checks then see computed outputs.

Each kernel is identified by where it is defined: (file, first line of the decorated
function), the same key the static scan (scan.py) gives it."""
from __future__ import annotations

import functools

from .classify import classify


class StopEntry(BaseException):
    """Ends the entry being run (a BaseException: the scripts' `except Exception` lets it by)."""


class Recorder:
    """Kernel attempts as events: {'event': 'kernel', 'file', 'line', 'name', 'phase', 'ok',
    'failure'}; `emit` writes one (the child sends them to the census as JSON lines)."""

    def __init__(self, emit, relpath):
        self.emit = emit
        self.relpath = relpath      # absolute path -> path relative to the examples root
        self.keys: dict = {}        # id(PrimFunc) -> (file, line, name)
        self.alive: list = []       # keeps the PrimFuncs whose id is a key above
        self.fake_calls = 0         # kernel calls answered with unrun outputs

    def kernel(self, key, phase, ok, failure=None, exc=None):
        if exc is not None:
            exc._census_recorded = True
        file, line, name = key
        self.emit({"event": "kernel", "file": file, "line": line, "name": name,
                   "phase": phase, "ok": ok, "failure": failure})

    def key_of_function(self, fn):
        code = fn.__code__
        return (self.relpath(code.co_filename), code.co_firstlineno, fn.__name__)


def _recorded(exc) -> bool:
    return getattr(exc, "_census_recorded", False)


def install(recorder: Recorder, scans, run_kernels: bool = False) -> None:
    """Wrap tilecraft's prim_func, jit and kernel object for the census. `scans(relpath)` gives
    the static scan of an example file (for the kernels a jit factory defines). run_kernels (a
    machine with a GPU): kernel calls and profilers run for real, each timing one run."""
    import importlib
    import tilecraft.language as T
    import tilecraft.language.proxy as proxy
    from tilecraft.ir.stmt import PrimFunc
    jit_module = importlib.import_module("tilecraft.jit")  # the package's `jit` is the function

    original_prim_func = proxy.prim_func

    @functools.wraps(original_prim_func)
    def prim_func(func=None, **options):
        if func is None:
            return lambda f: prim_func(f, **options)
        key = recorder.key_of_function(func)
        try:
            built = original_prim_func(func, **options)
        except BaseException as e:
            if not isinstance(e, StopEntry):
                recorder.kernel(key, "parse", False, classify(e, "kernel"), e)
            raise
        if isinstance(built, PrimFunc):
            recorder.keys[id(built)] = key
            recorder.alive.append(built)
        return built

    proxy.prim_func = T.prim_func = prim_func

    kernel_init = jit_module.JITKernel.__init__

    def init(self, func, *args, **kwargs):
        key = recorder.keys.get(id(func)) or _key_of_span(func, recorder)
        try:
            kernel_init(self, func, *args, **kwargs)
        except BaseException as e:
            if not isinstance(e, StopEntry):
                recorder.kernel(key, "compile", False, classify(e, "kernel"), e)
            raise
        recorder.kernel(key, "compile", True)

    jit_module.JITKernel.__init__ = init

    def called(self, *args, **kwargs):
        recorder.fake_calls += 1
        return _unrun_outputs(self, args)

    def profiled(self, *args, **kwargs):
        raise StopEntry(f"profiler of kernel {self.func.name} asked for")

    if run_kernels:
        _time_one_run()
    else:
        jit_module.JITKernel.__call__ = called
        jit_module.JITKernel.get_profiler = profiled

    factory_call = jit_module.JITImpl.__call__

    def specialize(self, *args, **kwargs):
        try:
            return factory_call(self, *args, **kwargs)
        except BaseException as e:
            if not isinstance(e, StopEntry) and not _recorded(e):
                key = _factory_kernel(self.factory, recorder, scans)
                recorder.kernel(key, "factory", False, classify(e, "kernel"), e)
            raise

    jit_module.JITImpl.__call__ = specialize
    _eager_kernels_by_function(recorder)
    _first_config_only()


def _eager_kernels_by_function(recorder: Recorder):
    """An eager @jit function's kernels are recorded under the function's own key (its first
    line, decorators included, as the scan keys it), not the line its built PrimFunc names."""
    from tilecraft import eager
    program = eager.EagerJIT._program

    def traced(self, args, kwargs, call):
        key = recorder.key_of_function(self.func)
        try:
            done = program(self, args, kwargs, call)
        except BaseException as e:
            if not isinstance(e, StopEntry) and not _recorded(e):
                recorder.kernel(key, "parse", False, classify(e, "kernel"), e)
            raise
        recorder.keys[id(done[1])] = key
        recorder.alive.append(done[1])
        return done

    eager.EagerJIT._program = traced


def _time_one_run():
    """Every timing through tilecraft's profiler runs its function once, warmed up once: the
    census asks whether kernels build and run, and the examples' benchmarks would take most of
    a run's time budget."""
    from tilecraft.profiler import bench as bench_module, kernel_profiler
    original = bench_module.bench

    def once(fn, **options):
        options.update(n_warmup=1, n_repeat=1, early_stop_baseline=None)
        return original(fn, **options)

    bench_module.bench = kernel_profiler.bench = once


def _first_config_only():
    """@autotune builds its first candidate only: tuning measures on a GPU, and one
    configuration shows whether the kernel builds."""
    from tilecraft.autotuner import api, space

    from tilecraft.autotuner.results import AutotuneResult

    def run(self, args, kwargs):
        configs, tunables = self._search(args, kwargs)
        problem = space.split_call(self.factory, tunables, args, kwargs, None, self.__name__)
        if tunables and set(problem.pinned) >= tunables:
            return self.jit_impl(*args, **kwargs)
        if configs is None:
            configs = space.grid(space.recommended_space(self.factory, problem))
        chosen = (space.with_pins(configs, problem.pinned)[:1] or [{}])[0]
        kernel = self.jit_impl.with_pass_configs(space.own_pass_configs(chosen))(
            *args, **{**kwargs, **space.factory_config(chosen)})
        # what tune() and AutoTuner.run() return: the one configuration, unmeasured
        return AutotuneResult(self.__name__, problem.describe(), "compile-only", dict(chosen),
                              float("nan"), [], kernel)

    api.AutoTuneImpl._run = run


def _unrun_outputs(kernel, args):
    """A kernel call's outputs, allocated as the call would (zeros), the kernel not run."""
    import numpy as np
    from tilecraft import arrays, kernel_args
    from tilecraft.ir.buffer import Buffer
    sizes: dict = {}
    use_torch = False
    for i, arg in zip(kernel.inputs, args):
        p = kernel.params[i]
        if isinstance(p, Buffer) and (isinstance(arg, np.ndarray) or arrays.is_torch(arg)):
            kernel_args.check_tensor(p, arg, sizes)
            use_torch |= arrays.is_torch(arg)
        elif not isinstance(p, Buffer):
            sizes[id(p)] = kernel_args.scalar_value(p, arg)
    outputs = []
    for i in kernel.out_idx:
        p = kernel.params[i]
        zeros = np.zeros(kernel_args.output_shape(p, sizes), dtype=p.dtype.numpy)
        outputs.append(arrays.from_numpy(zeros, use_torch))
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else outputs


def _key_of_span(func, recorder):
    span = getattr(func, "span", None)
    if span is None:
        return ("<unknown>", 0, getattr(func, "name", "?"))
    return (recorder.relpath(span.filename), span.line, func.name)


def _factory_kernel(factory, recorder, scans):
    """The kernel a failing jit factory stands for: the first one defined inside it (a
    factory of the eager form is its own kernel), else the factory itself."""
    fn = getattr(factory, "__wrapped__", factory)
    code = getattr(fn, "__code__", None)
    if code is None:
        return ("<unknown>", 0, getattr(fn, "__name__", "?"))
    rel = recorder.relpath(code.co_filename)
    scan = scans(rel)
    if scan is not None:
        end = max((end for line, end in scan.factories if line == code.co_firstlineno),
                  default=None)
        if end is not None:
            inner = scan.kernels_within(code.co_firstlineno, end)
            if inner:
                return (rel, inner[0].line, inner[0].name)
    return (rel, code.co_firstlineno, fn.__name__)
