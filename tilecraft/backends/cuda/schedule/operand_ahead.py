"""operand_ahead: compute a gemm's shared operand one iteration ahead of it (sm_90a).

A warp-specialized consumer loop that builds a shared tile W from the tiles the producer loads
and multiplies with it in the same iteration (a W4A16 GEMM: unpack and scale the weight tile
into W, then C += A W^T) lets its threads and the tensor cores take turns: the wgmma batch of
iteration k is waited for before the unpacking of iteration k + 1 starts, and the unpacking is
done before the batch that reads it is issued. With W in two versions the loop is rotated so
that the tile of iteration k + 1 is computed while the batch of iteration k is on the tensor
cores:

    if n > 0:  wait for P's tiles (s); P(s) into W[0]; release them
    for k in s .. s + n - 1:
        the waits for G's tiles (k)
        barrier              -- every thread's part of W[(k - s) % 2] is written, and every
                                warpgroup's batch k - 1 (the last reader of the other version)
                                has retired
        G(k) on W[(k - s) % 2]
        if k + 1 < s + n:  wait for P's tiles (k + 1); P(k + 1) into W[(k + 1 - s) % 2];
                           release them
        the releases of G's tiles

where P is the T.Parallel nest that writes W and G the gemm that reads it. The loop gets one
barrier per iteration instead of two; overlap_wgmma, after the lowering, moves G's wait for its
batch below P(k + 1) (the loop is marked OPERAND_AHEAD), which is where the overlap comes from.
The barrier is this pass's own and P(k + 1) is marked scheduled: insert_barriers compares
buffers, not their versions, and would otherwise separate G(k) from P(k + 1), which write and
read different versions.

A loop qualifies when its body is, besides mbarrier waits and releases, exactly P then G, in
the order [waits, P, releases, waits, G, releases]: P writes one shared tile and nothing else in
shared memory, G reads it as an operand, G touches none of P's other tiles, P reads nothing G
writes, and no other statement of the kernel names W. The second version of W must fit in
shared memory beside everything else (estimated from the tiles' shapes and their live ranges).
Turned off with tl.disable_operand_ahead.
"""
from __future__ import annotations

import dataclasses

from ....ir.buffer import Buffer, is_shared
from ....ir.expr import const
from ....ir.stmt import Allocate, For, IfThenElse, SeqStmt, called, seq, stmts_of
from ....ir.tileop import Gemm
from ....ir.visitor import Mutator, map_kernels, named_outside, substitute, walk
from ....ir.annotations import (OPERAND_AHEAD, PRODUCER_THREADS, SCHEDULED, WARP_SPECIALIZED,
                                sync_stmt)
from ....pass_config import PassConfigKey
from ....passes.infer_pipeline import reads_and_writes
from ....passes.plan_shared_memory import arena_bytes
from ..intrinsics import (MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER,
                          MBARRIER_WAIT_PARITY, is_call_to)
from ..rules import CUDA_RULES
from .pipeline_loops import Reallocate, Versioned

VERSIONS = 2
# Room the estimate leaves for what it does not see: each tile's alignment to its swizzle
# (up to 1 KB) and the planner's rounding.
ALIGNMENT_SLACK = 1024


def _is_wait(s) -> bool:
    return is_call_to(called(s), MBARRIER_WAIT_PARITY)


def _is_release(s) -> bool:
    return is_call_to(called(s), MBARRIER_ARRIVE_WARP, MBARRIER_ARRIVE_WARP_CLUSTER)


@dataclasses.dataclass
class _Plan:
    tile: Buffer          # W
    compute: list         # P's waits, P, P's releases
    head: list            # G's waits
    gemm: Gemm
    tail: list            # G's releases


def _plan(loop: For) -> _Plan | None:
    """How the consumer loop splits into P's group and G's, or None when it does not qualify."""
    body = list(stmts_of(loop.body))
    work = [i for i, s in enumerate(body) if not (_is_wait(s) or _is_release(s))]
    if len(work) != 2:
        return None
    p, g = work
    P, G = body[p], body[g]
    if not (isinstance(P, For) and P.kind == "parallel" and isinstance(G, Gemm) and
            G.instruction == "wgmma"):
        return None
    if not body[:p] or not all(_is_wait(s) for s in body[:p]) or \
            not all(_is_release(s) for s in body[g + 1:]):
        return None
    between = body[p + 1:g]
    releases = [s for s in between if _is_release(s)]
    waits = [s for s in between if _is_wait(s)]
    if between != releases + waits or not releases:
        return None
    p_reads, p_writes = reads_and_writes(P)
    shared_written = [b for b in p_writes.values() if is_shared(b.scope)]
    if len(shared_written) != 1:
        return None
    W = shared_written[0]
    if W.static_shape() is None or id(W) in p_reads or \
            W not in (G.A.buffer, G.B.buffer) or G.C.buffer is W:
        return None
    g_reads, g_writes = reads_and_writes(G)
    if p_reads.keys() & g_writes.keys():
        return None
    if (p_reads.keys() | p_writes.keys()) & (g_reads.keys() | g_writes.keys()) != {id(W)}:
        return None
    return _Plan(W, body[:p + 1] + releases, waits, G, body[g + 1:])


def _rotated(loop: For, plan: _Plan, versions: dict) -> list:
    """[prologue, loop] for a qualifying consumer loop."""
    k, start, span = loop.var, loop.start, loop.span

    def compute(iteration):
        moved = [substitute(s, {id(k): iteration}) for s in plan.compute]
        return [Versioned(versions, (iteration - start) % VERSIONS).visit(s) for s in moved]

    ahead = [dataclasses.replace(s, annotations={**s.annotations, SCHEDULED: True})
             if isinstance(s, For) else s for s in compute(k + const(1))]
    gemm = Versioned(versions, (k - start) % VERSIONS).visit(plan.gemm)
    body = plan.head + [sync_stmt(span), gemm,
                        IfThenElse(k + const(1) < start + loop.extent, seq(ahead, span), None,
                                   span)] + plan.tail
    prologue = IfThenElse(loop.extent > const(0), seq(compute(start), span), None, span)
    return [prologue, dataclasses.replace(loop, body=seq(body, span),
                                          annotations={**loop.annotations,
                                                       OPERAND_AHEAD: True})]


class _Rotate(Mutator):
    def __init__(self, plans: dict, versions: dict):
        self.plans = plans
        self.versions = versions

    def visit_SeqStmt(self, s: SeqStmt):
        out = []
        for x in s.stmts:
            plan = self.plans.get(id(x))
            if plan is not None:
                out.extend(_rotated(x, plan, self.versions))
            else:
                out.append(self.visit(x))
        return seq(out, s.span)


def _rewrite_kernel(k, limit: int | None):
    if not k.attrs.get(PRODUCER_THREADS):
        return k
    plans = {}
    for n in walk(k.body):
        if isinstance(n, For) and n.annotations.get(WARP_SPECIALIZED):
            plan = _plan(n)
            if plan is not None and \
                    not named_outside(k.body, plan.tile, *plan.compute, plan.gemm):
                plans[id(n)] = plan
    if not plans:
        return k
    versions = {id(p.tile): Buffer(p.tile.name, (VERSIONS,) + tuple(p.tile.shape), p.tile.dtype,
                                   p.tile.scope, p.tile.span) for p in plans.values()}
    body = Reallocate(versions).visit(_Rotate(plans, versions).visit(k.body))
    out = dataclasses.replace(k, body=body)
    if limit is not None:
        tiles = sum(1 for n in walk(body) if isinstance(n, Allocate) and
                    is_shared(n.buffer.scope))
        if arena_bytes(out, CUDA_RULES) + ALIGNMENT_SLACK * tiles > limit:
            return k
    return out


def operand_ahead(func, configs: dict | None = None, smem_limit: int | None = None):
    """func with each qualifying consumer loop computing its gemm's operand a step ahead."""
    if (configs or {}).get(PassConfigKey.TL_DISABLE_OPERAND_AHEAD):
        return func
    return map_kernels(func, lambda k: _rewrite_kernel(k, smem_limit))
