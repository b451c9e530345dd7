"""pipeline_loops: software-pipeline T.Pipelined loops with cp.async (paper section 4.3).

For a loop `for k in T.Pipelined(n, num_stages=S)` (S >= 2) the statements that copy tiles
from global into shared memory are the producers (stage 0); everything else is the consumer
(stage S - 1), unless the user gave stage=/order=. Each shared tile a producer writes gets S
versions (a leading dimension), and the loop becomes

    prologue:  for s in [0, S-1): if s < n: produce(s) into version s;  commit
    body k:    wait until at most S - 2 groups are in flight  (iteration k's copies landed)
               barrier
               if k + S - 1 < n: produce(k + S - 1) into version (k + S - 1) % S;  commit
               consume(k) from version k % S

so the copies for S - 1 future iterations are in flight while iteration k computes. Every
iteration commits exactly one group (possibly empty), which keeps the wait count uniform and
makes short loops (n < S, n = 0, symbolic n) correct. One barrier per iteration both publishes
iteration k's tile and retires the version consumed in iteration k - 1 before it is refilled.
Producer copies are marked `async`; their lowering uses cp.async where a copy moves whole
16-byte chunks, and plain stores otherwise (the next iteration's barrier covers them too).
"""
from __future__ import annotations

import dataclasses

from ..errors import TileError
from ..ir import dtypes as dt
from ..ir.buffer import GLOBAL, Buffer, BufferRegion, is_shared
from ..ir.expr import Call, const, convert
from ..ir.stmt import Allocate, Evaluate, For, IfThenElse, Kernel, SeqStmt, seq, stmts_of
from ..ir.tileop import Copy
from ..ir.visitor import Mutator, substitute, walk
from .insert_barriers import sync_stmt


def _call(name: str, span=None) -> Evaluate:
    return Evaluate(Call(name, (), dt.handle), span)


def _is_producer(s) -> bool:
    return isinstance(s, Copy) and s.src.buffer.scope == GLOBAL and is_shared(s.dst.buffer.scope)


def _stages(loop: For, body: list) -> list[int]:
    given = loop.annotations.get("stage")
    if given is not None:
        return list(given)
    last = loop.annotations["num_stages"] - 1
    return [0 if _is_producer(s) else last for s in body]


class _Versioned(Mutator):
    """Points every access of a versioned shared tile at version `index`."""

    def __init__(self, versions: dict, index):
        self.versions = versions
        self.index = index

    def visit_BufferRegion(self, r: BufferRegion):
        ranges = tuple((self.visit(a), self.visit(b)) for a, b in r.ranges)
        new = self.versions.get(id(r.buffer))
        if new is None:
            return dataclasses.replace(r, ranges=ranges)
        return BufferRegion(new, ((self.index, const(1)),) + ranges, r.span)

    def visit_BufferLoad(self, e):
        indices = tuple(self.visit(i) for i in e.indices)
        new = self.versions.get(id(e.buffer))
        if new is None:
            return dataclasses.replace(e, indices=indices)
        return dataclasses.replace(e, buffer=new, indices=(self.index,) + indices)

    def visit_BufferStore(self, s):
        value = self.visit(s.value)
        indices = tuple(self.visit(i) for i in s.indices)
        new = self.versions.get(id(s.buffer))
        if new is None:
            return dataclasses.replace(s, value=value, indices=indices)
        return dataclasses.replace(s, buffer=new, indices=(self.index,) + indices, value=value)


class _Pipeliner:
    def __init__(self):
        self.versions: dict = {}  # id(old shared tile) -> versioned Buffer

    def stmt(self, s):
        if isinstance(s, SeqStmt):
            return seq([self.stmt(x) for x in s.stmts], s.span)
        if isinstance(s, For):
            if s.kind == "pipelined" and s.annotations.get("num_stages", 0) >= 2:
                return self.pipeline(s)
            if s.kind != "parallel":
                return dataclasses.replace(s, body=self.stmt(s.body))
            return s
        if isinstance(s, IfThenElse):
            return dataclasses.replace(s, then_body=self.stmt(s.then_body),
                                       else_body=None if s.else_body is None
                                       else self.stmt(s.else_body))
        return s

    def pipeline(self, loop: For):
        body = list(stmts_of(loop.body))
        stages = _stages(loop, body)
        num = loop.annotations["num_stages"]
        last = max(stages)
        producers = [s for s, st in zip(body, stages) if st < last]
        if not producers:
            return dataclasses.replace(loop, kind="serial")
        for p in producers:
            if not _is_producer(p):
                raise TileError("T.Pipelined: only copies from global into shared memory can "
                                "run in an earlier stage on this target", p.span)
        depth = max(num, last + 1)
        for p in producers:
            b = p.dst.buffer
            if id(b) not in self.versions:
                self.versions[id(b)] = Buffer(b.name, (depth,) + tuple(b.shape), b.dtype,
                                              b.scope, b.span)
        consumers = [s for s, st in zip(body, stages) if st == last]
        k, n, span = loop.var, loop.extent, loop.span
        start = loop.start

        def produce(iteration, in_loop: bool) -> list:
            version = _mod(iteration - start, depth)
            out = []
            for p in producers:
                moved = substitute(p, {id(k): iteration})
                moved = _Versioned(self.versions, version).visit(moved)
                # In the loop the schedule itself orders these copies (see the module
                # docstring), so insert_barriers leaves them out of its hazard analysis.
                marks = {"async": True, "scheduled": True} if in_loop else {"async": True}
                out.append(dataclasses.replace(moved, annotations={**moved.annotations,
                                                                   **marks}))
            return out

        prologue = []
        for s in range(depth - 1):
            it = start + s
            prologue.append(IfThenElse(convert(s) < n, seq(produce(it, False)), None, span))
            prologue.append(_call("tc::cp_async_commit", span))
        ahead = k + (depth - 1)
        # Iteration k's group is done once at most depth - 2 younger ones are in flight; the
        # barrier then publishes it to all threads and also ends every thread's reads of the
        # version consumed in iteration k - 1, which the copies issued next overwrite.
        step = [_call(f"tc::cp_async_wait<{depth - 2}>", span),
                sync_stmt(span),
                IfThenElse(ahead < start + n, seq(produce(ahead, True)), None, span),
                _call("tc::cp_async_commit", span)]
        version = _mod(k - start, depth)
        step += [_Versioned(self.versions, version).visit(c) for c in consumers]
        new_loop = dataclasses.replace(loop, kind="serial", body=seq(step),
                                       annotations={"pipelined": depth})
        # Nothing may stay in flight past the loop (a later statement may reuse the bytes).
        return seq(prologue + [new_loop, _call("tc::cp_async_wait_all", span)])


def _mod(e, m: int):
    return e % m


class _Reallocate(Mutator):
    def __init__(self, versions):
        self.versions = versions

    def visit_Allocate(self, a: Allocate):
        new = self.versions.get(id(a.buffer))
        return a if new is None else Allocate(new, a.span)


def pipeline_loops(func):
    """Return func with its T.Pipelined loops software-pipelined."""
    def rebuild(s):
        if isinstance(s, Kernel):
            p = _Pipeliner()
            body = p.stmt(s.body)
            if p.versions:
                body = _Reallocate(p.versions).visit(body)
                _check_unversioned(body, p.versions)
            return dataclasses.replace(s, body=body)
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s

    return dataclasses.replace(func, body=rebuild(func.body))


def _check_unversioned(body, versions):
    """A versioned tile used outside its pipelined loop would read a stale version."""
    for n in walk(body):
        buffer = getattr(n, "buffer", None)
        if isinstance(buffer, Buffer) and id(buffer) in versions:
            raise TileError(f"T.Pipelined: shared tile {buffer.name} is filled inside a pipelined "
                            "loop and also used outside it; give the outside use its own tile",
                            getattr(n, "span", None))

