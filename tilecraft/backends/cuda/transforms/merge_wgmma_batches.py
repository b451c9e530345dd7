"""merge_wgmma_batches: back-to-back gemms into one accumulator wait once, not once each.

T.gemm lowers to a self-contained batch: fence, wgmma..., commit, wait_group 0, register fence.
Two gemms that accumulate into the same fragment one after the other (MLA's latent and rotary
score gemms, `acc_s = Q K^T` then `acc_s += Q_pe K_pe^T`) therefore drain the tensor cores
between them: the second batch is issued only once the first has retired. The hardware runs
wgmma instructions of one warpgroup that share an accumulator in issue order, across commit
groups as within one, so the first batch's wait and register fence are not needed when nothing
but mbarrier waits (the second batch's tiles arriving) stands between the batches:

    fence; wgmma(acc, A1, B1)...; commit; wait 0; register fence(acc)
    mbarrier wait (B2's stage)
    fence; wgmma(acc, A2, B2)...; commit; wait 0; register fence(acc)
  ->
    fence; wgmma(acc, A1, B1)...; commit
    mbarrier wait (B2's stage)
    fence; wgmma(acc, A2, B2)...; commit; wait 0; register fence(acc)

The second batch's wait covers both groups (wait_group N retires all but the newest N), so
every operand tile of the first batch is still released after it has been read. Turned off by
tl.disable_wgmma_batch_merge.
"""
from __future__ import annotations

import dataclasses

from ....ir.expr import Call
from ....ir.stmt import For, IfThenElse, Kernel, SeqStmt, called, flat_stmts, seq
from ....ir.visitor import walk
from ....pass_config import PassConfigKey
from .overlap_wgmma import addressed_buffer
from ..intrinsics import (MBARRIER_WAIT_PARITY, WGMMA_COMMIT_GROUP, WGMMA_FENCE,
                          WGMMA_FENCE_REGISTERS, WGMMA_ISSUES, WGMMA_WAIT_GROUP, is_call_to)

COMMIT = WGMMA_COMMIT_GROUP.name
WAIT_ALL = WGMMA_WAIT_GROUP.format(n=0)
FENCE = WGMMA_FENCE.name
BARRIER_WAIT = MBARRIER_WAIT_PARITY.name


def _shape(call: Call) -> str:
    """`m64n32k16` of a wgmma instruction's name."""
    return call.name.split("_")[1]


def _issued(s) -> list:
    return [n for n in walk(s) if isinstance(n, Call) and is_call_to(n.name, *WGMMA_ISSUES)]


def _batch(stmts: list, at: int):
    """(accumulator, shapes) of the batch starting at stmts[at] (a wgmma fence followed by
    wgmma instructions, possibly inside an unrolled loop), or None."""
    if called(stmts[at]) != FENCE or at + 1 >= len(stmts):
        return None
    issued = _issued(stmts[at + 1])
    accs = {id(addressed_buffer(c)) for c in issued}
    if not issued or len(accs) != 1:
        return None
    return addressed_buffer(issued[0]), {_shape(c) for c in issued}


def _previous_shapes(out: list) -> set:
    """The instruction shapes of the batch that ends at the end of `out`."""
    for s in reversed(out):
        issued = _issued(s)
        if issued:
            return {_shape(c) for c in issued}
    return set()


def _merge(stmts: list) -> list:
    out, i = [], 0
    while i < len(stmts):
        name = called(stmts[i])
        if name == COMMIT and i + 2 < len(stmts) and called(stmts[i + 1]) == WAIT_ALL and \
                is_call_to(called(stmts[i + 2]), WGMMA_FENCE_REGISTERS):
            acc = addressed_buffer(stmts[i + 2].value)
            j = i + 3
            while j < len(stmts) and called(stmts[j]) == BARRIER_WAIT:
                j += 1
            # Accumulator accesses of wgmma instructions of one shape are ordered by the
            # hardware without a fence or a wait (PTX ISA, wgmma.fence).
            nxt = _batch(stmts, j) if j < len(stmts) else None
            if acc is not None and nxt is not None and nxt[0] is acc and \
                    nxt[1] | _previous_shapes(out) == nxt[1] == _previous_shapes(out):
                out.append(stmts[i])             # the commit: the batch is its own group
                out.extend(stmts[i + 3:j])       # the waits for the next batch's tiles
                i = j
                continue
        out.append(stmts[i])
        i += 1
    return out


def _rebuild(s):
    if isinstance(s, SeqStmt):
        inner = dataclasses.replace(s, stmts=tuple(_rebuild(x) for x in s.stmts))
        flat = flat_stmts(inner)
        merged = _merge(flat)
        return inner if len(merged) == len(flat) else seq(merged, s.span)
    if isinstance(s, For):
        return dataclasses.replace(s, body=_rebuild(s.body))
    if isinstance(s, IfThenElse):
        return dataclasses.replace(s, then_body=_rebuild(s.then_body),
                                   else_body=None if s.else_body is None
                                   else _rebuild(s.else_body))
    if isinstance(s, Kernel):
        return dataclasses.replace(s, body=_rebuild(s.body))
    return s


def merge_wgmma_batches(func, configs: dict | None = None):
    if (configs or {}).get(PassConfigKey.TL_DISABLE_WGMMA_BATCH_MERGE):
        return func
    return dataclasses.replace(func, body=_rebuild(func.body))
