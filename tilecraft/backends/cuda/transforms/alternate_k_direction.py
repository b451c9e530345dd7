"""alternate_k_direction: blocks of odd waves walk a GEMM's K loop from the top down.

A warp-specialized GEMM that fills the register file runs one block per SM, so its blocks run
in waves of as many blocks as the GPU has SMs, in launch order. Each block streams its rows of
A and columns of B through the K loop from k = 0 up, and so does every block of the next wave:
by then the slices of k = 0 have long left L2 (a wave of 128x256 tiles at 8192^3 touches about
68 MB, the H100's L2 holds 50). When the blocks of odd waves load their tiles in the opposite
order, a wave starts on the slices the wave before touched last, and the rows of A it shares
with that wave (the same panel of T.use_swizzle) come from L2 instead of HBM. On the H100,
128x256 tiles in panels of 16 at 8192^3 read less from HBM this way and, at the power cap,
where the clock follows the energy spent per FLOP, spent less energy per FLOP (bench/gemm.md,
bench/power.md).

Only the producer's copies change: the copy of iteration k loads tile n - 1 - k into k's stage
of the ring when tc::launch_wave_parity() (raster.h) is 1, so the consumers accumulate the same
products in the opposite order. That is the whole rewrite, and it is only valid where the
order cannot matter: the consumer loop does nothing but wait for its stage, accumulate with
T.gemm into accumulators nothing else in the loop touches, and release the stage, and the
producer loads every tile by a copy from global memory (anything else it would leave in
order). In a kernel with clusters both blocks of a pair must load the same k at once: the
parity counts waves of clusters there (raster.h), so the blocks of one cluster agree. Kernels
with persistent tiles, and those that may fit several blocks on an SM (no setmaxnreg: the wave
is then not one block per SM), keep their order. Turned off with tl.disable_k_alternation.
"""
from __future__ import annotations

import dataclasses

from ....ir.expr import Call, const, select
from ....ir.stmt import Evaluate, For, Kernel, called, seq, stmts_of
from ....ir.tileop import Copy, Gemm
from ....ir.visitor import Mutator, substitute, walk
from ....pass_config import PassConfigKey
from ....ir.annotations import PERSISTENT_BLOCKS, PRODUCER_THREADS, WARP_SPECIALIZED
from ..intrinsics import LAUNCH_WAVE_PARITY, MBARRIER_CALLS, SETMAXNREG_INC, is_call_to


def _order_free(loop: For) -> bool:
    """The consumer loop only waits, accumulates with gemms and releases: its result does not
    depend on the order in which its iterations see their tiles."""
    gemms = []
    for s in stmts_of(loop.body):
        if isinstance(s, Gemm) and not s.clear_accum:
            gemms.append(s)
        elif not (isinstance(s, Evaluate) and is_call_to(called(s), *MBARRIER_CALLS)):
            return False
    if not gemms:
        return False
    accumulators = {id(g.C.buffer) for g in gemms}
    # An accumulator one gemm feeds into another (as A or B) is read between iterations.
    return not any(id(g.A.buffer) in accumulators or id(g.B.buffer) in accumulators
                   for g in gemms)


def _one_block_per_sm(kernel: Kernel) -> bool:
    """Consumers that raise their registers with setmaxnreg take the register file: one block
    per SM, so a wave is one block per SM."""
    return any(isinstance(n, Call) and is_call_to(n.name, SETMAXNREG_INC)
               for n in walk(kernel.body))


def _producer_loops(kernel: Kernel, loop_vars: set) -> list:
    """The producer's loops over those variables (warp_specialize gives the producer's and the
    consumers' loop the same variable, start and extent)."""
    return [n for n in walk(kernel.body) if isinstance(n, For) and id(n.var) in loop_vars and
            not n.annotations.get(WARP_SPECIALIZED)]


def _loads_only_by_copies(loop: For) -> bool:
    """Every statement is a copy from global memory or a barrier call: nothing else loads a
    tile the rewrite would leave in order."""
    return all((isinstance(s, Copy) and s.src.buffer.scope == "global") or
               (isinstance(s, Evaluate) and called(s)) for s in stmts_of(loop.body))


def _reversed_copy(copy: Copy, loop: For) -> Copy:
    """The copy of iteration k, reading iteration n - 1 - k on odd waves."""
    k = loop.var
    odd = Call(LAUNCH_WAVE_PARITY.name, (), k.dtype) != const(0)
    reversed_k = select(odd, loop.start + loop.extent - const(1) - (k - loop.start), k)
    return dataclasses.replace(copy, src=substitute(copy.src, {id(k): reversed_k}))


class _ReverseProducerCopies(Mutator):
    def __init__(self, producers: list):
        self.producers = {id(loop) for loop in producers}

    def visit_For(self, s: For):
        if id(s) not in self.producers:
            return self.generic_visit(s)
        return dataclasses.replace(s, body=seq([
            _reversed_copy(x, s) if isinstance(x, Copy) else x for x in stmts_of(s.body)]))


def _rewrite(kernel: Kernel) -> Kernel:
    if not kernel.attrs.get(PRODUCER_THREADS) or \
            kernel.attrs.get(PERSISTENT_BLOCKS) is not None or \
            not _one_block_per_sm(kernel):
        return kernel
    loop_vars = {id(n.var) for n in walk(kernel.body)
                 if isinstance(n, For) and n.annotations.get(WARP_SPECIALIZED) and
                 _order_free(n)}
    producers = _producer_loops(kernel, loop_vars)
    if not producers or not all(_loads_only_by_copies(p) for p in producers):
        return kernel
    return dataclasses.replace(kernel, body=_ReverseProducerCopies(producers).visit(kernel.body))


def alternate_k_direction(func, configs: dict | None = None):
    if (configs or {}).get(PassConfigKey.TL_DISABLE_K_ALTERNATION):
        return func
    return dataclasses.replace(func, body=_Kernels().visit(func.body))


class _Kernels(Mutator):
    def visit_Kernel(self, k: Kernel):
        return _rewrite(k)
