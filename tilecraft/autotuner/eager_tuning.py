"""@autotune over an eager @tilecraft.jit function (the body is the kernel, its shapes read
from the call's tensors with T.const).

    @tilecraft.autotune(configs=[{"blk_m": 32}, {"blk_m": 64}])
    @tilecraft.jit
    def topk(logits, k, blk_m=64, threads=128):
        M, N = T.const("M, N")
        logits: T.Tensor([M, N], T.float32)
        ...
    gates, indices = topk(logits, 6)   # tuned once per sizes and values, then run

A call binds the T.const sizes from its tensors and tunes, as the factory form does, a
factory of the function's compile-time parameters and those sizes (the tuner's problem is
then made of plain values: sizes, flags, dtypes, never tensors); the winner runs on the call's
tensors and the call returns its outputs, as the eager function's own call does. Tunable
parameters the call gives are pinned, as in the factory form.
"""
from __future__ import annotations

import inspect

from ..errors import TileError, raise_clean
from ..jit import JITImpl
from . import space


class EagerTuning:
    """What @autotune returns for an eager function: call it like the function."""

    def __init__(self, eager, settings, declared_at, tuner_of):
        self.eager = eager
        self.settings = settings
        self.declared_at = declared_at
        self._tuner_of = tuner_of     # (JITImpl, settings, span) -> AutoTuneImpl
        self._tuners: dict = {}       # (compile-time names, size names, outputs) -> AutoTuneImpl
        self.last = None              # the AutoTuneImpl of the last call
        self.__name__ = eager.__name__
        self.__qualname__ = getattr(eager, "__qualname__", self.__name__)
        self.__doc__ = getattr(eager, "__doc__", None)
        self.__wrapped__ = eager

    def __call__(self, *args, **kwargs):
        try:
            kernel, inputs = self._kernel(args, kwargs, call=True)
        except TileError as e:
            raise_clean(e)
        return kernel(*inputs)

    def compile(self, *args, **kwargs):
        """The tuned kernel for these arguments (tensors, or their T.const sizes by keyword:
        `f.compile(M=1024, N=1024, K=1024)`), not run."""
        try:
            return self._kernel(args, kwargs, call=False)[0]
        except TileError as e:
            raise_clean(e)

    @property
    def result(self):
        return self.last.result if self.last is not None else None

    @property
    def best_config(self):
        return self.last.best_config if self.last is not None else None

    def _kernel(self, args, kwargs, call: bool):
        eager = self.eager
        params = eager.signature.parameters
        given = set(eager.signature.bind_partial(
            *args, **{k: v for k, v in kwargs.items() if k in params}).arguments)
        # tunables the function has no default for take a configuration's value while the
        # call's sizes and outputs are read (the tuner then tries them all)
        kwargs = {**{k: v for k, v in self._first_config(args, kwargs).items()
                     if k not in given}, **kwargs}
        values, runtime, sizes = eager.bind(args, kwargs, call=call)
        func = eager.get_tir(*args, **kwargs)
        outputs = len(func.params) - len(eager.tensor_names) - len(eager.scalars)
        tuner = self._tuner(tuple(values), tuple(sizes), outputs)
        # the defaults of tunable parameters are left to the tuner; given ones are pinned
        tunables = tuner._search((), {**values, **sizes})[1]
        call = {k: v for k, v in values.items() if k in given or k not in tunables}
        self.last = tuner
        return tuner(**call, **sizes), eager.kernel_inputs(runtime)

    def _first_config(self, args, kwargs) -> dict:
        configs = self.settings.configs
        if configs is None:
            return {}
        if callable(configs):
            configs = configs(*args, **kwargs)
        found = space.normalize_configs(configs, self.eager.func, self.declared_at,
                                        self.__name__)
        return space.factory_config(found[0]) if found else {}

    def _tuner(self, names: tuple, sizes: tuple, outputs: int):
        key = (names, sizes, outputs)
        found = self._tuners.get(key)
        if found is None:
            found = self._tuners[key] = self._tuner_of(
                JITImpl(self._factory(names, sizes), list(range(-outputs, 0)),
                        self.eager.target, self.eager.options), self.settings,
                self.declared_at)
        return found

    def _factory(self, names: tuple, sizes: tuple):
        """The eager program as a factory of its compile-time values and T.const sizes."""
        eager = self.eager

        def factory(**kwargs):
            return eager.get_tir(**kwargs)

        own = eager.signature.parameters
        factory.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=own[n].default)
             for n in names] +
            [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in sizes])
        factory.__name__ = eager.__name__
        factory.__module__ = getattr(eager, "__module__", None)
        # not importable by name: the tuner compiles its candidates in this process
        factory.__qualname__ = f"<eager {getattr(eager, '__qualname__', eager.__name__)}>"
        return factory

    def __repr__(self) -> str:
        return f"<autotuned eager {self.__qualname__}>"
