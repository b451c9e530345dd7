"""The inverse of a fragment layout whose index bits are a permutation of its slot bits.

A Fragment maps a logical index (and replica) to (thread, local); lowering needs the way back,
(thread, local) -> logical index, as expressions of the thread index. TileLang's user-written
fragments give only the forward map. The layouts the tensor cores and warps make are, with
power-of-two extents, bit permutations: each bit of each logical index is one bit of the thread
or of the local index (i -> thread 4 * (i % 8), local i // 8, ...). Such an inverse is found by
enumeration (which bit of the slot equals each bit of the index at every point) and written as
sums of `(slot // 2^p) % 2^r * 2^b` runs; the caller checks it against the forward map.
"""
from __future__ import annotations

import numpy as np

from ..ir.expr import convert


def _bits(n: int) -> int | None:
    """log2(n) for a power of two, else None."""
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def bit_permutation_inverse(table: np.ndarray, extents: list, thread_offset: int):
    """`inverse(thread, local) -> [index per extent]` or None. table: the (thread, local) of
    every point of the index space of `extents` (the logical dims, then the replica), shape
    (*extents, 2)."""
    widths = [_bits(n) for n in extents]
    if None in widths:
        return None
    slots = [table[..., 0] - thread_offset, table[..., 1]]
    if min(int(s.min()) for s in slots) < 0:
        return None
    grid = np.indices(extents)
    runs = []   # per dim: [(source 0 thread / 1 local, slot bit, index bit)]
    for k, width in enumerate(widths):
        found = []
        for b in range(width):
            want = (grid[k] >> b) & 1
            hit = next(((s, p) for s in (0, 1) for p in range(int(slots[s].max()).bit_length())
                        if np.array_equal((slots[s] >> p) & 1, want)), None)
            if hit is None:
                return None
            found.append((hit[0], hit[1], b))
        runs.append(_merged(found))

    def inverse(thread, local):
        sources = (convert(thread) - thread_offset if thread_offset else convert(thread),
                   convert(local))
        out = []
        for dim in runs:
            e = convert(0)
            for s, p, b, r in dim:
                part = sources[s] // (1 << p) if p else sources[s]
                e = e + (part % (1 << r)) * (1 << b)
            out.append(e)
        return out
    return inverse


def _merged(bits: list) -> list:
    """(source, slot bit, index bit) triples as runs (source, slot bit, index bit, length)."""
    out = []
    for s, p, b in bits:
        if out and out[-1][0] == s and out[-1][1] + out[-1][3] == p and \
                out[-1][2] + out[-1][3] == b:
            last = out.pop()
            out.append((s, last[1], last[2], last[3] + 1))
        else:
            out.append((s, p, b, 1))
    return out
