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

from ....errors import warn_at
from ....ir import dtypes as dt
from ....ir.buffer import GLOBAL
from ....ir.expr import Call
from ....ir.visitor import walk
from ..intrinsics import (CP_ASYNC_CG_16, HINT_SUFFIX, L2_POLICY, NAMESPACE, TMA_LOAD, TMA_STORE,
                          TMA_STORE_ADD, lookup)

HINTED = ("evict_first", "evict_last")
# Where the policy goes among a hinted instruction's arguments (the headers' *_hint
# signatures); None: after the last.
POLICY_AT = {TMA_LOAD: 3, TMA_STORE: 2, TMA_STORE_ADD: 2, CP_ASYNC_CG_16: None}


def l2_policy(op) -> Call | None:
    """The createpolicy value a copy's hinted instructions take, or None (no policy asked for,
    or evict_normal: the plain instructions are that)."""
    policy = op.annotations.get("eviction_policy")
    if policy not in HINTED:
        return None
    return Call(L2_POLICY.format(policy=policy), (), dt.dtype("uint64"))


def _policy_at(name: str, plain_args: int) -> int:
    # the emulator names intrinsics without their namespace
    at = POLICY_AT[lookup(name if name.startswith(NAMESPACE) else NAMESPACE + name)]
    return plain_args if at is None else at


def hinted(op, name: str, args: tuple) -> tuple:
    """(name, args) of one of a copy's instructions: the plain ones, or, when the copy asks
    for an eviction policy, the `_hint` form with the policy in its place."""
    policy = l2_policy(op)
    if policy is None:
        return name, tuple(args)
    at = _policy_at(name, len(args))
    return name + HINT_SUFFIX, tuple(args[:at]) + (policy,) + tuple(args[at:])


def unhinted(name: str, args: list) -> tuple:
    """The plain (name, args) of a hinted instruction (the emulator models no cache)."""
    base = name[:-len(HINT_SUFFIX)]
    at = _policy_at(base, len(args) - 1)
    return base, list(args[:at]) + list(args[at + 1:])


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
    warn_at(op.span, message)
    return lowered
