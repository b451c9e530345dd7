"""pipeline_loops: software-pipeline T.Pipelined loops with cp.async (paper section 4.3).

infer_pipeline has recorded on each loop `for k in T.Pipelined(n, num_stages=S)` (S >= 2) an
issue order and a stage for every statement of its body (annotations pipeline_order and
pipeline_stage). The statements below the last stage L run ahead: T.copy ops from global into
shared memory (issued asynchronously) and the scalar statements that compute what they read.
Each shared tile such a copy writes gets D = max(S, L + 1) versions (a leading dimension), and
the loop becomes

    prologue:  for s in [0, D-1): if s < n: ahead(s) into version s;  commit
    body k:    wait until at most D - 2 groups are in flight  (iteration k's copies landed)
               barrier
               the body's statements in issue order, where each run of statements ahead is
                   if k + D - 1 < n: ahead(k + D - 1) into version (k + D - 1) % D
               and each last-stage statement is itself, for iteration k, on version k % D;
               commit (after the last statement ahead)

so the copies for D - 1 future iterations are in flight while iteration k computes. Every
iteration commits exactly one group (possibly empty), which keeps the wait count uniform and
makes short loops (n < D, n = 0, symbolic n) correct. One barrier per iteration both publishes
iteration k's tile and retires the version consumed in iteration k - 1, which is the one the
copies issued in iteration k overwrite; so a copy may be issued anywhere in the body, before
or after the last-stage statements that read the current version. All stages below L are run
the same D - 1 iterations ahead (a copy put in an intermediate stage lands earlier than it
would have to, with the same number of versions). Copies ahead are marked `async`; their
lowering uses cp.async where a copy moves whole 16-byte chunks, and plain stores otherwise (the
next iteration's barrier covers them too). The statements ahead write nothing a last-stage
statement touches besides those tiles (infer_pipeline checks it).
"""
from __future__ import annotations

import dataclasses

from ....errors import TileError
from ....ir.buffer import Buffer, BufferRegion
from ....ir.expr import const, convert
from ....ir.stmt import Allocate, For, IfThenElse, SeqStmt, call_stmt, seq, stmts_of
from ....ir.tileop import Copy, CumSum, Gemm
from ....passes.infer_pipeline import is_async_copy
from ....passes.parallel_nests import gather_targets
from ....ir.visitor import Mutator, map_kernels, substitute, walk
from ....ir.linear import constant_value
from ....ir.annotations import (ASYNC_COPY, NUM_STAGES, PIPELINE_GUARD, PIPELINE_ORDER,
                                PIPELINE_STAGE, SCHEDULED,
                                SOFTWARE_PIPELINED, TILE_RANK, sync_stmt)
from ..intrinsics import CP_ASYNC_COMMIT, CP_ASYNC_WAIT, CP_ASYNC_WAIT_ALL


def schedule_of(loop: For) -> tuple[list, list]:
    order = loop.annotations.get(PIPELINE_ORDER)
    stages = loop.annotations.get(PIPELINE_STAGE)
    if order is None or stages is None:
        raise TileError("internal error: pipeline_loops needs the schedule that infer_pipeline "
                        "records on each T.Pipelined loop", loop.span)
    return list(order), list(stages)


class Versioned(Mutator):
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

    def visit_Copy(self, c: Copy):
        """A copy of a version also notes the rank the tile had, so that a TMA box is shaped
        like the tile, not like the ring of its versions (a 1-d row [n] becomes [stages, n])."""
        ranks = [len(r.buffer.shape) for r in (c.src, c.dst) if id(r.buffer) in self.versions]
        out = self.generic_visit(c)
        if ranks and TILE_RANK not in out.annotations:
            out = dataclasses.replace(out, annotations={**out.annotations, TILE_RANK: ranks[0]})
        return out

    def visit_CumSum(self, c: CumSum):
        """The scanned dimension counted from the end, where the version's leading index
        does not move it."""
        versioned = any(id(r.buffer) in self.versions for r in (c.src, c.dst))
        out = self.generic_visit(c)
        if versioned and c.dim >= 0:
            out = dataclasses.replace(out, dim=c.dim - len(c.src.ranges))
        return out


class _Pipeliner:
    def __init__(self):
        self.versions: dict = {}  # id(old shared tile) -> versioned Buffer

    def stmt(self, s):
        if isinstance(s, SeqStmt):
            return seq([self.stmt(x) for x in s.stmts], s.span)
        if isinstance(s, For):
            if s.kind == "pipelined" and s.annotations.get(NUM_STAGES, 0) >= 2:
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
        order, stages = schedule_of(loop)
        num = loop.annotations[NUM_STAGES]
        last = max(stages)
        ahead = {i for i, st in enumerate(stages) if st < last}
        guard = loop.annotations.get(PIPELINE_GUARD)
        if not ahead:
            if guard is not None:
                body = [IfThenElse(guard, seq(body, loop.span), None, loop.span)]
            return dataclasses.replace(loop, kind="serial", body=seq(body, loop.span))
        depth = max(num, last + 1)
        trips = constant_value(loop.extent)
        if trips is not None:
            # Loads issued ahead past the last iteration never happen: with depth trips + 1 the
            # prologue already issues every one, and further versions are shared memory that
            # only costs blocks per SM (a 1x1 convolution over 64 channels runs its loop once).
            depth = max(2, min(depth, trips + 1))
        # the shared tiles each copy or gather run ahead fills
        fills = {i: (body[i].dst.buffer,) if isinstance(body[i], Copy) else
                 gather_targets(body[i]) for i in ahead}
        fills = {i: b for i, b in fills.items() if b is not None}
        for i in sorted(fills):
            if isinstance(body[i], Copy) and not is_async_copy(body[i]):
                raise TileError("T.Pipelined: only copies from global into shared memory "
                                "can run in an earlier stage on this target", body[i].span)
            for b in fills[i]:
                if id(b) not in self.versions:
                    self.versions[id(b)] = Buffer(b.name, (depth,) + tuple(b.shape), b.dtype,
                                                  b.scope, b.span)
        issue = sorted(range(len(body)), key=lambda i: order[i])
        k, n, span = loop.var, loop.extent, loop.span
        start = loop.start

        def produce(indices, iteration, in_loop: bool) -> list:
            version = _mod(iteration - start, depth)
            out = []
            for i in indices:
                moved = substitute(body[i], {id(k): iteration})
                moved = Versioned(self.versions, version).visit(moved)
                if i in fills:
                    # In the loop the schedule itself orders these copies (see the module
                    # docstring), so insert_barriers leaves them out of its hazard analysis.
                    # A gather (a T.Parallel nest filling the tile) is lowered to asynchronous
                    # copies where its runs allow (tileops/vector_runs.py).
                    marks = {ASYNC_COPY: True, SCHEDULED: True} if in_loop else {ASYNC_COPY: True}
                    moved = dataclasses.replace(moved, annotations={**moved.annotations,
                                                                    **marks})
                out.append(moved)
            return out

        def kept(iteration, stmts: list) -> list:
            """stmts of `iteration`, run only where the loop's guard holds for it."""
            if guard is None or not stmts:
                return stmts
            return [IfThenElse(substitute(guard, {id(k): iteration}), seq(stmts, span), None,
                               span)]

        early = [i for i in issue if i in ahead]
        prologue = []
        for s in range(depth - 1):
            it = start + s
            prologue.append(IfThenElse(convert(s) < n, seq(kept(it, produce(early, it, False))),
                                       None, span))
            prologue.append(call_stmt(CP_ASYNC_COMMIT.name, span=span))
        future = k + (depth - 1)
        # Iteration k's group is done once at most depth - 2 younger ones are in flight; the
        # barrier then publishes it to all threads and also ends every thread's reads of the
        # version consumed in iteration k - 1, which the copies issued next overwrite.
        step = [call_stmt(CP_ASYNC_WAIT.format(n=depth - 2), span=span), sync_stmt(span)]
        version = _mod(k - start, depth)
        # The statements that run ahead work on iteration k + depth - 1 and read nothing the
        # last stage writes (infer_pipeline checks that), so they may go anywhere after the
        # barrier. Issued right after it, their copies have the whole iteration to land. In a
        # loop with two gemms or more (attention) they follow the first gemm instead: its
        # fragment loads then start at the barrier without queueing behind the copies, and
        # the copies overlap the element-wise work that follows (faster on the H100's sm80
        # path, causal and not: bench/mha_fwd.md). The recorded issue
        # order still orders them among themselves and the last stage among itself.
        issued = [IfThenElse(future < start + n, seq(kept(future, produce(early, future, True))),
                             None, span),
                  call_stmt(CP_ASYNC_COMMIT.name, span=span)]
        last_stage = [Versioned(self.versions, version).visit(body[i]) for i in issue
                      if i not in ahead]
        gemms = [j for j, s in enumerate(last_stage) if isinstance(s, Gemm)]
        at = gemms[0] + 1 if len(gemms) >= 2 else 0
        step += kept(k, last_stage[:at]) + issued + kept(k, last_stage[at:])
        new_loop = dataclasses.replace(loop, kind="serial", body=seq(step),
                                       annotations={SOFTWARE_PIPELINED: depth,
                                                    NUM_STAGES: num})
        # Nothing may stay in flight past the loop (a later statement may reuse the bytes).
        return seq(prologue + [new_loop, call_stmt(CP_ASYNC_WAIT_ALL.name, span=span)])


def _mod(e, m: int):
    return e % m


class Reallocate(Mutator):
    def __init__(self, versions):
        self.versions = versions

    def visit_Allocate(self, a: Allocate):
        new = self.versions.get(id(a.buffer))
        return a if new is None else Allocate(new, a.span)


def pipeline_loops(func):
    """Return func with its T.Pipelined loops software-pipelined."""
    def pipeline(k):
        p = _Pipeliner()
        body = p.stmt(k.body)
        if p.versions:
            body = Reallocate(p.versions).visit(body)
            check_unversioned(body, p.versions)
        return dataclasses.replace(k, body=body)
    return map_kernels(func, pipeline)


def check_unversioned(body, versions):
    """A versioned tile used outside its pipelined loop would read a stale version."""
    for n in walk(body):
        buffer = getattr(n, "buffer", None)
        if isinstance(buffer, Buffer) and id(buffer) in versions:
            raise TileError(f"T.Pipelined: shared tile {buffer.name} is filled inside a pipelined "
                            "loop and also used outside it; give the outside use its own tile",
                            getattr(n, "span", None))

