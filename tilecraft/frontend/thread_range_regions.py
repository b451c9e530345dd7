"""Role branches on the thread index, as TileLang's hand-specialized kernels write them:

    tx = T.get_thread_binding()
    if tx < 128:                  # warpgroup 0: consumer
        T.fill(acc, 0); T.gemm(...); ...
    elif tx < 256:                # warpgroup 1
        ...
    else:                         # warpgroup 2: producer
        ...

A tile op or a T.Parallel nest is the work of all the threads running it. Under an `if` whose
condition on the thread index selects whole warpgroups (128 threads), the threads running it
are those warpgroups: the branch is a `T.ws(g)` region of them (language/warp_specialize.py),
its tile ops laid out over their threads, and the `elif` / `else` arms are regions of the
warpgroups left. The chain stays one statement, so that no block barrier comes between its
arms (they run at the same time and wait for each other on mbarriers).

Only an `if` chain that holds such block-wide work is rewritten; per-thread code under a thread
condition stays as it is. A chain one of whose arms splits a warpgroup (`tx < 32`) stays as it
is too, and frontend/thread_checks.py refuses the block-wide work under it, naming it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import dtypes as dt
from ..ir.annotations import WARPGROUP_THREADS, WS_REGION
from ..ir.buffer import FRAGMENT
from ..ir.expr import BufferLoad, Call, Expr, Var, const
from ..ir.stmt import BufferStore, For, IfThenElse, Kernel, SeqStmt
from ..ir.thread_varying import is_per_thread_op
from ..ir.tileop import TileOp
from ..ir.visitor import Mutator, walk
from ..layout.layout import evaluate
from .thread_checks import is_scalar_atomic


def thread_range_regions(kernel: Kernel) -> Kernel:
    """kernel with its role branches on the thread index made T.ws regions."""
    tx = _flat_thread_index(kernel)
    if tx is None:
        return kernel
    rewriter = _Rewriter(tx, kernel.num_threads)
    return dataclasses.replace(kernel, body=rewriter.visit(kernel.body))


def _flat_thread_index(kernel: Kernel) -> Var | None:
    """threadIdx.x where it is the block's only thread dimension and the program reads it."""
    bindings = kernel.thread_bindings
    if not bindings or bindings[0] is None or any(t != 1 for t in kernel.threads[1:]):
        return None
    return bindings[0]


def _block_wide(s) -> bool:
    """s holds work shared out over the threads running it: a tile op other than the
    per-thread ones, a T.Parallel nest, or a fragment element."""
    for n in walk(s):
        if isinstance(n, For) and n.kind == "parallel":
            return True
        if isinstance(n, TileOp) and not is_per_thread_op(n) and not is_scalar_atomic(n):
            return True
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope == FRAGMENT:
            return True
    return False


class _Rewriter(Mutator):
    def __init__(self, tx: Var, threads: int):
        self.tx, self.threads = tx, threads

    def visit_For(self, s: For):
        return s if s.kind == "parallel" else self.generic_visit(s)

    def visit_IfThenElse(self, s: IfThenElse):
        if self.selects_threads(s.cond) and _block_wide(s):
            try:
                return self.chain(s, np.ones(self.threads, bool))
            except _SplitsWarpgroup:
                return s    # frontend/thread_checks.py names what cannot run under it
        return s if _is_region(s) else self.generic_visit(s)

    def selects_threads(self, cond) -> bool:
        """cond depends on the thread index and on nothing else that varies."""
        if not isinstance(cond, Expr):
            return False
        names = [n for n in walk(cond) if isinstance(n, (Var, BufferLoad, Call))]
        return any(n is self.tx for n in names) and all(n is self.tx for n in names)

    def chain(self, s: IfThenElse, left: np.ndarray):
        """The if / elif / else chain s as regions, `left` the threads reaching it."""
        taken = left & self.mask(s.cond)
        groups = self.groups(taken)
        rest = left & ~taken
        else_body = s.else_body
        if isinstance(else_body, IfThenElse) and self.selects_threads(else_body.cond):
            else_region = self.chain(else_body, rest)
        elif else_body is not None and rest.any():
            else_region = _region(self.groups(rest), else_body, None, s)
        else:
            else_region = None
        if not groups:
            return else_region if else_region is not None else SeqStmt((), s.span)
        return _region(groups, s.then_body, else_region, s)

    def mask(self, cond) -> np.ndarray:
        value, = evaluate([cond], {self.tx: np.arange(self.threads)}, (self.threads,))
        return value.astype(bool)

    def groups(self, mask: np.ndarray) -> tuple:
        """The warpgroups mask selects, which must be whole ones."""
        if self.threads % WARPGROUP_THREADS:
            raise _SplitsWarpgroup
        rows = mask.reshape(-1, WARPGROUP_THREADS)
        if (rows.any(axis=1) != rows.all(axis=1)).any():
            raise _SplitsWarpgroup
        return tuple(int(g) for g in np.nonzero(rows.all(axis=1))[0])


class _SplitsWarpgroup(Exception):
    """An arm of the chain selects part of a warpgroup."""


def _is_region(s) -> bool:
    return isinstance(s.cond, Call) and s.cond.name == WS_REGION


def _region(groups, body, else_region, s: IfThenElse) -> IfThenElse:
    cond = Call(WS_REGION, tuple(const(g) for g in groups), dt.boolean, s.span)
    return IfThenElse(cond, body, else_region, s.span)
