"""Layouts compared and derived: whether two layouts place every element alike, and the layouts
a T.Parallel nest and the fragments it reads give each other (a loop laid out after a fragment
it reads at [idx[kept] // divisors], and a fragment laid out after the loop that reads it at a
projection or coarsening of its iteration space). Layout inference uses them in its common
phase; the CUDA lowering compares layouts with them."""
from __future__ import annotations

import math

import numpy as np

from .fragment import Fragment, reduce_fragment


def same_layout(a, b) -> bool:
    """The two layouts map every index alike (the same object, or equal by enumeration)."""
    if a is b:
        return True
    if type(a) is not type(b) or tuple(a.shape) != tuple(b.shape):
        return False
    if getattr(a, "replicate", 1) != getattr(b, "replicate", 1):
        return False
    return a.is_equal(b)


def same_threads(a, b) -> bool:
    """Two fragments that keep every element (each replica) in the same thread, whatever
    register of it: a copy between them is a permutation of each thread's registers (an
    accumulator into a gemm operand whose warp holds several 16-row tiles numbers them in
    another order)."""
    if same_layout(a, b):
        return True
    if not (isinstance(a, Fragment) and isinstance(b, Fragment)) or \
            tuple(a.shape) != tuple(b.shape) or a.replicate != b.replicate or \
            a.num_threads != b.num_threads or a.thread_offset != b.thread_offset:
        return False
    return bool(np.array_equal(a.table()[..., 0], b.table()[..., 0]))


def expand_fragment(frag, extents, kept, divisors=None) -> Fragment:
    """A layout of the iteration space `extents` in which iteration idx runs in the threads
    holding element [idx[kept[k]] // divisors[k]] of frag, the other dimensions (and the
    remainders idx[kept[k]] % divisors[k]) walked in its registers."""
    extents = tuple(extents)
    divisors = list(divisors) if divisors is not None else [1] * len(kept)
    # The digits a thread walks for each element of frag, slowest first: whole dims that are
    # not kept, and the remainder of each coarsened dim, in loop order.
    digits = []
    for d in range(len(extents)):
        if d not in kept:
            digits.append((d, extents[d], False))
        elif divisors[kept.index(d)] > 1:
            digits.append((d, divisors[kept.index(d)], True))
    inner = 1
    for _, n, _ in digits:
        inner *= n
    rep = frag.replicate

    def forward(*args):
        idx = args[:len(extents)]
        sub = [idx[d] // c if c > 1 else idx[d] for d, c in zip(kept, divisors)]
        flat = 0
        for d, n, rem in digits:
            flat = flat * n + (idx[d] % n if rem else idx[d])
        thread = frag.thread_of(sub, args[-1] if rep > 1 else None)
        return thread, frag.local_of(sub) * inner + flat

    def logical(t, l):
        back = frag.logical_of(t, l // inner)
        out = [None] * len(extents)
        for pos, (d, c) in enumerate(zip(kept, divisors)):
            out[d] = back[pos] * c if c > 1 else back[pos]
        rest = l % inner
        for d, n, rem in reversed(digits):
            out[d] = out[d] + rest % n if rem else rest % n
            rest = rest // n
        return out + ([frag.rep_of(t, l // inner)] if rep > 1 else [])

    return Fragment(extents, forward, replicate=rep, threads=frag.num_threads,
                        logical_fn=logical)


def coarsens(amap, extents, shape) -> bool:
    """The access map reads a fragment of `shape` whole and nothing beyond it: each kept loop
    dim's extent is its divisor times the fragment's extent."""
    return len(amap) == len(shape) and all(
        extents[d] % c == 0 and extents[d] // c == n for (d, c), n in zip(amap, shape))


def project_loop(frag, extents, amap, shape):
    """The layout of a fragment the loop laid out as `frag` reads at `amap` (a projection or
    coarsening of its iteration space, its dims in any order): each element held by every
    thread whose iterations read it. None where the shapes do not fit."""
    if not coarsens(amap, extents, shape):
        return None
    split, quotient = [], {}
    for d, n in enumerate(extents):
        c = dict(amap).get(d, 1)
        quotient[d] = len(split)
        split += [n // c, c] if c > 1 else [n]
    view = frag.reshape(tuple(split)) if len(split) != len(extents) else frag
    kept = [quotient[d] for d, _ in amap]
    derived = view
    for d in reversed([d for d in range(len(split)) if d not in kept]):
        derived = reduce_fragment(derived, d)
    if kept != sorted(kept):   # read transposed: the fragment's dims in the access's order
        derived = derived.permute([sorted(kept).index(k) for k in kept])
    if tuple(derived.shape) != tuple(shape):
        if math.prod(derived.shape) != math.prod(shape):
            return None
        derived = derived.reshape(tuple(shape))
    return derived
