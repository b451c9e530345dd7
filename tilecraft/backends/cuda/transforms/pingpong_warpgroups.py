"""pingpong_warpgroups: consumer warpgroups take turns issuing their wgmma batches.

Each iteration of an attention loop rotated by rotate_wgmma_loop issues two wgmma batches (QK^T
of iteration k and PV of iteration k - 1) and then runs its softmax on the CUDA cores while
they compute. The consumer warpgroups are independent (each owns its rows), so nothing keeps
them from issuing at the same moment and then all running their softmax at once, with the
tensor cores idle. Taking turns makes one warpgroup's softmax overlap the other's matrix
products (FlashAttention-3's warpgroup ping-pong). Warpgroup w (of W) waits on named barrier
FIRST + w before it issues and, once both batches are committed, arrives on the next one's:

    consumers start:  if wg == W - 1: arrive(FIRST)      -- warpgroup 0 has the first turn
    loop:             for k: sync(FIRST + wg); issue the batches; arrive(FIRST + (wg + 1) % W);
                             the rest of the iteration

Each barrier counts the waiting and the handing-over warpgroup (256 threads). Every tile runs
the same iterations in all warpgroups, so each turn handed over is taken in the same tile
but the first one, which is handed over once per kernel; the last turn handed to warpgroup 0
is never taken (the block ends with it pending, which the hardware allows). The barrier
number is computed from the thread index, so the loop is not copied per warpgroup: two copies
of a loop this size running at once measured slower. Loops with a barrier of all
consumers in their body (warpgroups sharing rows) are left as they are, and so are kernels
with one consumer warpgroup. Turned off with tl.disable_warpgroup_pingpong. On the H100 it
measured level to slightly faster for attention (bench/mha_fwd.md).
"""
from __future__ import annotations

import dataclasses

from ....ir.expr import Call, const
from ....ir.stmt import For, IfThenElse, Kernel, call_stmt, called, seq, stmts_of
from ....ir.visitor import Mutator, map_kernels, walk
from ....pass_config import PassConfigKey
from ....ir.annotations import PRODUCER_THREADS, is_sync
from .overlap_wgmma import ConsumerLoops
from ..tileops.wgmma import WARPGROUP
from ..intrinsics import (IS_PRODUCER_THREAD, NAMED_BARRIER_ARRIVE, NAMED_BARRIER_SYNC,
                          SETMAXNREG_DEC, SETMAXNREG_INC, WGMMA_COMMIT_GROUP, is_call_to)
from ....ir.annotations import ROTATED

FIRST = 2   # named barriers 0 (__syncthreads) and 1 (all consumers) are taken
TURN = 2 * WARPGROUP  # threads per turn: the waiting and the handing-over warpgroup


def _issue_end(body: list) -> int | None:
    """Index of the statement that commits the second batch (the end of the issue)."""
    commits = [i for i, s in enumerate(body) if called(s) == WGMMA_COMMIT_GROUP.name]
    return commits[1] if len(commits) >= 2 else None


class _Kernel:
    def __init__(self, kernel: Kernel):
        self.warpgroups = kernel.num_threads // WARPGROUP
        self.wg = kernel.thread_var // const(WARPGROUP)
        self.taken = False

    def turns(self, loop: For):
        if not loop.annotations.get(ROTATED) or self.warpgroups < 2 or \
                any(is_sync(n) for n in walk(loop.body)):
            return None
        body = list(stmts_of(loop.body))
        end = _issue_end(body)
        if end is None:
            return None
        span = loop.span
        wait = call_stmt(NAMED_BARRIER_SYNC.name, const(FIRST) + self.wg, const(TURN),
                         span=span)
        hand = call_stmt(NAMED_BARRIER_ARRIVE.name,
                         const(FIRST) + (self.wg + const(1)) % const(self.warpgroups),
                         const(TURN), span=span)
        self.taken = True
        return [dataclasses.replace(loop, body=seq([wait] + body[:end + 1] + [hand] +
                                                   body[end + 1:], span))]

    def first_turn(self, span):
        return IfThenElse(self.wg == const(self.warpgroups - 1), call_stmt(
            NAMED_BARRIER_ARRIVE.name, const(FIRST), const(TURN), span=span), None, span)


class _Consumers(Mutator):
    """Prepends the first hand-over to the consumers' branch of the role split."""

    def __init__(self, state: _Kernel):
        self.state = state

    def visit_IfThenElse(self, s: IfThenElse):
        role = isinstance(s.cond, Call) and s.cond.name == IS_PRODUCER_THREAD.name
        if not role or s.else_body is None:
            return s
        body = list(stmts_of(s.else_body))
        # after the consumers' register raise (setmaxnreg), which opens their branch
        at = 1 if body and is_call_to(called(body[0]), SETMAXNREG_INC, SETMAXNREG_DEC) else 0
        return dataclasses.replace(s, else_body=seq(
            body[:at] + [self.state.first_turn(s.span)] + body[at:], s.span))


def pingpong_warpgroups(func, configs: dict | None = None):
    if (configs or {}).get(PassConfigKey.TL_DISABLE_WARPGROUP_PINGPONG):
        return func

    def alternate(k):
        if not (k.attrs.get(PRODUCER_THREADS) and k.thread_var is not None and
                k.num_threads % WARPGROUP == 0):
            return k
        state = _Kernel(k)
        out = ConsumerLoops(state.turns).visit(k)
        return _Consumers(state).visit(out) if state.taken else out
    return map_kernels(func, alternate)
