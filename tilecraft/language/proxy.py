"""Parameter annotations, symbolic sizes, and the prim_func / macro decorators."""
from __future__ import annotations

import ast
import difflib
import functools
import inspect

from ..errors import TileError, current_span, raise_clean, span_scope
from ..ir import dtypes as dt
from ..ir.buffer import FRAGMENT, GLOBAL, LOCAL, SHARED, Buffer, BufferData
from ..ir.expr import Expr, Var
from ..ir.stmt import PrimFunc


class TensorSpec:
    """`T.Tensor(shape, dtype)`: a global-memory parameter of fixed or symbolic shape."""

    def __init__(self, shape, dtype="float32", scope=GLOBAL):
        if isinstance(shape, (int, Expr)) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)):
            raise TileError(f"T.Tensor shape must be a tuple of sizes, got {shape!r}",
                            current_span())
        for i, s in enumerate(shape):
            if isinstance(s, bool) or not isinstance(s, (int, Expr)):
                raise TileError(f"T.Tensor dimension {i} must be an int or a symbolic size "
                                f"(T.symbolic), got {s!r}", current_span())
            if isinstance(s, int) and s < 0:
                raise TileError(f"T.Tensor dimension {i} is negative ({s})", current_span())
            if isinstance(s, Expr) and not s.dtype.is_int:
                raise TileError(f"T.Tensor dimension {i} must be an integer, got a {s.dtype} "
                                "value", current_span())
        self.shape = tuple(shape)
        try:
            self.dtype = dt.dtype(dtype)
        except ValueError as e:
            raise TileError(str(e), current_span()) from None
        self.scope = scope

    def make(self, name: str, span=None) -> Buffer:
        return Buffer(name, self.shape, self.dtype, self.scope, span)


class _TensorProxy:
    """`T.Tensor((M, K), dtype)` and `T.Tensor[(M, K), dtype]` both describe a parameter."""

    def __call__(self, shape, dtype="float32", data=None, scope=GLOBAL):
        if data is not None:   # TileLang's view of another buffer's storage: T.view
            from .views import view
            if not isinstance(data, BufferData):
                raise TileError(f"T.Tensor(..., data=...) takes a buffer's storage (A.data), got "
                                f"{type(data).__name__}", current_span())
            return view(data.buffer, shape, dtype)
        return TensorSpec(shape, dtype, scope)

    def __getitem__(self, key):
        if not isinstance(key, tuple) or len(key) != 2:
            raise TileError("T.Tensor[...] takes a shape and a dtype", current_span())
        return TensorSpec(key[0], key[1])


Tensor = _TensorProxy()
Buffer_ = _TensorProxy()


def SharedBuffer(shape, dtype="float32"):
    """A T.macro parameter's annotation: a shared-memory tile of this shape and dtype."""
    return TensorSpec(shape, dtype, SHARED)


def FragmentBuffer(shape, dtype="float32"):
    """A T.macro parameter's annotation: a fragment of this shape and dtype."""
    return TensorSpec(shape, dtype, FRAGMENT)


def LocalBuffer(shape, dtype="float32"):
    """A T.macro parameter's annotation: a per-thread local buffer of this shape and dtype."""
    return TensorSpec(shape, dtype, LOCAL)


def symbolic(name: str, dtype="int32"):
    """A size known only at launch: kernels compile once and bind it from argument shapes.
    `T.symbolic("m, n")` returns a tuple of sizes."""
    names = [n.strip() for n in name.split(",") if n.strip()]
    if not names:
        raise TileError("T.symbolic needs a name", current_span())
    try:
        dtype = dt.dtype(dtype)
    except (ValueError, TypeError) as e:
        raise TileError(f"T.symbolic: {e}", current_span()) from None
    if not dtype.is_int:
        raise TileError(f"T.symbolic: a size must have an integer dtype, got {dtype}",
                        current_span())
    made = tuple(Var(n, dtype, current_span()) for n in names)
    return made[0] if len(made) == 1 else made


dynamic = symbolic


def _param_value(name: str, annotation, span):
    if isinstance(annotation, TensorSpec):
        return annotation.make(name, span)
    if isinstance(annotation, dt.DType) or annotation in (int, float, bool):
        return Var(name, dt.dtype(annotation), span)
    if isinstance(annotation, str) and dt.is_dtype_like(annotation):
        return Var(name, dt.dtype(annotation), span)
    if annotation is inspect.Parameter.empty:
        raise TileError(f"parameter '{name}' needs an annotation: T.Tensor(shape, dtype) for a "
                        "tensor or a dtype such as T.int32 for a scalar", span)
    raise TileError(f"parameter '{name}' has an unsupported annotation {annotation!r}; use "
                    "T.Tensor(shape, dtype) or a scalar dtype", span)


def build_prim_func(func) -> PrimFunc:
    from ..frontend.parser import Parser, Source, parse_prim_func
    source = Source.of(func)
    node = source.func_node
    if not isinstance(node, ast.FunctionDef):
        raise TileError("@T.prim_func decorates a function definition", source.span(node))
    params, values = [], {}
    arg_nodes = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    if node.args.vararg or node.args.kwarg:
        raise TileError("a prim_func cannot take *args or **kwargs", source.span(node))
    evaluator = Parser(func, source)
    for a in arg_nodes:
        span = source.span(a)
        # Python evaluated the annotations where the function was defined (they may name
        # the factory's locals); string annotations are evaluated here.
        annotation = func.__annotations__.get(a.arg, inspect.Parameter.empty)
        if isinstance(annotation, str) and not isinstance(annotation, dt.DType) and \
                a.annotation is not None:
            with span_scope(span):
                annotation = evaluator.expr(a.annotation)
        value = _param_value(a.arg, annotation, span)
        params.append(value)
        values[a.arg] = value
    body, builder = parse_prim_func(func, values)
    return PrimFunc(func.__name__, tuple(params), body, source.span(node),
                    dict(builder.func_attrs))


def _check_options(what: str, options: dict, accepted: dict):
    """Decorator options: each must be known (accepted maps it to the values that change
    nothing here), never silently ignored."""
    for key, value in options.items():
        if key not in accepted:
            close = difflib.get_close_matches(key, list(accepted), n=1)
            hint = f" (did you mean {close[0]}=?)" if close else ""
            known = ", ".join(accepted) or "none"
            raise_clean(TileError(f"{what}: unknown option {key}={value!r}{hint}; it takes "
                                  f"{known}", current_span()))
        if value not in accepted[key]:
            raise_clean(TileError(f"{what}: {key}={value!r} is not supported", current_span()))


def prim_func(func=None, **options):
    """Turn a Python function with T.Tensor annotations into a tile-IR PrimFunc."""
    _check_options("T.prim_func", options, {"private": (True, False),
                                             "check_well_formed": (True, False),
                                             "eager_jit": (False,)})
    if func is None:
        return lambda f: prim_func(f)
    try:
        return build_prim_func(func)
    except TileError as e:
        raise_clean(e)


class Macro:
    """`@T.macro`: a helper whose body is expanded inline wherever it is called."""
    _sources: dict = {}

    def __init__(self, func):
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        from ..frontend.parser import inline_macro
        return inline_macro(self.func, args, kwargs, Macro._sources)


def macro(func=None, **options):
    """`@T.macro`: a helper expanded inline where it is called. Its names are looked up where
    it is defined (hygienic=True, the only mode)."""
    _check_options("T.macro", options, {"hygienic": (True,)})
    if func is None:
        return lambda f: Macro(f)
    return Macro(func)
