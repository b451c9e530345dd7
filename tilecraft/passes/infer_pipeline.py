"""infer_pipeline: the issue order and stage of each statement of a T.Pipelined loop (paper
section 4.3 and appendix F, algorithms 4 and 5).

For a loop with num_stages = n >= 2 the statements of its body are summarized by the buffers they
read and write (index expressions and `if` conditions included). Copies are the T.copy ops
from global into shared memory and the gathers (T.Parallel nests that only fill one shared
tile with global reads, each maybe under a condition with zero otherwise: an im2col tile); producers are the statements before a copy that write what a
copy (or another producer) reads, found to a fixed point. Copies and producers form the first
stage (stage 0). Each first-stage statement is anchored at its last use: for a copy, the last
later statement that reads what it writes; for a producer, the earliest anchor among the
first-stage statements it feeds (so that it is issued before them). The order is then built in
one forward pass: every other statement is placed in program order at the last stage, each
followed by the first-stage statements anchored at it, in program order. When the first-stage
statements all end up after everything else, the order is rotated so that they come first
(the tail rotation; on a GEMM body this issues the copies before the gemm).

Two points differ from the pseudo-code on purpose. Its last stage is n, lowered to n - 1 only
by the rotation; here it is always n - 1, so that stages stay in 0..n-1 as its text says and a
loop keeps num_stages versions of each tile whichever order it gets (stage n would cost every
such tile one more version under the one barrier per iteration of pipeline_loops, which only
retires a version at the next iteration's barrier). And a first-stage statement with no later
use in the body (dead within an iteration) is placed at the last stage, as the forward pass
places it, and then counts as a last-stage statement.

What the rewrite (pipeline_loops) can run ahead of the rest is checked here, and a statement
that cannot be is kept in the last stage: it runs the earlier stages all for iteration
k + depth - 1 while the last stage runs iteration k, so a statement in an earlier stage must
not read what a last-stage statement writes (that value would belong to an older iteration),
only copies may write shared memory there (each of their tiles gets depth versions),
nothing there may read those tiles (they land asynchronously), and what the other statements
write must be per-thread scalars (`T.alloc_var`, `T.alloc_local`) that only the earlier stages
read. A user's order= and stage= are checked against the same rules and against the data
dependencies (a statement never runs in an earlier stage than one whose result it reads; two
dependent statements that both run ahead, or both in the last stage, keep their program
order), and rejected with a
TileError at the statement otherwise.

A body that is one `if` without an else over the copies and the rest (a block-sparse loop
visiting only the tiles a mask keeps) is scheduled as the statements under it, when its
condition reads nothing but scalars and global tensors the body does not write: the condition
is then recorded as pipeline_guard and the body becomes those statements, each stage of an
iteration running only where the condition holds for that iteration (pipeline_loops), so the
copies of a kept tile are issued ahead and a skipped tile costs no load.

The result is recorded on the loop as the annotations pipeline_order (position of each body
statement in the issue order) and pipeline_stage, which the IR dump prints.
"""
from __future__ import annotations

import dataclasses

from ..errors import TileError, warn_at
from ..ir.buffer import GLOBAL, LOCAL, LOCAL_VAR, is_shared
from ..ir.expr import BufferLoad
from ..ir.stmt import BufferStore, Evaluate, For, IfThenElse, Kernel, SeqStmt, seq, stmts_of
from ..ir.tileop import Copy, Fill, TileOp
from ..ir.visitor import walk
from .parallel_nests import gather_targets
from ..ir.annotations import NUM_STAGES, PIPELINE_GUARD, PIPELINE_ORDER, PIPELINE_STAGE


@dataclasses.dataclass(eq=False)
class _Info:
    index: int
    stmt: object
    reads: dict    # id(buffer) -> buffer
    writes: dict
    copy: bool     # a T.copy from global into shared memory
    first: bool = False
    anchor: int = -1
    order: int = -1
    stage: int = -1


def is_async_copy(s) -> bool:
    """A T.copy from global into shared memory, or a gather: a T.Parallel nest that only stores
    global reads into shared tiles (parallel_nests.gather_targets)."""
    if isinstance(s, Copy):
        return s.src.buffer.scope == GLOBAL and is_shared(s.dst.buffer.scope)
    return gather_targets(s) is not None


def reads_and_writes(s) -> tuple[dict, dict]:
    """({id: buffer} read, {id: buffer} written) by a tile-level statement: its loads and
    stores, and what its tile ops read and write (index expressions and conditions
    included)."""
    reads, writes = {}, {}
    for n in walk(s):
        if isinstance(n, BufferLoad):
            reads[id(n.buffer)] = n.buffer
        elif isinstance(n, BufferStore):
            writes[id(n.buffer)] = n.buffer
        elif isinstance(n, TileOp):
            reads.update((id(b), b) for b in n.reads())
            writes.update((id(b), b) for b in n.writes())
    return reads, writes


def _summarize(index: int, s) -> _Info:
    reads, writes = reads_and_writes(s)
    return _Info(index, s, reads, writes, is_async_copy(s))


def _propagate_producers(infos: list):
    """Algorithm 5, PropagateProducers: statements before a copy that write what it reads."""
    needed = {}
    for p in infos:
        if p.copy:
            p.first = True
            needed.update(p.reads)
    changed = True
    while changed:
        changed = False
        last_copy = max((p.index for p in infos if p.copy), default=-1)
        for q in infos:
            if not q.first and q.index < last_copy and needed.keys() & q.writes.keys():
                q.first = changed = True
                needed.update(q.reads)


def _line(info: _Info) -> str:
    span = getattr(info.stmt, "span", None)
    return f"line {span.line}" if span is not None else f"statement {info.index}"


def _name(buffers: dict, keys) -> str:
    return buffers[sorted(keys, key=lambda k: buffers[k].name)[0]].name


def _ahead_problem(q: _Info, early: list, late: list) -> str | None:
    """Why q cannot run in an earlier stage than the statements in `late`, or None."""
    late_reads, late_writes = {}, {}
    for r in late:
        late_reads.update(r.reads)
        late_writes.update(r.writes)
    tiles = {}
    for p in early:
        if p.copy:
            tiles.update(p.writes)
    clash = q.reads.keys() & late_writes.keys()
    if clash:
        return (f"it reads {_name(late_writes, clash)}, which a statement of the last stage "
                "writes, so it would see the value of an older iteration")
    clash = q.reads.keys() & tiles.keys()
    if clash:
        return (f"it reads {_name(tiles, clash)}, which a copy of an earlier stage is still "
                "filling asynchronously")
    if q.copy:
        return None
    if any(isinstance(n, Evaluate) or (isinstance(n, TileOp) and not isinstance(n, Fill))
           for n in walk(q.stmt)):
        return ("only copies from global into shared memory, and the scalar statements that "
                "compute what they read, can run in an earlier stage")
    for b in q.writes.values():
        if b.scope not in (LOCAL, LOCAL_VAR):
            return (f"it writes {b.name} ({b.scope}); besides copies from global into shared "
                    "memory, an earlier stage may only write per-thread scalars "
                    "(T.alloc_var, T.alloc_local)")
    clash = q.writes.keys() & (late_reads.keys() | late_writes.keys())
    if clash:
        return (f"{_name(q.writes, clash)}, which it writes, is also used by the last stage, "
                "which runs an older iteration")
    return None


def _check_order(infos: list, in_early) -> tuple | None:
    """The first pair (earlier, later) of dependent statements of one stage class whose issue
    order reverses their program order, with the buffer, or None."""
    for j in infos:
        for i in infos[:j.index]:
            if in_early(i) != in_early(j) or i.order < j.order:
                continue
            clash = (i.writes.keys() & (j.reads.keys() | j.writes.keys())) | \
                (i.reads.keys() & j.writes.keys())
            if clash:
                merged = {**i.reads, **i.writes, **j.reads, **j.writes}
                return i, j, _name(merged, clash)
    return None


def _infer(infos: list, num_stages: int):
    _propagate_producers(infos)
    while True:
        last = _place(infos, num_stages)
        early = [q for q in infos if q.stage < last]
        late = [q for q in infos if q.stage == last]
        bad = [q for q in early if _ahead_problem(q, early, late)]
        bad_order = _check_order(infos, lambda q: q.stage < last)
        if bad_order is not None:
            bad.append(bad_order[0] if bad_order[0].first else bad_order[1])
        if not bad:
            return
        for q in bad:
            q.first = False


def _place(infos: list, num_stages: int) -> int:
    """Algorithm 4: anchors at last uses, the forward placement, and the tail rotation;
    returns the last stage."""
    for q in reversed(infos):
        if not q.first:
            continue
        later = infos[q.index + 1:]
        uses = [r.index for r in later if not r.first and q.writes.keys() & r.reads.keys()]
        fed = [r.anchor for r in later if r.first and r.anchor >= 0
               and q.writes.keys() & r.reads.keys()]
        q.anchor = max(uses) if uses else min(fed) if fed else -1
    last = num_stages - 1
    position = 0
    for p in infos:
        if p.first and p.anchor >= 0:
            continue
        p.order, p.stage, position = position, last, position + 1
        for q in infos:
            if q.first and q.anchor == p.index:
                q.order, q.stage, position = position, 0, position + 1
    assert position == len(infos)
    ahead = [q.order for q in infos if q.stage < last]
    rest = [q.order for q in infos if q.stage == last]
    if ahead and rest and min(ahead) > max(rest):
        for q in infos:
            q.order = (q.order + len(ahead)) % len(infos)
    return last


def _validate(loop: For, infos: list, order: list, stage: list):
    """Check a user's order=/stage= against the dependencies and what the rewrite supports."""
    for q, o, st in zip(infos, order, stage):
        q.order, q.stage = o, st
    for j in infos:
        for i in infos[:j.index]:
            clash = i.writes.keys() & j.reads.keys()
            if clash and j.stage < i.stage:
                raise TileError(
                    f"T.Pipelined stage= puts this statement in stage {j.stage}, before stage "
                    f"{i.stage} of the statement at {_line(i)} that writes "
                    f"{_name(i.writes, clash)}, which it reads", j.stmt.span,
                    notes=((f"{_name(i.writes, clash)} is written here", i.stmt.span),))
    last = max(stage)
    early = [q for q in infos if q.stage < last]
    late = [q for q in infos if q.stage == last]
    for q in early:
        problem = _ahead_problem(q, early, late)
        if problem:
            raise TileError(f"T.Pipelined stage= puts this statement in stage {q.stage}, ahead "
                            f"of the last stage {last}, but {problem}", q.stmt.span,
                            notes=(("in this pipelined loop", loop.span),))
    reversed_pair = _check_order(infos, lambda q: q.stage < last)
    if reversed_pair is not None:
        i, j, name = reversed_pair
        raise TileError(f"T.Pipelined order= issues this statement before the statement at "
                        f"{_line(i)}, which comes first in the loop body and uses {name} with it "
                        "in the same stage", j.stmt.span,
                        notes=((f"{name} is used here first", i.stmt.span),))


def _guarded_body(loop: For):
    """(condition, statements) when the loop's body is one `if` without an else over copies,
    whose condition the pipeline may evaluate for a later iteration ahead of time: it reads
    nothing but scalars and global tensors the body does not write. Else None."""
    body = list(stmts_of(loop.body))
    if len(body) != 1 or not isinstance(body[0], IfThenElse) or body[0].else_body is not None:
        return None
    branch = body[0]
    if not any(is_async_copy(n) for n in walk(branch.then_body)):
        return None
    written = {id(n.buffer) for n in walk(branch.then_body) if isinstance(n, BufferStore)}
    for n in walk(branch.then_body):
        if isinstance(n, TileOp):
            written.update(id(b) for b in n.writes())
    for n in walk(branch.cond):
        if isinstance(n, BufferLoad) and (n.buffer.scope != GLOBAL or id(n.buffer) in written):
            return None
    return branch.cond, list(stmts_of(branch.then_body))


def _schedule(loop: For) -> For:
    # order= / stage= name the statements of the body as written, so a user's schedule keeps
    # the `if` whole
    given = loop.annotations.get("order") is not None or \
        loop.annotations.get("stage") is not None
    guarded = None if given else _guarded_body(loop)
    if guarded is not None:
        # Scheduled as the statements under the `if`; pipeline_loops runs each stage of
        # iteration i under the condition for i (loads of a skipped tile are not issued).
        scheduled = _schedule(dataclasses.replace(loop, body=seq(guarded[1], loop.body.span)))
        if any(x < max(scheduled.annotations[PIPELINE_STAGE])
               for x in scheduled.annotations[PIPELINE_STAGE]):
            return dataclasses.replace(scheduled, annotations={**scheduled.annotations,
                                                               PIPELINE_GUARD: guarded[0]})
    body = list(stmts_of(loop.body))
    infos = [_summarize(i, s) for i, s in enumerate(body)]
    num = loop.annotations[NUM_STAGES]
    given_order = loop.annotations.get("order")
    given_stage = loop.annotations.get("stage")
    if given_stage is None:
        _infer(infos, num)
        stage = [q.stage for q in infos]
        if all(x == num - 1 for x in stage):
            _warn_unpipelined(loop, body, num)
        order = list(given_order) if given_order is not None else [q.order for q in infos]
    else:
        stage = list(given_stage)
        order = list(given_order) if given_order is not None else list(range(len(body)))
    if given_order is not None or given_stage is not None:
        _validate(loop, infos, order, stage)
    return dataclasses.replace(loop, annotations={**loop.annotations, PIPELINE_ORDER: order,
                                                  PIPELINE_STAGE: stage})


def _warn_unpipelined(loop: For, body: list, num: int):
    """A loop asked for num_stages >= 2 whose whole body is one `if` over copies that cannot be
    run ahead (see _guarded_body) runs as a plain loop: said at the loop rather than left for
    the user to find in the timings."""
    if len(body) != 1 or not isinstance(body[0], IfThenElse) or \
            not any(is_async_copy(n) for n in walk(body[0])):
        return
    warn_at(loop.span, f"tilecraft: this T.Pipelined loop (num_stages={num}) runs without "
                       "pipelining: its whole body is under one `if`, and copies under a "
                       "condition are issued ahead only when the `if` has no else and its "
                       "condition reads nothing but scalars and global tensors the loop does "
                       "not write")


def _visit(s):
    if isinstance(s, SeqStmt):
        return seq([_visit(x) for x in s.stmts], s.span)
    if isinstance(s, Kernel):
        return dataclasses.replace(s, body=_visit(s.body))
    if isinstance(s, For) and s.kind != "parallel":
        s = dataclasses.replace(s, body=_visit(s.body))
        if s.kind == "pipelined" and s.annotations.get(NUM_STAGES, 0) >= 2:
            return _schedule(s)
        return s
    if isinstance(s, IfThenElse):
        return dataclasses.replace(s, then_body=_visit(s.then_body),
                                   else_body=None if s.else_body is None
                                   else _visit(s.else_body))
    return s


def infer_pipeline(func):
    """Return func with an issue order and a stage recorded on each pipelined loop."""
    return dataclasses.replace(func, body=_visit(func.body))
