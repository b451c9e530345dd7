"""prefetch_loop_scalars: a pipelined loop reads the next iteration's scalars from global
memory one iteration ahead.

A loop body that reads a read-only tensor at an index that follows the loop counter (the key
tile a block-sparse query tile visits next, KVIndices[b, h, m, n]; a page of a paged KV cache)
waits one global-memory latency for it in every iteration: the pipeline's own waits (an
mbarrier, cp.async.wait_group) are volatile asm that the compiler may not move loads across,
so nvcc cannot start the load early by itself, and the value is needed before the iteration's
tensor-core work can start. In the steady-state loop of a software pipeline or of a
warp-specialized consumer, each such expression is therefore loaded for iteration n + 1 at the
top of iteration n into a register, and iteration n reads the register loaded the iteration
before; the first is loaded before the loop. A loop bound that reads such a tensor (KVNum[b, h,
m]) is read once before the loop instead of at every test of the loop condition.

What moves: a largest subexpression of the body that depends only on the loop counter and on
values fixed for the whole loop, reads at least one global tensor the kernel never writes (no
store, no address taken, no TMA tensor map), reads no other memory, calls nothing, and is
evaluated in every iteration (not under an if, a select's branch or the right operand of a
logical and / or, unless the select or the logic moves whole). It is loaded for n + 1 only when
n + 1 is still an iteration, so no read happens that the program would not make.
"""
from __future__ import annotations

import dataclasses

from ....ir.annotations import SOFTWARE_PIPELINED, WARP_SPECIALIZED
from ....ir.buffer import GLOBAL, LOCAL, Buffer
from ....ir.expr import (Binary, BufferLoad, Call, Cast, Const, Select, Unary, Var, binary, compare,
                         const)
from ....ir.linear import constant_value, structural_key
from ....ir.stmt import Allocate, BufferStore, For, IfThenElse, Kernel, seq
from ....ir.visitor import Mutator, map_kernels, substitute, walk
from .every_iteration import visit_body
from ..tileops.tma import TensorMapVar

_PURE = (Binary, Unary, Select, Cast, Const, Var, BufferLoad)


def _written_globals(kernel: Kernel) -> set:
    """ids of the global buffers the kernel may write: stored, address taken, or TMA-mapped."""
    out = set()
    for n in walk(kernel.body):
        if isinstance(n, BufferStore):
            out.add(id(n.buffer))
        elif isinstance(n, Call) and n.name == "address_of":
            out.update(id(a.buffer) for a in n.args if isinstance(a, BufferLoad))
        elif isinstance(n, TensorMapVar) and n.buffer is not None:
            out.add(id(n.buffer))
    return out


class _Finder:
    """The movable subexpressions of one loop body, keyed by structure."""

    def __init__(self, loop: For, readonly):
        self.n = loop.var
        self.readonly = readonly
        self.inner = {id(x.var) for x in walk(loop.body) if isinstance(x, For)}
        self.found = {}   # structural key -> expression

    def movable(self, e) -> bool:
        nodes = list(walk(e))
        if not all(isinstance(x, _PURE) for x in nodes):
            return False
        loads = [x for x in nodes if isinstance(x, BufferLoad)]
        if not loads or not all(x.buffer.scope == GLOBAL and self.readonly(x.buffer)
                                for x in loads):
            return False
        used = [x for x in nodes if isinstance(x, Var)]
        return (any(v is self.n for v in used)
                and not any(id(v) in self.inner for v in used))

    def take(self, e) -> bool:
        if self.movable(e):
            self.found.setdefault(structural_key(e), e)
            return True
        return False

    def stmt(self, s):
        visit_body(s, self.take)


class _Replace(Mutator):
    def __init__(self, table: dict):
        self.table = table   # structural key -> replacement

    def visit(self, node):
        if isinstance(node, (Binary, Unary, Select, Cast, BufferLoad)):
            hit = self.table.get(structural_key(node))
            if hit is not None:
                return hit
        return super().visit(node)


def _register(name: str, dtype) -> Buffer:
    return Buffer(name, (1,), dtype, LOCAL)


class _Loops(Mutator):
    def __init__(self, readonly):
        self.readonly = readonly
        self.counter = 0

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        if s.kind != "serial" or not ({WARP_SPECIALIZED, SOFTWARE_PIPELINED} & s.annotations.keys()):
            return s
        before = []
        extent = s.extent
        finder = _Finder(s, self.readonly)
        if constant_value(extent) is None and any(
                isinstance(x, BufferLoad) for x in walk(extent)) and all(
                isinstance(x, _PURE) and (not isinstance(x, BufferLoad) or (
                    x.buffer.scope == GLOBAL and self.readonly(x.buffer)))
                for x in walk(extent)):
            bound = self._fresh("tc_trips", extent.dtype)
            before += [Allocate(bound, s.span), BufferStore(bound, (const(0),), extent, s.span)]
            extent = BufferLoad(bound, (const(0),))
        finder.stmt(s.body)
        if not finder.found and extent is s.extent:
            return s
        n = s.var
        first, last = s.start, binary("+", s.start, extent)
        ahead, table, top = [], {}, []
        for key, e in finder.found.items():
            nxt, cur = self._fresh("tc_next", e.dtype), self._fresh("tc_now", e.dtype)
            ahead.append((nxt, cur, e))
            table[key] = BufferLoad(cur, (const(0),))
            before += [Allocate(nxt, s.span), Allocate(cur, s.span),
                       IfThenElse(compare("<", first, last),
                                  BufferStore(nxt, (const(0),), substitute(e, {id(n): first}),
                                              s.span), None, s.span)]
        for nxt, cur, e in ahead:
            top.append(BufferStore(cur, (const(0),), BufferLoad(nxt, (const(0),)), s.span))
        following = binary("+", n, const(1, n.dtype))
        loads = [BufferStore(nxt, (const(0),), substitute(e, {id(n): following}), s.span)
                 for nxt, _, e in ahead]
        if loads:
            top.append(IfThenElse(compare("<", following, last), seq(loads, s.span), None,
                                  s.span))
        body = _Replace(table).visit(s.body) if table else s.body
        loop = dataclasses.replace(s, extent=extent, body=seq(top + [body], s.span))
        return seq(before + [loop], s.span)

    def _fresh(self, name: str, dtype) -> Buffer:
        self.counter += 1
        return _register(f"{name}_{self.counter}", dtype)


def _kernel(kernel: Kernel) -> Kernel:
    written = _written_globals(kernel)
    loops = _Loops(lambda b: id(b) not in written)
    body = loops.visit(kernel.body)
    return kernel if body is kernel.body else dataclasses.replace(kernel, body=body)


def prefetch_loop_scalars(func):
    """func with the read-only global scalars of its pipelined loops loaded one iteration
    ahead."""
    return map_kernels(func, _kernel)
