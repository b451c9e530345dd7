"""overlap_wgmma: keep one wgmma batch in flight across the iterations of a consumer loop.

T.gemm lowers to a self-contained batch (fence, wgmma..., commit, wait_group 0, register fence),
so the tensor cores drain at the end of every iteration: the warpgroup waits for its last
instruction before the next iteration may issue. In a warp-specialized consumer loop whose
accumulator is touched by nothing but that batch (a GEMM main loop), the wait can trail by one
batch (the PTX ISA's wait_group N: "at most N pending"):

    for k:  wait full[s(k)]; fence; wgmma...; commit
            wait_group 1                     -- the batch of iteration k - 1 has retired
            if k > start: arrive empty[s(k - 1)]   -- so its operand tiles may be refilled
    wait_group 0; register fence             -- the last batch, before anything reads C
    if the loop ran: arrive empty[s(last)]   -- every version ends released, as before

The operand tiles of a batch still in flight are thus released one iteration later than before
(the ring is num_stages deep, so the producer still runs num_stages - 1 iterations ahead of the
batch being computed). Loops that read or write the accumulator between batches (attention's
softmax), write a shared operand tile themselves, issue more than one batch, or feed A from
registers (those registers are rewritten every iteration while the previous batch may still read
them) are left as they are. The register
fence stays after the final wait: it is what keeps the compiler from moving reads of C above it.

A loop operand_ahead rotated (it computes the next iteration's shared operand right after
issuing the batch) keeps its batch's wait, but below that work instead of above it.
"""
from __future__ import annotations

import dataclasses

from ....ir.expr import BufferLoad, Call, const
from ....ir.stmt import Evaluate, For, IfThenElse, SeqStmt, called, seq, stmts_of
from ....ir.visitor import Mutator, map_kernels, substitute, walk
from ....ir.annotations import OPERAND_AHEAD, PRODUCER_THREADS, WARP_SPECIALIZED
from ..intrinsics import (MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER, WGMMA_COMMIT_GROUP,
                          WGMMA_FENCE_REGISTERS, WGMMA_ISSUES, WGMMA_WAIT_GROUP, is_call_to)

WAIT_ALL = WGMMA_WAIT_GROUP.format(n=0)
WAIT_ONE = WGMMA_WAIT_GROUP.format(n=1)
RELEASES = (MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER)


def _call(s, *entries) -> Call | None:
    if isinstance(s, Evaluate) and isinstance(s.value, Call) and is_call_to(s.value.name, *entries):
        return s.value
    return None


def addressed_load(call: Call) -> BufferLoad | None:
    """The element `buf[i]` of a call's first argument `address_of(buf[i])`, or None."""
    arg = call.args[0] if call.args else None
    if isinstance(arg, Call) and arg.name == "address_of" and isinstance(arg.args[0], BufferLoad):
        return arg.args[0]
    return None


def addressed_buffer(call: Call):
    """The buffer of a call's first argument `address_of(buf[i])`, or None."""
    load = addressed_load(call)
    return None if load is None else load.buffer


def _only_wgmma_touches(body, acc) -> bool:
    """Nothing in the loop body but the wgmma instructions names the accumulator or the shared
    operand tiles they read (other than the register fence): no reads, no stores, no other calls
    taking their address. A shared operand written inside the loop (conv2d's im2col tile) would
    be overwritten while the batch still reading it is in flight."""
    allowed, operands = set(), {id(acc)}
    for node in walk(body):
        if isinstance(node, Call) and is_call_to(node.name, *WGMMA_ISSUES):
            if "_rs<" in node.name:
                return False  # A from registers: rewritten every iteration, see above
            allowed.update(id(n) for n in walk(node))
            # Its operands are the tiles it takes the address of (the buffers its indices
            # read, a persistent kernel's count of ring rounds, are not).
            operands.update(id(n.args[0].buffer) for n in walk(node)
                            if isinstance(n, Call) and n.name == "address_of" and
                            isinstance(n.args[0], BufferLoad))
        elif isinstance(node, Call) and is_call_to(node.name, WGMMA_FENCE_REGISTERS):
            allowed.update(id(n) for n in walk(node))
    return not any(id(getattr(n, "buffer", None)) in operands and id(n) not in allowed
                   for n in walk(body))


def _overlapped(loop: For):
    """(new loop, statements after it) for a qualifying consumer loop, else None."""
    body = list(stmts_of(loop.body))
    waits = [n for n in walk(loop.body) if isinstance(n, Call) and
             is_call_to(n.name, WGMMA_WAIT_GROUP)]
    commits = [n for n in walk(loop.body) if isinstance(n, Call) and
               n.name == WGMMA_COMMIT_GROUP.name]
    if len(waits) != 1 or len(commits) != 1 or waits[0].name != WAIT_ALL:
        return None
    at = next((i for i, s in enumerate(body) if called(s) == WAIT_ALL), None)
    if at is None or at + 2 >= len(body):
        return None
    fence = _call(body[at + 1], WGMMA_FENCE_REGISTERS)
    release = _call(body[-1], *RELEASES)
    if fence is None or release is None or addressed_buffer(fence) is None:
        return None
    acc = addressed_buffer(fence)
    if not _only_wgmma_touches(loop.body, acc):
        return None
    k = loop.var
    # The versions of iterations k - 1 and start + extent - 1: the release's own address at
    # those iterations (it counts a persistent kernel's earlier rounds too), each used only
    # where that iteration exists.
    address = release.args[0]
    previous = substitute(address, {id(k): k - const(1)})
    last = substitute(address, {id(k): loop.start + loop.extent - const(1)})
    span = body[at].span
    new_body = body[:at] + [Evaluate(Call(WAIT_ONE, (), waits[0].dtype), span)] + \
        body[at + 2:-1] + [IfThenElse(k > loop.start, Evaluate(
            Call(release.name, (previous,), release.dtype), body[-1].span), None, body[-1].span)]
    tail = [Evaluate(Call(WAIT_ALL, (), waits[0].dtype), span), body[at + 1],
            IfThenElse(loop.extent > const(0), Evaluate(Call(release.name, (last,),
                                                             release.dtype), body[-1].span),
                       None, body[-1].span)]
    return dataclasses.replace(loop, body=seq(new_body)), tail


def _waited_after_next_operand(loop: For):
    """A loop operand_ahead rotated: its batch's wait (and register fence) moved below the
    `if` that computes the next iteration's operand tile, so that work runs while the batch is
    in flight. The `if` must not name the accumulator the fence names (it never does as
    operand_ahead builds it; checked so that a later change cannot make this unsafe)."""
    body = list(stmts_of(loop.body))
    at = next((i for i, s in enumerate(body) if called(s) == WAIT_ALL), None)
    if at is None or at + 2 >= len(body) or not isinstance(body[at + 2], IfThenElse):
        return None
    fence = _call(body[at + 1], WGMMA_FENCE_REGISTERS)
    acc = addressed_buffer(fence) if fence is not None else None
    if acc is None or any(getattr(n, "buffer", None) is acc for n in walk(body[at + 2])):
        return None
    new_body = body[:at] + [body[at + 2], body[at], body[at + 1]] + body[at + 3:]
    return [dataclasses.replace(loop, body=seq(new_body))]


class ConsumerLoops(Mutator):
    """Replaces each warp-specialized consumer loop of a kernel by the statements rewrite(loop)
    returns (None: the loop stays)."""

    def __init__(self, rewrite):
        self.rewrite = rewrite

    def visit_SeqStmt(self, s: SeqStmt):
        out = []
        for x in s.stmts:
            if isinstance(x, For) and x.annotations.get(WARP_SPECIALIZED):
                done = self.rewrite(x)
                if done is not None:
                    out.extend(done)
                    continue
            out.append(self.visit(x))
        return seq(out, s.span)


def rewrite_consumer_loops(func, rewrite):
    """func with each warp-specialized consumer loop replaced by the statements rewrite(loop)
    returns (a loop it returns None for stays as it is)."""
    return map_kernels(func, lambda k: ConsumerLoops(rewrite).visit(k)
                       if k.attrs.get(PRODUCER_THREADS) else k)


def overlap_wgmma(func):
    def rewrite(loop):
        if loop.annotations.get(OPERAND_AHEAD):
            return _waited_after_next_operand(loop)
        done = _overlapped(loop)
        return None if done is None else [done[0]] + list(done[1])
    return rewrite_consumer_loops(func, rewrite)
