"""How a warp-specialized kernel shares the register file between its roles.

On sm_90a, a kernel whose pipelined loop gets a TMA producer warpgroup may move registers from
the producer to the consumers (setmaxnreg) when the block's register file is what limits the
consumers. These directives, written anywhere in a T.Kernel body, say what the user wants
instead: no moving at all, or the counts each role takes. A kernel that is not warp-specialized
has one role, and they change nothing in it. T.annotate_min_blocks_per_sm asks for a number of
blocks an SM holds at once, which caps the registers of every thread.
"""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir import dtypes as dt
from ..ir.annotations import (CONSUMER_REGISTER_COUNT, MIN_BLOCKS_PER_SM,
                              PRODUCER_REGISTER_COUNT, REGISTER_REALLOC, SET_MAX_NREG_CALL)
from ..ir.expr import Call, const
from ..ir.stmt import Evaluate


def _set(what: str, key: str, value):
    b = bld.active(what)
    b.kernel.attrs[key] = value


def disable_warp_group_reg_alloc():
    """No setmaxnreg in this kernel: every role keeps the registers ptxas gave it."""
    _set("T.disable_warp_group_reg_alloc", REGISTER_REALLOC, False)


def no_set_max_nreg():
    """TileLang's other name for disable_warp_group_reg_alloc."""
    _set("T.no_set_max_nreg", REGISTER_REALLOC, False)


def _count(what: str, reg_count) -> int:
    if not isinstance(reg_count, int) or isinstance(reg_count, bool) or \
            not 24 <= reg_count <= 256 or reg_count % 8:
        raise TileError(f"{what}: setmaxnreg takes a register count that is a multiple of 8 in "
                        f"[24, 256], got {reg_count!r}", current_span())
    return reg_count


def annotate_producer_reg_dealloc(reg_count: int = 24):
    """The registers the producer warpgroup keeps (setmaxnreg.dec) when registers move."""
    what = "T.annotate_producer_reg_dealloc"
    _set(what, PRODUCER_REGISTER_COUNT, _count(what, reg_count))


def annotate_consumer_reg_alloc(reg_count: int = 240):
    """The registers each consumer thread takes (setmaxnreg.inc) when registers move."""
    what = "T.annotate_consumer_reg_alloc"
    _set(what, CONSUMER_REGISTER_COUNT, _count(what, reg_count))


def annotate_min_blocks_per_sm(n: int):
    """At least n blocks of this kernel resident on an SM: the second argument of
    __launch_bounds__, so ptxas keeps a thread's registers within the register file's n-th
    share of the block (spilling if it must). For memory-bound kernels whose registers, not
    their work, limit the loads an SM keeps in flight. A warp-specialized kernel then moves
    no registers between its roles (setmaxnreg assumes the block has the SM to itself)."""
    what = "T.annotate_min_blocks_per_sm"
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 32:
        raise TileError(f"{what}: takes a number of blocks in [1, 32], got {n!r}",
                        current_span())
    _set(what, MIN_BLOCKS_PER_SM, n)
    if n > 1:
        _set(what, REGISTER_REALLOC, False)


def set_max_nreg(reg_count: int, is_inc: int):
    """setmaxnreg in a warp-specialized kernel written by hand (sm_90a): the warpgroup running
    it raises (is_inc=1) or lowers (is_inc=0) its threads' registers to reg_count, as the first
    statement of its role's branch (`if tx < 128:` / `T.ws(g)`)."""
    what = "T.set_max_nreg"
    b = bld.active(what)
    count = _count(what, reg_count)
    if is_inc not in (0, 1, True, False):
        raise TileError(f"{what}: is_inc is 1 (raise the count) or 0 (lower it), got {is_inc!r}",
                        current_span())
    b.emit(Evaluate(Call(SET_MAX_NREG_CALL, (const(count), const(int(is_inc))), dt.handle,
                         current_span()), current_span()))
