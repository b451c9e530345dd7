"""rotate_wgmma_loop: overlap the work between two wgmma batches with the tensor cores.

An attention consumer loop runs two wgmma batches per iteration with element-wise work between
them: S = Q K^T (batch 1, accumulator X), the online softmax on S (M), then O += P V (batch 2,
accumulator Y, A = P in registers). Each batch is waited for where it is issued, so the
warpgroup's tensor-core work and its softmax alternate and never overlap. Rotating the loop by
half an iteration issues batch 1 of iteration k before batch 2 of iteration k - 1, and runs the
softmax of iteration k while that batch 2 is still in flight (the scheme of FlashAttention-3's
intra-warpgroup pipelining):

    if n > 0:  A(s); wait_group 0; fence X; M(s)                  -- the first iteration's half
    for k in s + 1 .. s + n - 1:
        A(k)                  -- wait for K[k]; init X; batch 1 into X; commit
        C_issue(k - 1)        -- wait for V[k-1]; P into registers; batch 2 into Y; commit
        wait_group 1; fence X -- batch 1 of k has retired (groups retire in order)
        M_free(k)             -- the softmax statements that touch nothing batch 2 uses
        wait_group 0; fence Y; C_release(k - 1)
        M_y(k)                -- the rest of M (rescaling Y), in its original order
    if n > 0:  C(s + n - 1)                                        -- the last iteration's half

A loop qualifies when it is warp-specialized with a ring at least MIN_DEPTH stages deep (see
there), issues exactly two batches (each self-contained:
fence, wgmma..., commit, wait_group 0, register fence), ends with batch 2 and the barrier
releases after it, and its statements may be reordered that way: A and C share no buffer but
the TMA barriers, C does not read X, and every statement of M that touches a buffer of C (or
depends on one that does) can wait until batch 2 has retired. Anything else is left as it is,
as are loops with one batch (overlap_wgmma) or more than two. Turned off with
tl.disable_wgmma_rotation.
"""
from __future__ import annotations

import dataclasses

from ....ir.buffer import Buffer
from ....ir.expr import BufferLoad, Call, const
from ....ir.stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, called, seq,
                       stmts_of)
from ....ir.visitor import substitute, walk
from ....ir.annotations import ROTATED, WARP_SPECIALIZED
from ....pass_config import PassConfigKey
from .overlap_wgmma import WAIT_ALL, WAIT_ONE, rewrite_consumer_loops
from ..intrinsics import (MBARRIER_CALLS, WGMMA_COMMIT_GROUP, WGMMA_FENCE, WGMMA_FENCE_REGISTERS,
                          is_call_to)


def _is_barrier_call(s) -> bool:
    return is_call_to(called(s), *MBARRIER_CALLS)


def _refs(s) -> set:
    """ids of the buffers a statement names (reads, writes or addresses), leaving out the
    mbarrier arrays its barrier calls name: each iteration and tile group signals its own slot,
    so those calls order nothing but what they wait for."""
    if _is_barrier_call(s):
        return set()
    return {id(n.buffer) for n in walk(s) if isinstance(getattr(n, "buffer", None), Buffer)}


def _writes(s) -> set:
    """ids of the buffers a statement may write: stores, allocations, and every buffer whose
    address a call takes (a header call may write through it)."""
    if _is_barrier_call(s):
        return set()
    out = set()
    for n in walk(s):
        if isinstance(n, (BufferStore, Allocate)):
            out.add(id(n.buffer))
        elif isinstance(n, Call) and n.name == "address_of" and \
                isinstance(n.args[0], BufferLoad):
            out.add(id(n.args[0].buffer))
    return out


def _orders_threads(s) -> bool:
    """A block or named barrier, or a fence: ordering between threads, not within one."""
    name = called(s)
    return name is not None and not _is_barrier_call(s) and \
        any(w in name for w in ("barrier", "sync", "fence"))


def _conflict(a, b) -> bool:
    return bool(_writes(a) & _refs(b) or _refs(a) & _writes(b))


@dataclasses.dataclass
class _Batch:
    fence: int        # index of its wgmma_fence
    commit: int       # index of its commit; wait_group 0 and the register fence follow
    acc: int          # id of the accumulator the register fence names


def _batches(body: list) -> list | None:
    commits = [i for i, s in enumerate(body) if called(s) == WGMMA_COMMIT_GROUP.name]
    nested = sum(1 for s in body for n in walk(s)
                 if isinstance(n, Call) and n.name == WGMMA_COMMIT_GROUP.name)
    if nested != len(commits):
        return None
    out = []
    for c in commits:
        if c + 2 >= len(body) or called(body[c + 1]) != WAIT_ALL or \
                not is_call_to(called(body[c + 2]), WGMMA_FENCE_REGISTERS):
            return None
        fences = [i for i in range(c) if called(body[i]) == WGMMA_FENCE.name]
        if not fences:
            return None
        arg = body[c + 2].value.args[0]
        if not (isinstance(arg, Call) and arg.name == "address_of"):
            return None
        out.append(_Batch(fences[-1], c, id(arg.args[0].buffer)))
    return out


def _c_start(body: list, batch2: _Batch) -> int:
    """Where batch 2's preparation begins: the barrier waits, and the statements filling its
    register operand (allocation, packing), just before its fence."""
    operands = set().union(*(_refs(s) for s in body[batch2.fence:batch2.commit])) - {batch2.acc}
    start = batch2.fence
    while start > 0:
        s = body[start - 1]
        if _is_barrier_call(s) and "wait" in called(s):
            start -= 1
        elif not _is_barrier_call(s) and _writes(s) and _writes(s) <= operands:
            start -= 1
        else:
            break
    return start


# Rotation holds each tile of batch 2 (attention's V) until after the next iteration's
# softmax, so the producer can refill its stage later than before. With a ring of two stages
# that cost more than the overlap gained on causal attention (on the H100; with three stages
# rotation gained, causal and not: bench/mha_fwd.md), so only rings this deep are rotated.
MIN_DEPTH = 3


def _rotated(loop: For):
    """The statements replacing a qualifying loop, else None."""
    if loop.annotations.get(WARP_SPECIALIZED, 0) < MIN_DEPTH:
        return None
    body = list(stmts_of(loop.body))
    batches = _batches(body)
    if batches is None or len(batches) != 2:
        return None
    b1, b2 = batches
    c_release = body[b2.commit + 3:]
    if not c_release or not all(_is_barrier_call(s) and "arrive" in called(s)
                                for s in c_release):
        return None
    A, sync1 = body[:b1.commit + 1], body[b1.commit + 1:b1.commit + 3]
    c0 = _c_start(body, b2)
    if c0 <= b1.commit + 2:
        return None
    M, C = body[b1.commit + 3:c0], body[c0:]
    c_issue, sync2 = body[c0:b2.commit + 1], body[b2.commit + 1:b2.commit + 3]
    refs_a = set().union(*(_refs(s) for s in A))
    refs_c = set().union(*(_refs(s) for s in C))
    writes_a = set().union(*(_writes(s) for s in A))
    writes_c = set().union(*(_writes(s) for s in C))
    # Buffers both only read (a persistent kernel's count of ring rounds, in every stage
    # index) do not order A and C.
    if writes_a & refs_c or refs_a & writes_c or b1.acc in refs_c or b2.acc in refs_a:
        return None
    # While batch 2 is in flight it reads its operands and writes Y; the statements of C
    # before it (the packing of its register operand) have run in program order already.
    in_flight = set().union(*(_refs(s) for s in body[b2.fence + 1:b2.commit]))
    # M's statements that must wait for batch 2: those naming its buffers, and those after
    # them that depend on them (so each group keeps its order and every dependence holds). A
    # barrier or fence orders memory between threads, which per-thread dependences do not
    # see: once one has to wait, everything after it waits too.
    late, frozen = [], False
    for s in M:
        if frozen or _refs(s) & in_flight or any(_conflict(s, x) for x in late) or \
                (late and _orders_threads(s)):
            late.append(s)
            frozen = frozen or _orders_threads(s)
    early = [s for s in M if not any(s is x for x in late)]
    k = loop.var
    at = lambda stmts, e: [substitute(s, {id(k): e}) for s in stmts]  # noqa: E731
    first, last = loop.start, loop.start + loop.extent - const(1)
    span = loop.span
    wait_one = Evaluate(Call(WAIT_ONE, (), sync1[0].value.dtype), sync1[0].span)
    steady = A + at(c_issue, k - const(1)) + [wait_one, sync1[1]] + early + \
        at(sync2 + c_release, k - const(1)) + late
    # Marked for pingpong_warpgroups, which makes warpgroups take turns over its issue.
    rotated = dataclasses.replace(loop, start=loop.start + const(1),
                                  extent=loop.extent - const(1), body=seq(steady),
                                  annotations={**loop.annotations, ROTATED: True})
    ran = loop.extent > const(0)
    return [IfThenElse(ran, seq(at(A + sync1 + M, first)), None, span), rotated,
            IfThenElse(ran, seq(at(C, last)), None, span)]


def rotate_wgmma_loop(func, configs: dict | None = None):
    if (configs or {}).get(PassConfigKey.TL_DISABLE_WGMMA_ROTATION):
        return func
    return rewrite_consumer_loops(func, _rotated)
