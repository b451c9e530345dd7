"""The two evaluations of an eager @tilecraft.jit body (language/eager.py shows the form).

The sizes named by T.const are known only once the tensors of a call are matched against the
declarations `A: T.Tensor[[M, K], dtype]`, which the body itself makes. So the body is
evaluated twice, as TileLang does:
- the signature trace evaluates the statements up to the last tensor declaration, each T.const
  a symbolic size, and records every declaration (its shape in those sizes, its dtype, its
  line); the caller binds the sizes from the call's tensors (eager_binding.py);
- the build evaluates the whole body with each T.const the int it was bound to, and makes the
  program: its parameters are the tensor arguments and runtime scalars in the function's
  order, then the T.empty outputs in the order it returns them.
EagerTrace is what the builder holds while either runs: the parser hands it the declarations
and the `return`, T.const / T.empty ask it for their values.
"""
from __future__ import annotations

import ast

from ..errors import Span, TileError
from ..frontend import builder as bld
from ..frontend.expressions import _Return
from ..frontend.parser import Parser, parse_prim_func
from ..ir.buffer import GLOBAL, Buffer
from ..ir.expr import Var
from ..ir.stmt import PrimFunc
from .proxy import TensorSpec


class Declaration:
    """A tensor argument as the body declares it."""

    def __init__(self, name: str, spec: TensorSpec, span: Span | None, buffer: Buffer):
        self.name, self.spec, self.span, self.buffer = name, spec, span, buffer


class EagerTrace:
    def __init__(self, func_name: str, tensor_names: tuple, presets: dict,
                 const_values: dict | None):
        self.func_name = func_name
        self.tensor_names = tensor_names     # the parameters that are tensors, in order
        self.const_values = const_values     # None while tracing the signature
        self.consts: dict = {}               # name -> Var (signature trace) or its T.const span
        self.declared: dict = {}             # name -> Declaration
        for name, (spec, span) in presets.items():   # declared in the function's signature
            self.declared[name] = Declaration(name, spec, span, spec.make(name, span))
        self.outputs: list = []              # (Buffer, span) of each T.empty, in order
        self.returned_outputs: list = []

    @property
    def complete(self) -> bool:
        return all(n in self.declared for n in self.tensor_names)

    def enter(self, scope):
        """Bind what the signature declares; a use of a tensor argument before its declaration
        is an error naming the declaration it needs."""
        for name in self.tensor_names:
            if name in self.declared:
                scope.bind(name, self.declared[name].buffer)
            else:
                scope.gone[name] = (f"tensor argument {name} is used before its declaration; "
                                    f"declare it first: `{name}: T.Tensor[shape, dtype]`")

    # --- what the builtins and the parser ask -------------------------------------------------
    def const(self, name: str, dtype, span):
        if name in self.consts:
            raise TileError(f"T.const {name} is declared twice", span)
        if self.const_values is None:
            var = self.consts[name] = Var(name, dtype, span)
            return var
        if name not in self.const_values:
            raise TileError(f"T.const {name} was not declared when the function's tensor "
                            "arguments were bound; declare every T.const before the tensor "
                            "declarations, unconditionally", span)
        self.consts[name] = span
        return self.const_values[name]

    def declare(self, name: str, annotation, span):
        if name not in self.tensor_names:
            raise TileError(f"{name} is not a parameter of {self.func_name}; a declaration "
                            "`name: T.Tensor[shape, dtype]` in the body declares one of its "
                            "tensor arguments", span)
        if not isinstance(annotation, TensorSpec):
            raise TileError(f"the declaration of {name} must be T.Tensor[shape, dtype], got "
                            f"{type(annotation).__name__}", span)
        if name in self.declared:
            where = self.declared[name].span
            line = f" (line {where.line})" if where is not None else ""
            raise TileError(f"tensor argument {name} is declared twice; the first "
                            f"declaration{line} stands", span)
        made = Declaration(name, annotation, span, annotation.make(name, span))
        self.declared[name] = made
        return made.buffer

    def output(self, dims: tuple, dtype, span) -> Buffer:
        buffer = Buffer("__unnamed", dims, dtype, GLOBAL, span)
        self.outputs.append((buffer, span))
        return buffer

    def returned(self, value, span):
        items = () if value is None else value if isinstance(value, (tuple, list)) else (value,)
        mine = {id(b) for b, _ in self.outputs}
        for item in items:
            if not isinstance(item, Buffer) or id(item) not in mine:
                what = item.name if isinstance(item, Buffer) else type(item).__name__
                raise TileError(f"an eager @tilecraft.jit function returns the tensors it "
                                f"made with T.empty; {what} is not one", span)
            if any(item is r for r in self.returned_outputs):
                raise TileError(f"output {item.name} is returned twice", span)
            self.returned_outputs.append(item)

    def finish(self):
        """At the end of the body: every output made is returned, and named."""
        for buffer, span in self.outputs:
            if not any(buffer is r for r in self.returned_outputs):
                name = "" if buffer.name.startswith("__unnamed") else f" {buffer.name}"
                raise TileError(f"output{name} (T.empty) is never returned; the function "
                                "returns every tensor it makes with T.empty", span)
        for i, buffer in enumerate(self.returned_outputs):
            if buffer.name.startswith("__unnamed"):
                buffer.name = f"out{i}"


def trace_signature(func, values: dict, tensor_names: tuple, presets: dict) -> EagerTrace:
    """The declarations of func's tensor arguments, in the symbolic sizes of its T.consts: its
    body evaluated until the last one is declared (or, without tensor arguments, the first
    T.Kernel), or a return."""
    trace = EagerTrace(func.__name__, tensor_names, presets, None)
    parser = Parser(func)
    parser.scope.env.update(values)
    trace.enter(parser.scope)
    with bld.activate(bld.Builder(parser, trace)):
        for stmt in parser.source.func_node.body:
            if isinstance(stmt, ast.With) or (tensor_names and trace.complete):
                break
            try:
                parser.stmt(stmt)
            except _Return:
                break
    return trace


def build_eager(func, values: dict, params: tuple, presets: dict,
                const_values: dict) -> PrimFunc:
    """func's program with its T.consts bound to const_values. params: (name, Var or None)
    per runtime parameter in order, None for a tensor argument."""
    tensor_names = tuple(name for name, var in params if var is None)
    trace = EagerTrace(func.__name__, tensor_names, presets, const_values)
    env = dict(values)
    env.update((name, var) for name, var in params if var is not None)
    body, builder = parse_prim_func(func, env, eager=trace)
    made = []
    for name, var in params:
        if var is None and name not in trace.declared:
            raise TileError(f"tensor argument {name} of {func.__name__} is never declared; "
                            f"declare it in the body: `{name}: T.Tensor[shape, dtype]`",
                            builder.root.span(builder.root.source.func_node))
        made.append(var if var is not None else trace.declared[name].buffer)
    return PrimFunc(func.__name__, tuple(made) + tuple(trace.returned_outputs), body,
                    builder.root.span(builder.root.source.func_node), dict(builder.func_attrs))
