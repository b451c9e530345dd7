"""The keys passes leave on the IR for later passes, and the few statements every layer
recognises. One module, so that a pass that reads a mark need not import the pass that writes
it: the target-neutral passes and every backend depend on the IR, never on each other.

Loop annotations (For.annotations) and kernel attributes (Kernel.attrs):
- PERSISTENT_TILES (ir.stmt): a loop over the tiles of a persistent kernel's grid.
- FRAGMENT_LOOP: the k-step loop a mma gemm lowers to, whose fragment loads a later pass
  may rotate ahead of the math.
- ROTATED: a wgmma loop already rotated (the first k-step issued before the loop).
- WARPGROUP_FRAGMENTS: kernel attr, names of fragments that one warpgroup owns (a kernel split
  into warpgroup branches lays them out over that warpgroup's threads only).
- EPILOGUE_STAGING: kernel attr, names of shared tiles added to carry an accumulator to global
  memory (not the user's: defaults that look at the user's tiles skip them).
"""
from __future__ import annotations

from .expr import Call
from .stmt import PERSISTENT_TILES, Evaluate, IfThenElse, call_stmt
from .visitor import walk

__all__ = ["PERSISTENT_TILES", "FRAGMENT_LOOP", "ROTATED", "WARPGROUP_FRAGMENTS",
           "EPILOGUE_STAGING", "BLOCK_BARRIER", "WARPGROUP_INDEX", "sync_stmt", "is_sync",
           "is_warpgroup_branch"]

FRAGMENT_LOOP = "mma_fragments"
ROTATED = "wgmma_rotated"
WARPGROUP_FRAGMENTS = "warpgroup_fragments"
EPILOGUE_STAGING = "epilogue_staging"

BLOCK_BARRIER = "tc::syncthreads"       # every thread of the block waits for every other
WARPGROUP_INDEX = "tc::warpgroup_index"  # which 128-thread warpgroup runs this thread


def sync_stmt(span=None) -> Evaluate:
    """A block barrier statement."""
    return call_stmt(BLOCK_BARRIER, span=span)


def is_sync(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.name == BLOCK_BARRIER


def is_warpgroup_branch(s) -> bool:
    """An `if` on the warpgroup index: each warpgroup runs its own side."""
    return isinstance(s, IfThenElse) and any(
        isinstance(n, Call) and n.name == WARPGROUP_INDEX for n in walk(s.cond))
