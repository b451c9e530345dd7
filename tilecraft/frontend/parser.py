"""Python AST of a @T.prim_func -> tile IR.

The body is evaluated statement by statement. Names bound to compile-time Python values
(tile sizes, `is_causal`, helper results) steer the evaluation like Python itself: an `if` on a
compile-time value keeps one branch, a `for` over a Python list unrolls. Values that only exist
on the device (block indices, loop variables, buffer elements) build IR: an `if` on them becomes
an IfThenElse, `x = expr` binds the expression, `buf[i] = v` a store.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

from . import builder as bld
from .access_bounds import check_access_bounds
from .remap_accesses import remap_accesses
from .expressions import _BINOPS, ExpressionEvaluator, _Return
from .frames import AttrFrame, IndexLoop, KernelFrame, LoopFrame, WarpGroupFrame
from .parallel_accumulation import check_parallel_accumulations
from .thread_checks import check_thread_uses
from .thread_range_regions import thread_range_regions
from .reducers import rewrite_reducers
from .scopes import AFTER_IF, AFTER_KERNEL, AFTER_LOOP, Scope
from ..errors import Span, TileError, current_span, span_scope
from ..ir import expr as ex
from ..ir.buffer import GLOBAL, LOCAL_VAR, Buffer, is_shared
from ..ir.expr import BufferLoad, Expr
from ..ir.linear import constant_value, decide
from ..ir.visitor import walk
from ..ir.stmt import Allocate, BufferStore, Evaluate, IfThenElse, Kernel, stmts_of

_SOURCES: dict = {}
_SOURCES_KEPT = 256


class Source:
    """The parsed source of one Python function, with the offsets that map AST positions back
    to the user's file."""

    @classmethod
    def of(cls, func) -> "Source":
        """The parsed source of func, read and parsed once per code object: a jit factory
        defines its prim_func anew at every call (every configuration an autotuner tries), but
        always from the same `def`, so the text and tree are the same. The tree is only read."""
        code = getattr(func, "__code__", None)
        found = _SOURCES.get(code) if code is not None else None
        if found is None:
            found = cls(func)
            if code is not None:
                if len(_SOURCES) >= _SOURCES_KEPT:
                    _SOURCES.pop(next(iter(_SOURCES)))
                _SOURCES[code] = found
        return found

    def __init__(self, func):
        try:
            lines, first = inspect.getsourcelines(func)
            self.filename = inspect.getsourcefile(func) or "<unknown>"
        except (OSError, TypeError) as e:
            raise TileError(f"cannot read the source of {getattr(func, '__name__', func)!r} "
                            f"({e}); a prim_func must be defined in a file") from None
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        self.indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        self.first_line = first
        self.lines = lines
        self.tree = ast.parse(dedented)
        self.func_node = self.tree.body[0]

    def span(self, node) -> Span | None:
        if not hasattr(node, "lineno"):
            return None
        line = node.lineno
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        end_line = getattr(node, "end_lineno", line) or line
        end_col = getattr(node, "end_col_offset", node.col_offset) or node.col_offset
        return Span(self.filename, line + self.first_line - 1, node.col_offset + self.indent + 1,
                    end_line + self.first_line - 1, end_col + self.indent + 1, text)


class Parser(ExpressionEvaluator):
    def __init__(self, func, source: Source | None = None):
        self.func = func
        self.source = source or Source.of(func)
        self.scope = Scope(func)

    def span(self, node):
        return self.source.span(node)

    # --- statements -----------------------------------------------------------
    def body(self, stmts):
        for s in stmts:
            self.stmt(s)

    def stmt(self, node):
        handler = getattr(self, "stmt_" + type(node).__name__, None)
        span = self.span(node)
        with span_scope(span):
            if handler is None:
                raise TileError(f"`{type(node).__name__.lower()}` statements are not supported in "
                                "a prim_func", span)
            try:
                handler(node)
            except (TileError, _Return):
                raise
            except Exception as e:  # noqa: BLE001 - reported at the user's line
                raise self.wrap(e, span) from None

    def stmt_Pass(self, node):
        pass

    def stmt_Expr(self, node):
        value = self.expr(node.value)
        if isinstance(value, ex.Call):
            bld.active("a call expression").emit(Evaluate(value, self.span(node)))
        elif isinstance(value, Expr):
            raise TileError("this expression is computed and then discarded; assign it or "
                            "store it into a buffer", self.span(node))

    def stmt_Assign(self, node):
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value, node)

    def stmt_AnnAssign(self, node):
        if node.value is None:
            self.declare(node)
            return
        self.assign(node.target, self.expr(node.value), node)

    def declare(self, node):
        """`A: T.Tensor[shape, dtype]`: a tensor argument's declaration in the body of an eager
        @tilecraft.jit function (the trace makes the buffer and binds the sizes in it)."""
        span = self.span(node)
        b = bld.maybe_active()
        if b is None or b.eager is None:
            raise TileError("a declaration without a value (`A: T.Tensor[shape, dtype]`) "
                            "declares a tensor argument in the body of an eager "
                            "@tilecraft.jit function; a @T.prim_func annotates its parameters",
                            span)
        name = ast.unparse(node.target)   # the trace refuses what names no tensor argument
        if self is not b.root or not b.outside_device_code:
            raise TileError(f"the declaration of {name} belongs in the function's own body, "
                            "before the T.Kernel blocks that use it", span)
        self.scope.bind(name, b.eager.declare(name, self.expr(node.annotation), span))

    def stmt_AugAssign(self, node):
        op = _BINOPS[type(node.op)]
        target = node.target
        if isinstance(target, ast.Name):
            current = self.scope.lookup(target.id, self.span(target))
            if isinstance(current, Buffer) and current.scope == LOCAL_VAR:
                self.store(current, (ex.convert(0),), op(current[0], self.expr(node.value)), node)
            else:
                self.scope.bind(target.id, op(current, self.expr(node.value)))
            return
        if isinstance(target, ast.Subscript):
            load = self.expr(target)
            if not isinstance(load, BufferLoad):
                raise TileError("augmented assignment needs a single buffer element on the left",
                                self.span(target))
            self.store(load.buffer, load.indices, op(load, self.expr(node.value)), node)
            return
        raise TileError("unsupported target of an augmented assignment", self.span(target))

    def assign(self, target, value, node):
        span = self.span(target)
        if isinstance(target, ast.Name):
            current = self.scope.env.get(target.id)
            if isinstance(current, Buffer) and current.scope == LOCAL_VAR and \
                    not isinstance(value, Buffer):
                self.store(current, (ex.convert(0),), value, node)
            else:
                if isinstance(value, Buffer) and value.name.startswith("__unnamed"):
                    value.name = target.id
                self.scope.bind(target.id, self.let(target.id, value, span))
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            try:
                items = list(value)
            except TypeError:
                raise TileError(f"cannot unpack a {type(value).__name__} into "
                                f"{len(target.elts)} names", span) from None
            if len(items) != len(target.elts):
                raise TileError(f"cannot unpack {len(items)} values into {len(target.elts)} names",
                                span)
            for t, v in zip(target.elts, items):
                self.assign(t, v, node)
            return
        if isinstance(target, ast.Subscript):
            buffer = self.expr_raw(target.value)
            if not isinstance(buffer, Buffer):
                self.python_setitem(buffer, target, value)
                return
            with span_scope(span):
                dest = buffer[self.expr(target.slice)]
            if not isinstance(dest, BufferLoad):
                raise TileError(f"cannot assign to a slice of buffer {buffer.name}; use T.copy or "
                                "T.fill for tiles, or a T.Parallel loop", span)
            self.store(buffer, dest.indices, value, node)
            return
        raise TileError("unsupported assignment target", span)

    def python_setitem(self, container, target, value):
        container[self.expr(target.slice)] = value

    def let(self, name: str, value, span):
        """What `name = value` binds name to. A value read from global memory in a kernel's
        own statements (`b = TokenIndices[bx, 0]`) is read there, once, into a register, as
        TileLang binds it: a later read of the name is the value at that point, and the
        indices built from it stay small; any other value is its expression."""
        b = bld.maybe_active()
        if not isinstance(value, Expr) or b is None or b.kernel is None or b.loops or \
                not any(isinstance(n, BufferLoad) and n.buffer.scope == GLOBAL
                        for n in walk(value)):
            return value
        var = Buffer(name, (1,), value.dtype, LOCAL_VAR, span)
        b.emit(Allocate(var, span))
        b.emit(BufferStore(var, (ex.convert(0),), value, span))
        return BufferLoad(var, (ex.convert(0),), span)

    def store(self, buffer: Buffer, indices, value, node):
        b = bld.active(f"a store into {buffer.name}")
        if isinstance(value, (Buffer,)) or not (isinstance(value, Expr) or
                                               ex.is_python_number(value)):
            raise TileError(f"cannot store a {type(value).__name__} into buffer {buffer.name}; "
                            "a store takes a scalar value", self.span(node))
        value = ex.cast(ex.convert(value, buffer.dtype), buffer.dtype)
        b.emit(BufferStore(buffer, tuple(indices), value, self.span(node)))

    def stmt_If(self, node):
        cond = self.expr(node.test)
        if not isinstance(cond, Expr):
            self.body(node.body if cond else node.orelse)
            return
        b = bld.active("a device-side `if`")
        then_body = self.device_block(node.body, "the device-side `if`", node, AFTER_IF)
        else_body = None
        if node.orelse:
            else_body = self.device_block(node.orelse, "the `else` of the device-side `if`",
                                          node, AFTER_IF)
        b.emit(IfThenElse(ex.to_bool(cond), then_body, else_body, self.span(node)))

    def device_block(self, stmts, what: str, node, advice: str, variables=(), bindings=None):
        """Parse stmts into a block of their own, with bindings (a loop's names) bound in it:
        its variables and buffers go out of scope where it ends (scopes.py)."""
        b = bld.active(what)
        self.scope.open_block(what, self.span(node), advice)
        for name, value in (bindings or {}).items():
            self.scope.bind(name, value)
        b.open_block()
        try:
            self.body(stmts)
        finally:
            body = b.close_block()
            self.scope.close_block(variables, [s.buffer for s in stmts_of(body)
                                               if isinstance(s, Allocate)])
        return body

    def stmt_For(self, node):
        span = self.span(node)
        if node.orelse:
            raise TileError("`for ... else` is not supported in a prim_func", span)
        iterable = self.loop_iterable(node.iter)
        if not isinstance(iterable, LoopFrame):
            for item in iterable:  # a Python sequence: unroll at compile time
                self.assign(node.target, item, node)
                self.body(node.body)
            return
        names = self.target_names(node.target, span)
        b = bld.active(f"T.{iterable.kind} loop")
        value = iterable.bind(names)
        values = value if len(names) > 1 else (value,)
        b.loops.append(iterable)
        try:
            body = self.device_block(node.body, f"the {iterable.title} loop", node, AFTER_LOOP,
                                     iterable.vars, dict(zip(names, values)))
        finally:
            b.loops.pop()
        if iterable.kind == "pipelined":
            self.check_pipeline_annotations(iterable, body, span)
        b.emit(iterable.build(body))

    def loop_iterable(self, node):
        value = self.expr(node)
        if isinstance(value, range):
            return value
        if isinstance(value, LoopFrame):
            return value
        if isinstance(value, (list, tuple)):
            return value
        b = bld.maybe_active()
        if isinstance(value, ex.Var) and b is not None and b.kernel is not None and \
                b.kernel.is_index(value):
            return IndexLoop(value, self.span(node))
        raise TileError(f"cannot loop over a {type(value).__name__}; use T.Parallel, "
                        "T.Pipelined, T.serial, T.unroll, T.vectorized or range()",
                        self.span(node))

    def check_pipeline_annotations(self, frame: LoopFrame, body, span):
        n = len(stmts_of(body))
        for key in ("order", "stage"):
            given = frame.annotations.get(key)
            if given is not None and len(given) != n:
                raise TileError(f"T.Pipelined {key}= lists {len(given)} entries but the loop body "
                                f"has {n} statements", frame.span or span)

    def target_names(self, target, span) -> list[str]:
        if isinstance(target, ast.Name):
            return [target.id]
        if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(t, ast.Name)
                                                             for t in target.elts):
            return [t.id for t in target.elts]
        raise TileError("a loop variable must be a name or a tuple of names", span)

    def stmt_With(self, node):
        span = self.span(node)
        if len(node.items) != 1:
            raise TileError("a `with` statement in a prim_func takes exactly one frame", span)
        item = node.items[0]
        frame = self.expr(item.context_expr)
        if isinstance(frame, AttrFrame) and item.optional_vars is None:
            try:
                self.body(node.body)
            finally:
                frame.close()
            return
        if isinstance(frame, WarpGroupFrame) and item.optional_vars is None:
            b = bld.active("T.ws")
            body = self.device_block(node.body, "the T.ws region", node, AFTER_IF)
            b.emit(IfThenElse(frame.condition(), body, None, span))
            return
        if not isinstance(frame, KernelFrame):
            raise TileError(f"`with` takes T.Kernel(...) here, got {type(frame).__name__}", span)
        b = bld.active("T.Kernel", need_kernel=False)
        if b.kernel is not None:
            raise TileError("T.Kernel cannot be nested inside another T.Kernel", span)
        target = item.optional_vars
        names = self.target_names(target, span) if target else []
        value = frame.bind(names)
        values = (value,) if isinstance(target, ast.Name) or not isinstance(value, tuple) \
            else value
        if target is not None and len(values) != len(names):
            raise TileError(f"cannot unpack {len(values)} block indices into {len(names)} names",
                            self.span(target))
        b.kernel = frame
        frame.body_block = len(b.blocks)   # where device_block opens the kernel's statements
        try:
            body = self.device_block(node.body, "the T.Kernel", node, AFTER_KERNEL,
                                     frame.block_vars, dict(zip(names, values)))
        finally:
            b.kernel = None
        kernel = thread_range_regions(rewrite_reducers(frame.build(body)))
        check_thread_uses(kernel)
        check_parallel_accumulations(kernel)
        b.emit(kernel)

    def stmt_Assert(self, node):
        cond = self.expr(node.test)
        if isinstance(cond, Expr):
            cond = decide(cond)   # sizes compared with themselves (N == N) are known
            if cond is None:
                raise TileError("assert needs a compile-time condition; device values cannot "
                                "be asserted", self.span(node))
        if not cond:
            msg = self.expr(node.msg) if node.msg is not None else "assertion failed"
            raise TileError(str(msg), self.span(node))

    def stmt_Return(self, node):
        b = bld.maybe_active()
        if b is not None and b.eager is not None and self is b.root and \
                not b.outside_device_code:
            raise TileError("the `return` of an eager @tilecraft.jit function comes after its "
                            "T.Kernel blocks, in the function's own body", self.span(node))
        raise _Return(self.expr(node.value) if node.value is not None else None,
                      self.span(node))

    def stmt_While(self, node):
        raise TileError("`while` loops are not supported in a prim_func; use T.serial with a "
                        "bound and an `if`", self.span(node))

    def stmt_Break(self, node):
        raise TileError("`break` is not supported in a prim_func", self.span(node))

    def stmt_Continue(self, node):
        raise TileError("`continue` is not supported in a prim_func", self.span(node))

def parse_prim_func(func, param_values: dict, eager=None):
    """Evaluate func's body with its parameters bound; returns the body statement and the
    builder (its func_attrs, and the eager trace when the body is an eager @jit function's)."""
    parser = Parser(func)
    parser.scope.env.update(param_values)
    builder = bld.Builder(parser, eager)
    if eager is not None:
        eager.enter(parser.scope)
    with bld.activate(builder):
        try:
            parser.body(parser.source.func_node.body)
        except _Return as r:
            if eager is None:
                raise TileError("a prim_func returns nothing; write results into its "
                                "parameters", r.span) from None
            eager.returned(r.value, r.span)
        if eager is not None:
            eager.finish()
    body = builder.close_block(parser.source.span(parser.source.func_node))
    for s in stmts_of(body):
        if not isinstance(s, (Kernel, Allocate)):
            raise TileError("device code must be inside a `with T.Kernel(...)` block",
                            getattr(s, "span", None))
    body = remap_accesses(body, builder.views, builder.iteration_scalars)
    check_access_bounds(body)
    return body, builder


def inline_macro(func, args, kwargs, source_cache: dict):
    """Run a T.macro's body at the call site, in the caller's builder."""
    b = bld.active(f"macro {func.__name__}", need_kernel=False)
    source = source_cache.get(func) or Source.of(func)
    source_cache[func] = source
    parser = Parser(func, source)
    signature = inspect.signature(func)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TileError(f"macro {func.__name__}: {e}; it takes ({', '.join(signature.parameters)})"
                        ) from None
    bound.apply_defaults()
    for name, value in bound.arguments.items():
        _check_macro_argument(func, name, signature.parameters[name].annotation, value)
    parser.scope.env.update(bound.arguments)
    saved = b.parser
    b.parser = parser
    try:
        parser.body(source.func_node.body)
    except _Return as r:
        return r.value
    finally:
        b.parser = saved
    return None


def _check_macro_argument(func, name: str, annotation, value):
    """A macro parameter annotated T.SharedBuffer / T.FragmentBuffer / T.LocalBuffer (or
    T.Tensor) takes a buffer of that memory, dtype and shape."""
    spec = annotation if hasattr(annotation, "make") and hasattr(annotation, "scope") else None
    if spec is None:
        return
    what = f"macro {func.__name__}: parameter {name}"
    if not isinstance(value, Buffer):
        raise TileError(f"{what} is annotated as a {spec.scope} buffer, but gets "
                        f"{type(value).__name__}", current_span())
    if not (value.scope == spec.scope or is_shared(value.scope) and is_shared(spec.scope)):
        raise TileError(f"{what} is annotated as a {spec.scope} buffer, but {value.name} is "
                        f"{value.scope}", current_span())
    if value.dtype is not spec.dtype:
        raise TileError(f"{what} is annotated with dtype {spec.dtype}, but {value.name} holds "
                        f"{value.dtype}", current_span())
    known = [(constant_value(ex.convert(a)), constant_value(ex.convert(b)))
             for a, b in zip(value.shape, spec.shape)]
    if len(value.shape) != len(spec.shape) or any(
            a is not None and b is not None and a != b for a, b in known):
        raise TileError(f"{what} is annotated with shape {tuple(spec.shape)}, but {value.name} "
                        f"has shape {tuple(value.shape)}", current_span())
