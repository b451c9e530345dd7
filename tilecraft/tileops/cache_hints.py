"""T.copy(..., eviction_policy=...): the L2 eviction priority of a copy's global accesses.

"evict_first" marks the lines a copy brings into L2 as the first to go when L2 needs room (data
read once, which then does not push out what other blocks or kernels read again); "evict_last"
as the last; "evict_normal" (or no policy) leaves L2's own order. The priority rides on the
instructions that take one (PTX .L2::cache_hint with a createpolicy value, sm_80+): TMA loads
and stores and 16-byte cp.async copies. A copy lowered to other instructions (element-wise or
vector loads and stores, TMA multicast) runs without it, and the compiler warns, pointing at the
copy, rather than drop the hint unsaid. The interpreter and the emulator model no cache: the
policy changes no value.
"""
from __future__ import annotations

import warnings

from ..ir import dtypes as dt
from ..ir.buffer import GLOBAL
from ..ir.expr import Call
from ..ir.visitor import walk

HINTED = ("evict_first", "evict_last")
HINT_SUFFIX = "_hint"


def l2_policy(op) -> Call | None:
    """The createpolicy value a copy's hinted instructions take, or None (no policy asked for,
    or evict_normal: the plain instructions are that)."""
    policy = op.annotations.get("eviction_policy")
    return Call(f"tc::l2_{policy}", (), dt.dtype("uint64")) if policy in HINTED else None


def warn_unhinted(op, lowered):
    """`lowered` unchanged; a warning at the copy's line when it asked for an eviction policy
    and none of its instructions carries one."""
    touches_global = GLOBAL in (op.src.buffer.scope, op.dst.buffer.scope)
    if l2_policy(op) is None or not touches_global or any(
            isinstance(n, Call) and n.name.endswith(HINT_SUFFIX) for n in walk(lowered)):
        return lowered   # (a staged epilogue's register -> shared half has nothing to hint)
    message = (f"tilecraft: T.copy from {op.src.buffer.name} ({op.src.buffer.scope}) to "
               f"{op.dst.buffer.name} ({op.dst.buffer.scope}) runs without its "
               f"eviction_policy={op.annotations['eviction_policy']!r}: only TMA copies and "
               "16-byte cp.async copies carry an L2 cache hint")
    if op.span is None:
        warnings.warn(message, stacklevel=2)
    else:   # reported at the copy's own line, not at the compiler's
        warnings.warn_explicit(message, UserWarning, op.span.filename, op.span.line)
    return lowered
