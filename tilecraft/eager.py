"""@tilecraft.jit on a function whose body is the kernel program: TileLang's eager form.

    @tilecraft.jit
    def matmul(A, B, block_M: int = 128):
        M, N, K = T.const("M, N, K")
        A: T.Tensor[[M, K], T.float16]
        ...
        C = T.empty((M, N), T.float16)
        with T.Kernel(...):
            ...
        return C

    c = matmul(a, b)

The other form (the classic, or lazy, one) is a factory that returns a @T.prim_func; the form
is told from the source when the function is decorated (is_eager_form). A call of the eager
form splits its arguments: the tensor arguments (those declared `A: T.Tensor[...]` in the body
or the signature) and runtime scalars (annotated with a dtype, `n: T.int32`) are the kernel's;
every other parameter is a compile-time value of the program. The T.const sizes are bound from
the tensors' shapes (eager_binding.py); the program is built and compiled once per set of
compile-time values and sizes, and the call runs it on the tensors and returns its T.empty
outputs: None, one tensor, or a list in the order the function returns them.
"""
from __future__ import annotations

import ast
import functools
import inspect

from . import eager_binding
from .errors import TileError, raise_clean
from .frontend.parser import Source
from .frontend.scopes import Scope
from .ir import dtypes as dt
from .ir.expr import Var
from .kernel import JITKernel
from .language import eager as eager_builtins
from .language import loops
from .language.eager_trace import build_eager, trace_signature
from .language.proxy import TensorSpec

def _namespace(func) -> dict:
    return Scope(func).namespace()


def _params(node) -> list:
    return node.args.posonlyargs + node.args.args + node.args.kwonlyargs


def _resolve(node, names: dict):
    """The object a Name or attribute chain (T.const) refers to, without calling anything."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def _own_statements(body):
    """The nodes of a function body; a function or class defined in it, but not its body."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(getattr(node, "decorator_list", ()))
            continue
        stack.extend(ast.iter_child_nodes(node))


def _declared_names(source, params) -> list:
    """Parameters declared `A: T.Tensor[...]` in the body; one declared inside a `with` block
    (a T.Kernel) is an error at its line."""
    found = []

    def visit(stmts, kernel):
        for s in stmts:
            if isinstance(s, ast.AnnAssign) and s.value is None and \
                    isinstance(s.target, ast.Name) and s.target.id in params:
                if kernel:
                    raise TileError(f"the declaration of {s.target.id} belongs in the "
                                    "function's own body, before the T.Kernel blocks that "
                                    "use it", source.span(s))
                found.append(s.target.id)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(s, field, None)
                if isinstance(inner, list) and not isinstance(
                        s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(inner, kernel or isinstance(s, ast.With))

    visit(source.func_node.body, False)
    return found


def _annotations(func, strict: bool = True) -> dict:
    """The signature's annotations, evaluated (string annotations in the function's names);
    not strict: those that cannot be evaluated are left out."""
    out = {}
    for name, value in getattr(func, "__annotations__", {}).items():
        # a dtype (T.float32) is a str too, but it is the annotation's value, not its source
        if isinstance(value, str) and not isinstance(value, dt.DType):
            try:
                value = eval(value, _namespace(func))  # noqa: S307 - the user's own annotation
            except Exception as e:  # noqa: BLE001
                if not strict:
                    continue
                raise TileError(f"the annotation of {name} ({value!r}) cannot be evaluated: "
                                f"{type(e).__name__}: {e}") from None
        out[name] = value
    return out


def is_eager_form(func) -> bool:
    """Whether func's body is a kernel program (T.const, T.empty, T.Kernel, declarations of
    its tensor arguments, or tensor annotations in its signature) rather than a factory that
    defines and returns a @T.prim_func."""
    if getattr(func, "__name__", None) == "<lambda>":
        return False       # a lambda has no body of statements (its line may not even parse)
    try:
        source = Source.of(func)
    except (TileError, SyntaxError):
        return False       # no source to read: the factory form reports what it needs
    node = source.func_node
    if not isinstance(node, ast.FunctionDef):
        return False
    names = _namespace(func)
    for n in _own_statements(node.body):
        if isinstance(n, ast.FunctionDef) and any(
                getattr(_resolve(d.func if isinstance(d, ast.Call) else d, names), "__name__",
                        None) == "prim_func" for d in n.decorator_list):
            return False
    if _declared_names(source, [a.arg for a in _params(node)]):
        return True
    if any(isinstance(v, TensorSpec) for v in _annotations(func, strict=False).values()):
        return True
    builtins = {id(eager_builtins.const), id(eager_builtins.empty), id(loops.Kernel)}
    return any(isinstance(n, ast.Call) and id(_resolve(n.func, names)) in builtins
               for n in _own_statements(node.body))


def _signature_parts(func):
    """(tensor argument names, {runtime scalar: dtype}, {name: (TensorSpec, span)} declared
    in the signature), each in the order of the parameters."""
    source = Source.of(func)
    node = source.func_node
    if node.args.vararg or node.args.kwarg:
        raise TileError(f"an eager @tilecraft.jit function takes named parameters; "
                        f"{func.__name__} has *args or **kwargs", source.span(node))
    spans = {a.arg: source.span(a) for a in _params(node)}
    params = list(spans)
    annotations = _annotations(func)
    declared = set(_declared_names(source, params))
    presets, scalars = {}, {}
    for name in params:
        value = annotations.get(name)
        if isinstance(value, TensorSpec) and name not in declared:
            presets[name] = (value, spans[name])
        elif isinstance(value, dt.DType) and name not in declared:
            scalars[name] = value
    tensors = tuple(n for n in params if n in declared or n in presets)
    return tensors, scalars, presets


def _key(values: dict):
    key = tuple(values.items())
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)


class EagerJIT:
    """What @tilecraft.jit returns for an eager function: call it with the tensors to compile
    (once per compile-time values and T.const sizes) and run it."""

    def __init__(self, func, target, options: dict):
        self.func = func
        self.target = target
        self.options = options
        self.signature = inspect.signature(func)
        self.tensor_names, scalars, self.presets = _signature_parts(func)
        self.scalars = {n: Var(n, dtype) for n, dtype in scalars.items()}  # runtime scalars
        self._traces: dict = {}    # compile-time values -> the signature trace
        self._programs: dict = {}  # (compile-time values, sizes) -> PrimFunc
        self._kernels: dict = {}   # the same key -> JITKernel
        functools.update_wrapper(self, func)

    # --- the user's entry points -----------------------------------------------------------
    def __call__(self, *args, **kwargs):
        try:
            key, kernel, inputs = self._kernel(args, kwargs, call=True)
        except TileError as e:
            raise_clean(e)
        return kernel(*inputs)

    def compile(self, *args, **kwargs) -> JITKernel:
        """The kernel for these arguments (tensors, or their T.const sizes by keyword)."""
        try:
            return self._kernel(args, kwargs, call=False)[1]
        except TileError as e:
            raise_clean(e)

    def get_tir(self, *args, **kwargs):
        try:
            return self._program(args, kwargs, call=False)[1]
        except TileError as e:
            raise_clean(e)

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()

    # --- specialization --------------------------------------------------------------------
    def _split(self, args, kwargs, call: bool):
        """(compile-time values, runtime arguments by name, T.const sizes by keyword)."""
        params = self.signature.parameters
        named = {k: v for k, v in kwargs.items() if k in params}
        sizes = {k: v for k, v in kwargs.items() if k not in params}
        try:
            bound = self.signature.bind_partial(*args, **named)
        except TypeError as e:
            raise TileError(f"{self.func.__name__}: {e}") from None
        bound.apply_defaults()
        values, runtime = {}, {}
        for name in params:
            given = name in bound.arguments
            value = bound.arguments.get(name)
            if name in self.tensor_names or name in self.scalars:
                if given:
                    if name in self.tensor_names and not eager_binding.is_tensor(value):
                        raise TileError(f"argument {name} is a tensor argument of "
                                        f"{self.func.__name__}; pass a numpy array or a torch "
                                        f"tensor, not a {type(value).__name__}")
                    runtime[name] = value
                elif call:
                    raise TileError(f"{self.func.__name__}: missing argument {name}")
            elif not given:
                raise TileError(f"{self.func.__name__}: missing argument {name}")
            elif eager_binding.is_tensor(value):
                raise TileError(f"argument {name} is a tensor, but {self.func.__name__} does not "
                                f"declare it as one; declare it in the body: "
                                f"`{name}: T.Tensor[shape, dtype]`")
            else:
                values[name] = value
        return values, runtime, sizes

    def bind(self, args, kwargs, call: bool):
        """(compile-time values, runtime arguments by name, {T.const name: size}) of a call."""
        values, runtime, sizes = self._split(args, kwargs, call)
        compile_key = _key(values)
        trace = self._traces.get(compile_key)
        if trace is None:
            trace = self._traces[compile_key] = trace_signature(
                self.func, {**values, **self.scalars}, self.tensor_names, self.presets)
        tensors = {n: runtime[n] for n in self.tensor_names if n in runtime}
        return values, runtime, eager_binding.bind_sizes(trace, tensors, sizes)

    def kernel_inputs(self, runtime: dict) -> list:
        """A call's runtime arguments in the order of the kernel's inputs."""
        return [runtime[n] for n in self.signature.parameters if n in runtime]

    def _program(self, args, kwargs, call: bool):
        values, runtime, bound = self.bind(args, kwargs, call)
        compile_key = _key(values)
        key = (compile_key, tuple(bound.items()))
        func = self._programs.get(key)
        if func is None:
            params = tuple((n, self.scalars.get(n)) for n in self.signature.parameters
                           if n in self.tensor_names or n in self.scalars)
            func = self._programs[key] = build_eager(self.func, values, params, self.presets,
                                                     bound)
        return key, func, self.kernel_inputs(runtime)

    def _kernel(self, args, kwargs, call: bool):
        key, func, inputs = self._program(args, kwargs, call)
        kernel = self._kernels.get(key)
        if kernel is None:
            outputs = len(func.params) - len(self.tensor_names) - len(self.scalars)
            kernel = self._kernels[key] = JITKernel(
                func, list(range(len(func.params) - outputs, len(func.params))), self.target,
                pass_configs=self.options["pass_configs"],
                reporting=self.options.get("reporting"))
        return key, kernel, inputs

    def __repr__(self) -> str:
        return f"<eager jit {self.func.__name__}>"
