"""rotate_mma_loop: keep the tensor cores busy across the barrier of a cp.async GEMM loop.

After pipeline_loops and the mma.sync lowering (tileops/gemm.py), a pipelined loop whose last
stage is one gemm on shared tiles reads

    for k:  wait; barrier; if k + D - 1 < end: copies ahead; commit
            for kk in 0..KI-1 (unrolled):  load the fragments of (k, kk); mmas(kk)

so after every barrier each warp issues its copies, then waits for the ldmatrix of step 0
before its first mma: the tensor cores idle at the start of every iteration, and the barrier
itself waits for the slowest warp's last mmas. Rotating the fragment loads by one k step (the
fragments double-buffered) gives

    wait; barrier; if end > start: load (start, 0) into buffer 0
    for k:
      for kk in 0..KI-1 (unrolled):
        if kk == KI-1:  wait; barrier                  -- iteration k + 1's tile has landed
        if kk < KI-1:   load (k, kk + 1) into buffer (kk + 1) % 2
        elif k + 1 < end: load (k + 1, 0) into buffer 0
        copy statement i of the n ahead, at step i * (KI - 2) / (n - 1):
                        if k + D - 1 < end: copy i;  and after the last one, commit
        mmas(kk) from buffer kk % 2

Every mma now has its operands loaded one step earlier, while the step before computes, and
the last step's mmas follow the barrier with nothing to wait for. A GEMM's two copies go to
steps 0 and KI - 2, which spreads the load-store work over the tile.

Why it is still race-free: the copies issued in iteration k (at steps up to KI - 2) overwrite
the version of tile k - 1, whose last ldmatrix ran before the barrier at step KI - 1 of
iteration k - 1 (or before the one in front of the loop), which every thread has passed. The
wait before the barrier of iteration k leaves D - 2 groups in flight: D - 1 were committed in
the prologue and one per iteration up to k (before step KI - 1), so tile k + 1's group has
landed when step 0 of tile k + 1 is loaded. The group count per iteration is unchanged, so
short and symbolic trip counts behave as before.

Only this exact shape is rotated (the copies, then a single gemm with both operands in shared
memory, nothing else in the last stage, an even number of k steps per tile); anything else is
left as it is. Turned off with tl.disable_mma_rotation. What it gained on the H100's cp.async
path: bench/gemm.md.
"""
from __future__ import annotations

import dataclasses

from ....arith.bounds import simplify
from ....ir.buffer import Buffer
from ....ir.expr import BufferLoad, Call, Const, const
from ....ir.stmt import Allocate, For, IfThenElse, SeqStmt, called, flat_stmts, seq
from ....ir.visitor import Mutator, substitute, walk
from ....ir.annotations import BLOCK_BARRIER, FRAGMENT_LOOP, SOFTWARE_PIPELINED
from ..intrinsics import CP_ASYNC_COMMIT, CP_ASYNC_WAIT, MMA, is_call_to
from ....pass_config import PassConfigKey


def _issues_mma(s) -> bool:
    return any(isinstance(n, Call) and is_call_to(n.name, MMA) for n in walk(s))


class _Rebased(Mutator):
    """Points every access of a fragment array at one half of its double-buffered copy, and
    folds the indices a substituted k step or tile made constant."""

    def __init__(self, doubled: dict, half):
        self.doubled = doubled  # id(fragment) -> (doubled Buffer, elements per half)
        self.half = half

    def visit_BufferLoad(self, e):
        indices = tuple(simplify(self.visit(i)) for i in e.indices)
        new = self.doubled.get(id(e.buffer))
        if new is None:
            return dataclasses.replace(e, indices=indices)
        buffer, size = new
        return BufferLoad(buffer, (simplify(self.half * size + indices[0]),), e.span)


def _rotated(loop: For):
    """The statements replacing a qualifying pipelined loop, else None."""
    body = flat_stmts(loop.body)
    if len(body) < 5:
        return None
    wait, sync, ahead, commit, *last = body
    if not (is_call_to(called(wait), CP_ASYNC_WAIT) and
            called(sync) == BLOCK_BARRIER and isinstance(ahead, IfThenElse) and
            ahead.else_body is None and called(commit) == CP_ASYNC_COMMIT.name):
        return None
    allocs = [s for s in last if isinstance(s, Allocate)]
    steps = [s for s in last if isinstance(s, For)]
    if len(allocs) + len(steps) != len(last) or len(steps) != 1 or \
            not steps[0].annotations.get(FRAGMENT_LOOP) or \
            not isinstance(steps[0].extent, Const):
        return None
    step = steps[0]
    fragments = [a.buffer for a in allocs]  # the gemm's A and B fragment arrays
    parts = flat_stmts(step.body)
    loads = [s for s in parts if not _issues_mma(s)]
    mmas = [s for s in parts if _issues_mma(s)]
    if not loads or not mmas or parts != loads + mmas:
        return None
    ki = int(step.extent.value)
    if ki % 2:
        # Step kk reads copy kk % 2 only while every tile has an even number of steps; with
        # an odd one the parity alternates between tiles, and a copy chosen at run time
        # would put the fragments in local memory.
        return None
    doubled = {id(b): (Buffer(b.name, (2 * b.shape[0],), b.dtype, b.scope, b.span), b.shape[0])
               for b in fragments}
    k, kk, span = loop.var, step.var, loop.span
    end = loop.start + loop.extent

    def load(tile, k_step, half):
        moved = [substitute(s, {id(k): tile, id(kk): k_step}) for s in loads]
        return seq([_Rebased(doubled, const(half)).visit(s) for s in moved], span)

    next_half = (kk + const(1)) % const(2)
    within = [_Rebased(doubled, next_half).visit(substitute(s, {id(kk): kk + const(1)}))
              for s in loads]
    last_step = kk == const(ki - 1)
    rotated_step = [IfThenElse(last_step, seq([wait, sync], span), None, span),
                    IfThenElse(kk < const(ki - 1), seq(within, span),
                               IfThenElse(k + const(1) < end, load(k + const(1), const(0), 0),
                                          None, span), span),
                    ] + _copies(ahead, commit, kk, ki, span)
    rotated_step += [_Rebased(doubled, kk % const(2)).visit(s) for s in mmas]
    inner = dataclasses.replace(step, body=seq(rotated_step, span),
                                annotations={name: v for name, v in step.annotations.items()
                                             if name != FRAGMENT_LOOP})
    new_loop = dataclasses.replace(loop, body=inner)
    head = [Allocate(buffer, span) for buffer, _ in doubled.values()]
    ran = loop.start < end
    first = load(loop.start, const(0), 0)
    head += [wait, sync, first if isinstance(ran, Const) and ran.value else
             IfThenElse(ran, first, None, span)]
    return seq(head + [new_loop], span)


def _copy_steps(ki: int, n: int) -> list:
    """The k step each of the n copy statements is issued in: spread evenly over steps
    0 .. ki - 2. Not in the last step: its wait needs the group committed before it."""
    return [i * (ki - 2) // max(1, n - 1) for i in range(n)]


def _copies(ahead, commit, kk, ki, span):
    """The copies ahead, each under its own k step's condition and the loop's guard; the
    group is committed after the last of them."""
    copies = flat_stmts(ahead.then_body)
    steps = _copy_steps(ki, len(copies))
    out = []
    for step in sorted(set(steps)):
        here = [c for c, s in zip(copies, steps) if s == step]
        body = [IfThenElse(ahead.cond, seq(here, span), None, span)]
        if step == max(steps):
            body.append(commit)
        out.append(IfThenElse(kk == const(step), seq(body, span), None, span))
    return out


class _Rotate(Mutator):
    def visit_SeqStmt(self, s: SeqStmt):
        return seq([self.visit(x) for x in s.stmts], s.span)

    def visit_For(self, s: For):
        if s.annotations.get(SOFTWARE_PIPELINED) is not None:
            out = _rotated(s)
            if out is not None:
                return out
        return dataclasses.replace(s, body=self.visit(s.body))


def rotate_mma_loop(func, configs: dict | None = None):
    """Return func with its cp.async GEMM loops rotated (see the module docstring)."""
    if (configs or {}).get(PassConfigKey.TL_DISABLE_MMA_ROTATION):
        return func
    return dataclasses.replace(func, body=_Rotate().visit(func.body))
