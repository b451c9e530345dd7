"""Which values of a kernel differ between the threads of its block.

Tile-level code runs once for the block: a statement outside T.Parallel computes one value
for all threads. A kernel that reads its thread index (T.get_thread_binding, T.get_lane_idx)
or shuffles values between lanes writes code for one thread instead, and every statement whose
values depend on which thread runs it must run on every thread, each with its own values:

- an expression varies when it reads a thread index, shuffles (T.shfl_*, T.warp_reduce_*), or
  loads a varying local buffer;
- a local buffer (T.alloc_local, T.alloc_var: one copy per thread) varies when some statement
  writes it with a varying value or index, or under a varying condition or loop bound
  (`if tx == 0: flag = 1` leaves the flags of the other threads as they were);
- a loop variable varies when its loop's start does (`for i in T.serial(tx, n)`);
- a statement is divergent when an enclosing `if` has a varying condition or an enclosing loop
  a varying bound: only some threads, or some threads more often, run it.

Shared and global memory are one for the block: a load from them varies only through its
indices. The interpreter gives varying locals one copy per thread, and runs what varies
per thread; the CUDA lowering runs it on every thread rather than on one.
"""
from __future__ import annotations

from .buffer import FRAGMENT, LOCAL, LOCAL_VAR, BufferRegion
from .expr import BufferLoad, Call, Expr, Var
from .stmt import BufferStore, Evaluate, For, IfThenElse, Kernel, SeqStmt
from .tileop import TileOp
from .visitor import walk

# Calls whose value is the calling lane's own (it depends on the other lanes of the warp).
LANE_CALLS = ("shfl_xor", "shfl_down", "shfl_up", "shfl_sync", "warp_reduce_sum",
              "warp_reduce_max", "warp_reduce_min")


def is_local(buffer) -> bool:
    """One copy of the buffer per thread."""
    return buffer.scope in (LOCAL, LOCAL_VAR)


def thread_indices(kernel, flat) -> dict:
    """id(variable) -> value of each thread index the program reads (threadIdx.x, .y, .z),
    for the flat thread index `flat` = x + blockDim.x * (y + blockDim.y * z): a number, a
    numpy array of them, or an expression."""
    out, stride = {}, 1
    for var, extent in zip(kernel.thread_bindings, kernel.threads):
        if var is not None:
            e = flat if stride == 1 else flat // stride
            out[id(var)] = e % extent if stride * extent < kernel.num_threads else e
        stride *= extent
    return out


def is_per_thread_op(op) -> bool:
    """T.copy / T.fill with a local side (and no fragment side): TileLang runs these on every
    thread, each thread doing all of it on its own copy."""
    from .tileop import Copy, Fill
    if isinstance(op, Fill):
        return is_local(op.dst.buffer)
    if isinstance(op, Copy):
        sides = (op.src.buffer, op.dst.buffer)
        return any(is_local(b) for b in sides) and all(b.scope != FRAGMENT for b in sides)
    return False


def region_exprs(op) -> list:
    """The index and value expressions of a tile op (its regions' bounds, a fill value)."""
    out = []
    for name in op.__dataclass_fields__:
        v = getattr(op, name)
        if isinstance(v, BufferRegion):
            out.extend(x for r in v.ranges for x in r)
        elif isinstance(v, Expr):
            out.append(v)
    return out


class ThreadVarying:
    """The varying locals of one kernel (found once, to a fixpoint) and the questions the
    frontend's checks, the interpreter and the lowering ask about its statements."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.indices = {id(v) for v in kernel.thread_bindings if v is not None}
        self.buffers: set = set()       # ids of the varying local buffers
        self.per_thread = bool(self.indices) or any(
            isinstance(n, Call) and n.name in LANE_CALLS for n in walk(kernel.body))
        if self.per_thread:
            while self._scan(kernel.body, False):
                pass

    # --- questions ---------------------------------------------------------------------
    def expr(self, e) -> bool:
        """e's value may differ between threads."""
        if not self.per_thread or not isinstance(e, Expr):
            return False
        for n in walk(e):
            if isinstance(n, Var) and id(n) in self.indices:
                return True
            if isinstance(n, BufferLoad) and id(n.buffer) in self.buffers:
                return True
            if isinstance(n, Call) and n.name in LANE_CALLS:
                return True
        return False

    def condition(self, s) -> bool:
        """s is an `if` or a loop whose condition or bounds differ between threads."""
        if isinstance(s, IfThenElse):
            return self.expr(s.cond)
        if isinstance(s, For):
            return self.expr(s.start) or self.expr(s.extent)
        return False

    def statement(self, s) -> bool:
        """A store, call or tile op whose own values (indices, stored value, region bounds)
        differ between threads, or that writes a varying local."""
        if isinstance(s, BufferStore):
            return id(s.buffer) in self.buffers or self.expr(s.value) or \
                any(self.expr(i) for i in s.indices)
        if isinstance(s, TileOp):
            return any(id(b) in self.buffers for b in list(s.reads()) + list(s.writes())) or \
                any(self.expr(x) for x in region_exprs(s))
        return self.expr(getattr(s, "value", None))

    def varying_buffer(self, buffer) -> bool:
        return id(buffer) in self.buffers

    # --- the fixpoint ------------------------------------------------------------------
    def _scan(self, s, divergent: bool) -> bool:
        """One pass over s; True when it found another varying local."""
        if isinstance(s, SeqStmt):
            changed = False
            for x in s.stmts:
                changed |= self._scan(x, divergent)
            return changed
        if isinstance(s, (IfThenElse, For)):
            inner = divergent or self.condition(s)
            changed = False
            if isinstance(s, For) and id(s.var) not in self.indices and self.expr(s.start):
                self.indices.add(id(s.var))   # `for i in T.serial(tx, n)`: i is per thread
                changed = True
            for body in (s.then_body, s.else_body) if isinstance(s, IfThenElse) else (s.body,):
                if body is not None:
                    changed |= self._scan(body, inner)
            return changed
        if isinstance(s, BufferStore):
            writes = [s.buffer]
            varying = divergent or self.expr(s.value) or any(self.expr(i) for i in s.indices)
        elif isinstance(s, TileOp):
            writes = list(s.writes())
            varying = divergent or any(self.expr(x) for x in region_exprs(s)) or any(
                id(b) in self.buffers for b in s.reads())
        elif isinstance(s, Evaluate) and any(isinstance(n, Call) and n.name == "call_extern"
                                             for n in walk(s.value)):
            # An external function may write wherever it gets a pointer to: a local whose
            # address it takes holds what it wrote, which another thread's call may differ in.
            writes = [n.args[0].buffer for n in walk(s.value)
                      if isinstance(n, Call) and n.name == "address_of"]
            varying = True
        else:
            return False
        changed = False
        for b in writes:
            if varying and is_local(b) and id(b) not in self.buffers:
                self.buffers.add(id(b))
                changed = True
        return changed
