"""The state of the prim_func being built: open statement lists and enclosing frames.

T.* builtins append their IR here. There is one active builder while a prim_func body is
evaluated; outside of one, a builtin is a clear error rather than a silent no-op.
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..ir.stmt import seq

_active: list = []
# What a builtin that emitted its statements itself returns (T.evaluate of it does nothing).
EMITTED = object()


class Builder:
    def __init__(self, parser, eager=None):
        self.parser = parser
        self.root = parser  # the parser of the function body (parser is a macro's while inlined)
        self.blocks: list[list] = [[]]
        self.kernel = None  # the KernelFrame being built, if any
        self.loops: list = []  # enclosing loop frames, innermost last
        self.reduce_scope = None  # the reducer T.attr gives T.tvm_thread_allreduce
        # The trace of an eager @jit body (language/eager_trace.py), None in a @T.prim_func.
        self.eager = eager
        self.func_attrs: dict = {}  # what T.annotate_pass_configs / _compile_flags attach
        self.views: dict = {}       # view buffer -> the buffer it views (T.reshape, T.view)
        # T.alloc_var inside T.Parallel -> (the loop variables, their extents)
        self.iteration_scalars: dict = {}

    @property
    def outside_device_code(self) -> bool:
        """Outside every T.Kernel (and so every device block): host-side statements."""
        return self.kernel is None and len(self.blocks) == 1

    def emit(self, stmt):
        self.blocks[-1].append(stmt)

    def open_block(self):
        self.blocks.append([])

    def close_block(self, span=None):
        return seq(self.blocks.pop(), span)

    def inside(self, kind: str) -> bool:
        """Whether a loop of this kind ("parallel", "pipelined", ...) encloses the point
        being built."""
        return any(getattr(f, "kind", None) == kind for f in self.loops)

    @property
    def in_parallel(self) -> bool:
        return self.inside("parallel")


def active(what: str, need_kernel: bool = True) -> Builder:
    """The active builder, or a TileError saying where `what` may be called."""
    if not _active:
        raise TileError(f"{what} can only be used inside a @T.prim_func"
                        + (" within a `with T.Kernel(...)` block" if need_kernel else ""),
                        current_span())
    b = _active[-1]
    if need_kernel and b.kernel is None:
        raise TileError(f"{what} must be called inside a `with T.Kernel(...)` block",
                        current_span())
    return b


def maybe_active() -> Builder | None:
    return _active[-1] if _active else None


class activate:
    def __init__(self, builder: Builder):
        self.builder = builder

    def __enter__(self):
        _active.append(self.builder)
        return self.builder

    def __exit__(self, *exc):
        _active.pop()
        return False


def emit(stmt, what: str, allow_in_parallel: bool = False):
    """Append a tile-level statement made by builtin `what` to the open block."""
    b = active(what)
    if b.in_parallel and not allow_in_parallel:
        raise TileError(f"{what} is a tile operation and cannot be used inside T.Parallel; "
                        "T.Parallel bodies hold element-wise statements", current_span())
    b.emit(stmt)
    return stmt
