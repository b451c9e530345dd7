"""Per-thread code (a kernel that reads its thread index or shuffles) meeting block-wide
constructs, checked when the kernel has been parsed.

A tile op and a T.Parallel nest are the whole block's work, shared out over its threads by the
compiler; they cannot run under an `if` or loop that only some threads take, nor take values
that differ between threads (ir/thread_varying.py). The exceptions are the ops TileLang runs on
every thread, each on its own copy: T.copy and T.fill with a T.alloc_local / T.alloc_var side.
A scalar atomic (`T.atomic_add(C_shared[tn], acc[0])`) is one instruction: every thread that
reaches it runs it where its values differ between threads or only some threads reach it
(once for the block otherwise). A fragment element belongs to the thread that holds it, so it
cannot be written with a value that differs between threads either.
"""
from __future__ import annotations

from ..errors import TileError
from ..ir.buffer import FRAGMENT, LOCAL, BufferRegion
from ..ir.printer import expr_text
from ..ir.stmt import BufferStore, Evaluate, For, IfThenElse, Kernel, SeqStmt
from ..ir.expr import BufferLoad
from ..ir.thread_varying import ThreadVarying, is_per_thread_op, region_exprs
from ..ir.tileop import Atomic, TileOp
from ..ir.visitor import walk
from ..passes.parallel_nests import fragments_of


def check_thread_uses(kernel: Kernel):
    tv = ThreadVarying(kernel)
    if tv.per_thread:
        if _keep_per_thread(kernel, tv):
            tv = ThreadVarying(kernel)
        _Checker(tv).stmt(kernel.body, None)


def _keep_per_thread(kernel: Kernel, tv: ThreadVarying) -> bool:
    """A fragment that no T.Parallel nest or block-wide tile op touches, written by per-thread
    code with values that differ between threads (`prefetch[r] = Indices[..., tx // 8]` in a
    producer's branch), is per-thread storage: it becomes a T.alloc_local, each thread holding
    its own copy, as it would otherwise have to be refused. True when one did."""
    shared_out = {id(b) for n in walk(kernel.body)
                  if (isinstance(n, For) and n.kind == "parallel") or
                  (isinstance(n, TileOp) and not is_per_thread_op(n))
                  for b in fragments_of(n)}
    per_thread = {}

    def visit(s, divergent):
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                visit(x, divergent)
        elif isinstance(s, (IfThenElse, For)) and not (isinstance(s, For) and
                                                       s.kind == "parallel"):
            inner = divergent or tv.condition(s)
            for body in (s.then_body, s.else_body) if isinstance(s, IfThenElse) else (s.body,):
                if body is not None:
                    visit(body, inner)
        elif isinstance(s, BufferStore) and s.buffer.scope == FRAGMENT and \
                id(s.buffer) not in shared_out and tv.statement(s):
            per_thread[id(s.buffer)] = s.buffer

    # (A fragment only written under a thread condition with a value every thread shares,
    # `if tx == 0: f[0] = 1.0`, reads as meant for all: it stays refused.)
    visit(kernel.body, False)
    for b in per_thread.values():
        b.scope = LOCAL
    return bool(per_thread)


class _Checker:
    def __init__(self, tv: ThreadVarying):
        self.tv = tv

    def stmt(self, s, guard):
        """guard: the innermost `if` / loop whose condition differs between threads, if any."""
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x, guard)
        elif isinstance(s, For) and s.kind == "parallel":
            self.parallel(s, guard)
        elif isinstance(s, (IfThenElse, For)):
            self.fragment_reads([s.cond] if isinstance(s, IfThenElse) else [s.start, s.extent],
                                guard)
            inner = s if self.tv.condition(s) else guard
            for body in (s.then_body, s.else_body) if isinstance(s, IfThenElse) else (s.body,):
                if body is not None:
                    self.stmt(body, inner)
        elif isinstance(s, TileOp):
            self.fragment_reads(region_exprs(s), guard)
            self.tile_op(s, guard)
        elif isinstance(s, BufferStore):
            self.fragment_reads([s.value, *s.indices], guard)
            if s.buffer.scope == FRAGMENT and (guard is not None or self.tv.statement(s)):
                raise TileError(f"fragment {s.buffer.name} is written "
                                f"{_why(self.tv, s, guard)}; its elements belong to the "
                                "threads its layout gives them to, so store per-thread values "
                                "into a T.alloc_local or shared tile instead", s.span)
        elif isinstance(s, Evaluate):
            self.fragment_reads([s.value], guard)

    def fragment_reads(self, exprs, guard):
        """A fragment element read outside T.Parallel is sent to every thread from the one
        holding it, between two block barriers: every thread must take part, each wanting
        the same element."""
        for e in exprs:
            for n in walk(e):
                if isinstance(n, BufferLoad) and n.buffer.scope == FRAGMENT and \
                        (guard is not None or any(self.tv.expr(i) for i in n.indices)):
                    where = _under(guard) if guard is not None else \
                        "at an index that differs between threads"
                    raise TileError(
                        f"fragment {n.buffer.name} is read one element at a time {where}"
                        "; such a read is handed to all threads through shared memory between "
                        "block barriers, which every thread must reach: copy the fragment to a "
                        "shared tile (T.copy) and read that instead", n.span)

    def parallel(self, s: For, guard):
        if guard is not None:
            raise TileError(f"T.Parallel runs {_under(guard)}; it spreads its iterations over "
                            "all the block's threads, so every thread must reach it (move it "
                            "out of the `if`, or write a per-thread loop with T.serial)",
                            s.span)
        for n in walk(s.body):
            parts = [n.cond] if isinstance(n, IfThenElse) else \
                [n.value, *n.indices] if isinstance(n, BufferStore) else []
            for e in parts:
                if self.tv.expr(e):
                    raise TileError(
                        f"T.Parallel uses `{expr_text(e)}`, which differs between threads (it "
                        "reads the thread index, a shuffle or a per-thread local written with "
                        "one); T.Parallel assigns its iterations to threads itself, so index "
                        "with its loop variables, or write a per-thread loop with T.serial",
                        n.span or s.span)

    def tile_op(self, op, guard):
        if is_per_thread_op(op) or is_scalar_atomic(op):
            return
        if guard is not None or self.tv.statement(op):
            raise TileError(f"T.{op.op_name} is a block-wide operation (the compiler shares "
                            f"it out over all the threads) and cannot run "
                            f"{_why(self.tv, op, guard)}; only T.copy and T.fill with a "
                            "T.alloc_local / T.alloc_var side run per thread", op.span)


def is_scalar_atomic(op) -> bool:
    return isinstance(op, Atomic) and not isinstance(op.value, BufferRegion)


def _under(guard) -> str:
    if isinstance(guard, IfThenElse):
        return (f"under `if {expr_text(guard.cond)}`, which differs between threads (an `if` "
                "on the thread index whose arms select whole warpgroups of 128 threads, "
                "tx < 128, 128 <= tx < 256, ..., runs its tile operators on them)")
    return (f"in a loop whose bounds differ between threads ({expr_text(guard.start)} to "
            f"{expr_text(guard.start + guard.extent)})")


def _why(tv, s, guard) -> str:
    if guard is not None:
        return _under(guard)
    return "with values that differ between threads (the thread index, a shuffle, or a " \
           "per-thread local written with one)"
