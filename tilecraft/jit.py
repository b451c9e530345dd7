"""tilecraft.jit / tilecraft.compile: a program, or a factory of programs, to a JITKernel
(kernel.py); an eager function (eager.py) to the object that compiles and runs it per call."""
from __future__ import annotations

import functools

from .eager import EagerJIT, is_eager_form
from .errors import TileError, caller_span, raise_clean
from .ir.stmt import PrimFunc
from .jit_options import checked_configs, checked_reporting
from .pass_config import check_pass_configs
from .kernel import JITKernel


def compile(func, out_idx=None, target=None, execution_backend=None, target_host=None,  # noqa: A001
            verbose=False, pass_configs=None, compile_flags=None,
            debug_root_path=None) -> JITKernel:
    """Compile a prim_func into a callable kernel (the options: jit_options.py)."""
    try:
        reporting = checked_reporting(execution_backend, target_host, verbose, debug_root_path)
        return JITKernel(func, out_idx, target, pass_configs=checked_configs(pass_configs,
                                                                             compile_flags),
                         reporting=reporting)
    except TileError as e:
        raise_clean(e)


class JITImpl:
    """What @tilecraft.jit returns: calling it specializes the factory and compiles (cached)."""

    def __init__(self, factory, out_idx, target, options, declared_at=None):
        self.factory = factory
        self.out_idx = out_idx
        self.declared_at = declared_at  # the @tilecraft.jit(...) line, where out_idx is written
        self.target = target
        self.options = options  # "pass_configs" (checked, compile_flags in), "reporting"
        self.cache: dict = {}
        self._with: dict = {}   # with_pass_configs' JITImpls, by their extra configs
        functools.update_wrapper(self, factory)

    def with_pass_configs(self, extra) -> "JITImpl":
        """This factory compiled with the pass configs `extra` over its own (an autotuning
        configuration's `pass_configs`); itself where `extra` is empty. Checked as the
        decorator's are."""
        if not extra:
            return self
        checked = check_pass_configs(extra)   # plain string keys: one entry per setting
        key = repr(sorted(checked.items()))
        found = self._with.get(key)
        if found is None:
            configs = {**self.options["pass_configs"], **checked}
            found = self._with[key] = JITImpl(self.factory, self.out_idx, self.target,
                                              {**self.options, "pass_configs": configs},
                                              self.declared_at)
        return found

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
                kernel = JITKernel(self._prim_func(args, kwargs), self.out_idx, self.target,
                                   self.declared_at, self.options["pass_configs"],
                                   self.options.get("reporting"))
            except TileError as e:
                raise_clean(e)
            self.cache[key] = kernel
        return kernel

    def _prim_func(self, args, kwargs) -> PrimFunc:
        func = self.factory(*args, **kwargs)
        if not isinstance(func, PrimFunc):
            raise TileError(f"@tilecraft.jit: {self.factory.__name__} must return a "
                            f"@T.prim_func, but returned {type(func).__name__}")
        return func

    def compile(self, *args, **kwargs) -> JITKernel:
        return self(*args, **kwargs)

    def get_tir(self, *args, **kwargs) -> PrimFunc:
        """The factory's prim_func for these arguments, not compiled (TileLang's get_tir)."""
        try:
            return self._prim_func(args, kwargs)
        except TileError as e:
            raise_clean(e)

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self(*args, **kwargs).get_kernel_source()


def jit(func=None, *, out_idx=None, target=None, execution_backend=None, target_host=None,
        verbose=False, pass_configs=None, compile_flags=None, debug_root_path=None):
    """Decorate a factory that returns a @T.prim_func (calling it gives a compiled kernel), or
    a function whose body is the kernel program (the eager form, eager.py: calling it with
    tensors runs it). The options are TileLang's (jit_options.py says what each does here);
    they are checked where the decorator is written."""
    declared_at = caller_span()
    try:
        options = {"pass_configs": checked_configs(pass_configs, compile_flags),
                   "reporting": checked_reporting(execution_backend, target_host, verbose,
                                                  debug_root_path)}
    except TileError as e:
        raise_clean(e.with_span(declared_at))

    def wrap(f):
        if isinstance(f, PrimFunc):
            return compile(f, out_idx=out_idx, target=target, pass_configs=pass_configs,
                           compile_flags=compile_flags, execution_backend=execution_backend,
                           target_host=target_host, verbose=verbose,
                           debug_root_path=debug_root_path)
        try:
            if not is_eager_form(f):
                return JITImpl(f, out_idx, target, options,
                               declared_at if out_idx is not None else None)
            if out_idx is not None:
                raise TileError(f"{f.__name__} is an eager @tilecraft.jit function, whose "
                                "outputs are the T.empty tensors it returns; out_idx belongs "
                                "to a factory returning a @T.prim_func", declared_at)
            return EagerJIT(f, target, options)
        except TileError as e:
            raise_clean(e)

    return wrap(func) if func is not None else wrap
