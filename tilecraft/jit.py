"""tilecraft.jit / tilecraft.compile and the kernel object they return."""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from . import arrays, target as targets
from .errors import TileError, caller_span, raise_clean
from .ir.buffer import Buffer
from .ir.expr import Const, Expr, Var
from .ir.stmt import PrimFunc
from .ir.verify import verify


class JITKernel:
    """A compiled kernel: call it with the input tensors; outputs (out_idx) are allocated."""

    def __init__(self, func: PrimFunc, out_idx=None, target=None, out_idx_span=None):
        if not isinstance(func, PrimFunc):
            raise TileError(f"expected a @T.prim_func, got {type(func).__name__}")
        verify(func)
        self.func = func
        self.backend = targets.resolve(target)
        self.params = func.params
        self.out_idx = _normalize_out_idx(out_idx, func, out_idx_span)
        self.inputs = [i for i in range(len(self.params)) if i not in self.out_idx]

    # --- calling --------------------------------------------------------------
    def __call__(self, *args):
        try:
            return self._call(args)
        except TileError as e:
            raise_clean(e)

    def _call(self, args):
        names = [self.params[i].name for i in self.inputs]
        if len(args) != len(self.inputs):
            raise TileError(f"kernel {self.func.name} takes {len(self.inputs)} argument(s) "
                            f"({', '.join(names)}), got {len(args)}")
        sizes: dict[int, int] = {}
        arrays_in, bindings, use_torch = {}, {}, False
        for i, arg in zip(self.inputs, args):
            p = self.params[i]
            if isinstance(p, Buffer):
                use_torch = use_torch or arrays.is_torch(arg)
                a = arrays.to_numpy(arg, p.name)
                _check_tensor(p, a, sizes)
                arrays_in[id(p)] = a
            else:
                bindings[id(p)] = _scalar(p, arg)
                sizes[id(p)] = bindings[id(p)]
        outputs = []
        for i in self.out_idx:
            p = self.params[i]
            shape = _output_shape(p, sizes)
            from .interp.machine import poison
            a = poison(shape, p.dtype)
            arrays_in[id(p)] = a
            outputs.append(a)
        for p in self.params:
            for d in (p.shape if isinstance(p, Buffer) else ()):
                if isinstance(d, Var) and id(d) in sizes:
                    bindings[id(d)] = np.int64(sizes[id(d)])
        self._run(bindings, arrays_in)
        results = [arrays.from_numpy(a, use_torch) for a in outputs]
        if not results:
            return None
        return results[0] if len(results) == 1 else results

    def _run(self, bindings, arrays_in):
        from .interp import Machine
        Machine(self.func).run(bindings, arrays_in)

    # --- inspection -----------------------------------------------------------
    def get_kernel_source(self) -> str:
        """The program this kernel runs (tile IR text on the interpreter)."""
        return self.func.script()

    @property
    def kernel_source(self) -> str:
        return self.get_kernel_source()

    def get_profiler(self, tensor_supply_type=None):
        from .profiler import Profiler
        return Profiler(self, tensor_supply_type)

    def __repr__(self) -> str:
        return f"<JITKernel {self.func.name} on {self.backend}>"


def _normalize_out_idx(out_idx, func, span=None) -> list[int]:
    """out_idx as sorted non-negative indices; span is where out_idx was written, if known."""
    if out_idx is None:
        return []
    items = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    n = len(func.params)
    out = []
    for i in items:
        if not isinstance(i, int) or not -n <= i < n:
            raise TileError(f"out_idx {i!r} is out of range for {func.name}, which has {n} "
                            "parameters", span)
        i %= n
        if not isinstance(func.params[i], Buffer):
            raise TileError(f"out_idx {i} names the scalar parameter {func.params[i].name}; only "
                            "tensors can be outputs", span)
        out.append(i)
    return sorted(set(out))


def _scalar(p: Var, arg):
    if isinstance(arg, (np.generic,)):
        arg = arg.item()
    if p.dtype.is_float:
        if not isinstance(arg, (int, float)) or isinstance(arg, bool):
            raise TileError(f"argument {p.name} must be a number ({p.dtype}), got "
                            f"{type(arg).__name__}")
        return np.dtype(p.dtype.numpy).type(arg)
    if isinstance(arg, bool) or not isinstance(arg, int):
        raise TileError(f"argument {p.name} must be an int ({p.dtype}), got {type(arg).__name__}")
    return np.dtype(p.dtype.numpy).type(arg)


def _check_tensor(p: Buffer, a: np.ndarray, sizes: dict):
    try:
        got = arrays.dtype_of(a)
    except (ValueError, TypeError):
        raise TileError(f"argument {p.name}: expected dtype {p.dtype}, got an array of "
                        f"unsupported dtype {getattr(a, 'dtype', type(a).__name__)}") from None
    if got is not p.dtype:
        raise TileError(f"argument {p.name}: expected dtype {p.dtype}, got {got}")
    if a.ndim != len(p.shape):
        raise TileError(f"argument {p.name}: expected {len(p.shape)} dimension(s) "
                        f"{_shape_text(p.shape)}, got shape {tuple(a.shape)}")
    for d, (want, have) in enumerate(zip(p.shape, a.shape)):
        if isinstance(want, Var):
            bound = sizes.setdefault(id(want), int(have))
            if bound != have:
                raise TileError(f"argument {p.name}: dimension {d} is {have}, but the size "
                                f"{want.name} was already bound to {bound} by another argument")
        elif isinstance(want, (int, Const)):
            value = want if isinstance(want, int) else want.value
            if value != have:
                raise TileError(f"argument {p.name}: expected shape {_shape_text(p.shape)}, got "
                                f"{tuple(a.shape)}")


def _output_shape(p: Buffer, sizes: dict) -> tuple:
    from .interp.values import Evaluator
    shape = []
    for d in p.shape:
        if isinstance(d, int):
            shape.append(d)
        elif isinstance(d, Var):
            if id(d) not in sizes:
                raise TileError(f"cannot allocate output {p.name}: its size {d.name} is not "
                                "given by any input")
            shape.append(sizes[id(d)])
        elif isinstance(d, Expr):
            known = SimpleNamespace(env={k: np.int64(v) for k, v in sizes.items()})
            shape.append(int(Evaluator(known).eval(d)))
    return tuple(shape)


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(s) if isinstance(s, int) else repr(s) for s in shape) + \
        ("," if len(shape) == 1 else "") + ")"


def compile(func, out_idx=None, target=None, execution_backend=None, target_host=None,  # noqa: A001
            verbose=False, pass_configs=None, compile_flags=None) -> JITKernel:
    """Compile a prim_func into a callable kernel."""
    try:
        return JITKernel(func, out_idx, target)
    except TileError as e:
        raise_clean(e)


class JITImpl:
    """What @tilecraft.jit returns: calling it specializes the factory and compiles (cached)."""

    def __init__(self, factory, out_idx, target, options, declared_at=None):
        self.factory = factory
        self.out_idx = out_idx
        self.declared_at = declared_at  # the @tilecraft.jit(...) line, where out_idx is written
        self.target = target
        self.options = options
        self.cache: dict = {}
        functools.update_wrapper(self, factory)

    def _key(self, args, kwargs):
        try:
            key = (args, tuple(sorted(kwargs.items())))
            hash(key)
            return key
        except TypeError:
            return repr((args, sorted(kwargs.items())))

    def __call__(self, *args, **kwargs) -> JITKernel:
        key = self._key(args, kwargs)
        kernel = self.cache.get(key)
        if kernel is None:
            try:
                func = self.factory(*args, **kwargs)
                if not isinstance(func, PrimFunc):
                    raise TileError(f"@tilecraft.jit: {self.factory.__name__} must return a "
                                    f"@T.prim_func, but returned {type(func).__name__}")
                kernel = JITKernel(func, self.out_idx, self.target, self.declared_at)
            except TileError as e:
                raise_clean(e)
            self.cache[key] = kernel
        return kernel

    def compile(self, *args, **kwargs) -> JITKernel:
        return self(*args, **kwargs)

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self(*args, **kwargs).get_kernel_source()


def jit(func=None, *, out_idx=None, target=None, execution_backend=None, target_host=None,
        verbose=False, pass_configs=None, compile_flags=None, debug_root_path=None):
    """Decorate a factory that returns a @T.prim_func; calling it gives a compiled kernel."""
    options = {"pass_configs": pass_configs or {}, "compile_flags": compile_flags}
    declared_at = caller_span() if out_idx is not None else None

    def wrap(f):
        if isinstance(f, PrimFunc):
            return compile(f, out_idx=out_idx, target=target)
        return JITImpl(f, out_idx, target, options, declared_at)

    return wrap(func) if func is not None else wrap
