"""Statements of the tile IR: structured control flow, stores, allocations, launches."""
from __future__ import annotations

from dataclasses import dataclass, field

from .buffer import Buffer
from .expr import Expr, Var
from ..errors import Span


class Stmt:
    span: Span | None

    def __repr__(self) -> str:
        from .printer import stmt_text
        return stmt_text(self)


@dataclass(eq=False, repr=False)
class SeqStmt(Stmt):
    stmts: tuple
    span: Span | None = field(default=None, compare=False)


def seq(stmts, span=None) -> Stmt:
    """A statement list, flattened; a single statement stays itself."""
    flat = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat), span)


def stmts_of(s: Stmt) -> tuple:
    return s.stmts if isinstance(s, SeqStmt) else (s,)


def flat_stmts(s: Stmt) -> list:
    """The statements of s, with nested statement lists spliced in."""
    return [x for y in stmts_of(s) for x in (flat_stmts(y) if isinstance(y, SeqStmt) else [y])]


LOOP_KINDS = ("serial", "parallel", "pipelined", "unroll", "vectorized")

# Annotation of a serial loop over the tiles of its kernel's grid (`var` in [0, tiles)) in a
# persistent kernel: each block runs the iterations var = blockIdx.x, blockIdx.x + gridDim.x,
# ..., with the kernel's block variables bound to the coordinates of tile `var` (after
# T.use_swizzle's rasterization). Everywhere else it is an ordinary loop.
PERSISTENT_TILES = "persistent_tiles"


@dataclass(eq=False, repr=False)
class For(Stmt):
    """`for var in [start, start + extent)`; kind says how the compiler may run it.

    parallel: element-wise over a tile (T.Parallel), mapped onto the block's threads.
    pipelined: a serial loop whose copies the compiler overlaps with compute
    (annotations num_stages, order, stage).
    """
    var: Var
    start: Expr
    extent: Expr
    kind: str
    body: Stmt
    annotations: dict = field(default_factory=dict)
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then_body: Stmt
    else_body: Stmt | None = None
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class BufferStore(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Evaluate(Stmt):
    """An expression run for its effect (T.call_extern, ...)."""
    value: Expr
    span: Span | None = field(default=None, compare=False)


def call_stmt(name: str, *args, span=None) -> Evaluate:
    """A statement calling header function `name` (e.g. "tc::cp_async_commit") for its effect."""
    from . import dtypes
    from .expr import Call
    return Evaluate(Call(name, tuple(args), dtypes.handle), span)


def called(s) -> str | None:
    """The header function a statement calls for its effect (call_stmt's inverse), else None."""
    from .expr import Call
    if isinstance(s, Evaluate) and isinstance(s.value, Call):
        return s.value.name
    return None


@dataclass(eq=False, repr=False)
class Allocate(Stmt):
    """Brings a kernel-local buffer into existence; it lives until the end of its kernel."""
    buffer: Buffer
    span: Span | None = field(default=None, compare=False)


@dataclass(eq=False, repr=False)
class Kernel(Stmt):
    """One launch: a grid of blocks (1-3 dims), each of `threads` threads, running body."""
    grid: tuple  # extents (Expr)
    block_vars: tuple  # Var per grid dim
    threads: tuple  # ints, blockDim x[, y[, z]]
    body: Stmt
    span: Span | None = field(default=None, compare=False)
    thread_var: Var | None = None  # the flat thread index, once lowered to thread level
    attrs: dict = field(default_factory=dict)
    # The variables T.get_thread_binding gives the program (threadIdx.x, .y, .z: a Var, or
    # None for a dimension it never reads); lowering replaces them by terms of thread_var.
    thread_bindings: tuple = ()

    @property
    def num_threads(self) -> int:
        n = 1
        for t in self.threads:
            n *= t
        return n


@dataclass(eq=False)
class PrimFunc:
    """A kernel program: parameters (global buffers and scalars) and a body of launches."""
    name: str
    params: tuple  # Buffer (global) or Var (scalar)
    body: Stmt
    span: Span | None = field(default=None, compare=False)
    attrs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        from .printer import func_text
        return func_text(self)

    def script(self) -> str:
        from .printer import func_text
        return func_text(self)

    @property
    def buffer_params(self) -> tuple:
        return tuple(p for p in self.params if isinstance(p, Buffer))

    def kernels(self) -> list:
        """The launches, in order. Kernels do not nest, so their bodies (nearly all of the
        tree) are not searched."""
        from .visitor import children
        found, stack = [], [self.body]
        while stack:
            n = stack.pop()
            if isinstance(n, Kernel):
                found.append(n)
            elif isinstance(n, Stmt):
                stack.extend(reversed([c for c in children(n) if isinstance(c, Stmt)]))
        return found
