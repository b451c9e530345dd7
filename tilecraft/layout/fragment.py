"""Fragment: how a block-level tile is spread over the registers of a block's threads.

A fragment buffer (`T.alloc_fragment`) is one logical tile, but on the GPU each thread holds a
few of its elements in a local array. A Fragment is the Layout from a logical index to the pair
(thread, local index). Some tiles are held by several threads at once (a row maximum every
thread of the row needs): `replicate` threads hold each element, told apart by a placeholder
variable `rep` in the thread expression.

Lowering needs the map in both directions, so a Fragment carries both as closed forms: forward
(logical index [, rep] -> thread, local) to rewrite accesses, and the generator (thread, local)
-> (logical index, rep) to emit the loop a thread runs over the elements it owns. `check()`
proves by enumeration that the two agree and that the distribution is sound.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.linear import simplify, structural_key
from ..ir.visitor import substitute
from ..ir.expr import Var, convert
from .layout import (Layout, LayoutError, as_exprs, check_shape, evaluate, flatten_index,
                     placeholders, substitute_all, unflatten_index)


class Fragment(Layout):
    """Logical index -> [thread, local].

    `Fragment(shape, lambda i, j[, rep]: (thread, local), replicate=1, threads=None,
    logical_fn=lambda t, l: [i, j[, rep]])`: `rep` is passed only when replicate > 1, and
    `logical_fn` (the inverse) returns the replica index last in that case. `threads` declares
    the thread count when some threads hold nothing; otherwise it is counted.
    """

    _FIELDS = ("replicate", "rep_var", "thread_offset", "declared_threads")

    def __init__(self, shape, forward_fn=None, *, thread_fn=None, local_fn=None, replicate=1,
                 threads=None, logical_fn=None):
        shape = check_shape(shape)
        in_vars = placeholders(len(shape))
        rep = Var("rep")
        args = in_vars + ([rep] if replicate > 1 else [])
        if forward_fn is not None:
            pair = forward_fn(*args)
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise LayoutError("a Fragment's forward function returns (thread, local)")
            thread, local = pair
        elif thread_fn is not None and local_fn is not None:
            thread, local = thread_fn(*args), local_fn(*in_vars)
        else:
            raise LayoutError("a Fragment needs forward_fn, or thread_fn and local_fn")
        self.replicate = int(replicate)
        self.rep_var = rep
        self.thread_offset = 0
        self.declared_threads = threads
        inv = None
        if logical_fn is not None:
            def inv(t, l):
                back = as_exprs(logical_fn(t, l))
                return back + [convert(0)] if replicate == 1 else back
        self._setup(shape, in_vars, [thread, local], inv)

    def _extra_vars(self):
        return [(self.rep_var, self.replicate)]

    def _output_bases(self):
        return [self.thread_offset, 0]

    @property
    def thread(self):
        return self.outputs[0]

    @property
    def local(self):
        return self.outputs[1]

    @property
    def num_threads(self) -> int:
        if self.declared_threads is not None:
            return self.declared_threads
        return int(self.table()[..., 0].max()) + 1 - self.thread_offset

    @property
    def locals_per_thread(self) -> int:
        return int(self.table()[..., 1].max()) + 1

    @property
    def output_shape(self):
        return (self.num_threads, self.locals_per_thread)

    # --- both directions ---------------------------------------------------
    def forward(self, indices, rep=None):
        """[thread, local] of a logical index; `rep` picks a replica (left symbolic if None)."""
        indices = list(indices)
        if len(indices) != self.ndim:
            raise LayoutError(f"fragment over {self.shape} indexed with {len(indices)} indices")
        rep = self.rep_var if rep is None else rep
        return substitute_all(self.outputs, self.in_vars + [self.rep_var], indices + [rep])

    def thread_of(self, indices, rep=None):
        return self.forward(indices, rep)[0]

    def local_of(self, indices):
        return self.forward(indices, 0)[1]

    def logical_of(self, thread, local) -> list:
        """The logical index that `thread` holds in local slot `local`."""
        return self.backward([thread, local])[:self.ndim]

    def rep_of(self, thread, local):
        """Which replica of its element (thread, local) is."""
        return self.backward([thread, local])[self.ndim]

    def inverse(self) -> Layout:
        """(thread - thread_offset, local) -> [*logical index, rep], when every slot is used."""
        self.check()
        if self.table().size // 2 != self.num_threads * self.locals_per_thread:
            raise LayoutError(f"some (thread, local) slots hold nothing, so the inverse is not a "
                              f"layout over the slot box: {self.describe()}")
        if self._inverse_fn is None:
            raise LayoutError(f"no closed-form inverse is known for {self.describe()}")
        off, n = self.thread_offset, self.ndim

        def forward_again(*x):
            t, l = self.forward(x[:n], x[n])
            return [t - off, l]
        return Layout(self.output_shape, lambda t, l: self._inverse_fn(t + off, l),
                      inverse_fn=forward_again)

    def check(self) -> bool:
        """Enumeration: threads and locals in range, local independent of the replica, each
        element held by exactly `replicate` distinct threads, each (thread, local) slot used at
        most once, and the inverse (when known) returns every element and replica."""
        tab = self.table()
        threads, locals_ = tab[..., 0], tab[..., 1]
        lo, nt = self.thread_offset, self.num_threads
        if threads.min() < lo or threads.max() >= lo + nt or locals_.min() < 0:
            raise LayoutError(f"threads must lie in [{lo}, {lo + nt}) and locals be >= 0: "
                              f"{self.describe()}")
        if np.any(locals_ != locals_[..., :1]):
            raise LayoutError(f"the local index depends on the replica: {self.describe()}")
        per_element = np.sort(threads.reshape(-1, self.replicate), axis=1)
        if np.any(np.diff(per_element, axis=1) == 0):
            raise LayoutError(f"an element is held twice by one thread, so fewer than "
                              f"{self.replicate} threads hold it: {self.describe()}")
        slots = (threads - lo) * self.locals_per_thread + locals_
        flat = slots.reshape(-1)
        unique, first, counts = np.unique(flat, return_index=True, return_counts=True)
        if len(unique) != len(flat):
            dup = unique[counts > 1][0]
            where = [np.unravel_index(k, slots.shape) for k in np.nonzero(flat == dup)[0][:2]]
            raise LayoutError(f"(thread, local) slot used twice, by elements {where[0][:-1]} and "
                              f"{where[1][:-1]}: {self.describe()}")
        if self._inverse_fn is not None:
            t, l = Var("t"), Var("l")
            back = as_exprs(self._inverse_fn(t, l))
            got = evaluate(back, {t: threads, l: locals_}, threads.shape)
            want = np.indices(threads.shape)
            for k in range(self.ndim + 1):
                if not np.array_equal(got[k], want[k]):
                    bad = tuple(int(x[0]) for x in np.nonzero(got[k] != want[k]))
                    what = "replica" if k == self.ndim else f"dim {k}"
                    raise LayoutError(f"inverse disagrees with forward at element {bad[:-1]} "
                                      f"replica {bad[-1]}: {what} comes back as "
                                      f"{int(got[k][bad])} ({self.describe()})")
        return True

    # --- algebra -----------------------------------------------------------
    def repeat(self, dim: int, factor: int, on_thread: bool = False) -> "Fragment":
        """Tile along logical dim `dim`: copy r goes to threads + r * num_threads (on_thread)
        or to locals + r * locals_per_thread (same threads, more registers)."""
        dim = dim % self.ndim
        if on_thread:
            return self._repeat(dim, factor, 0, self.num_threads,
                                declared_threads=self.num_threads * factor)
        return self._repeat(dim, factor, 1, self.locals_per_thread)

    def replicate_over(self, n: int) -> "Fragment":
        """n copies of the whole distribution on n consecutive thread ranges; the new replica
        index is old_rep + replicate * copy."""
        r, nt, off = self.replicate, self.num_threads, self.thread_offset
        rho = Var("rep")
        old_rep = rho % r if r > 1 else 0
        thread, local = substitute_all(self.outputs, [self.rep_var], [old_rep])
        thread = simplify(thread + (rho // r) * nt)
        inv = None
        if self._inverse_fn is not None:
            parent = self._inverse_fn

            def inv(t, l):
                copy = (t - off) // nt
                back = list(parent(t - copy * nt, l))
                back[-1] = back[-1] + copy * r
                return back
        return self._derive(self.shape, self.in_vars, [thread, local], inv, replicate=r * n,
                            rep_var=rho, declared_threads=nt * n)

    def bind_thread_range(self, offset: int) -> "Fragment":
        """The same distribution over threads [offset, offset + num_threads) (e.g. the consumer
        warps of a warp-specialized kernel)."""
        inv = None
        if self._inverse_fn is not None:
            parent = self._inverse_fn

            def inv(t, l):
                return parent(t - offset, l)
        return self._derive(self.shape, self.in_vars, [self.thread + offset, self.local], inv,
                            thread_offset=self.thread_offset + offset,
                            declared_threads=self.num_threads)

    def expand(self, leading_shape):
        raise LayoutError("expand() applies to plain layouts; use Fragment.repeat")

    def is_fully_replicated(self) -> bool:
        return self.replicate == self.num_threads and self.check()

    def describe(self) -> str:
        args = ", ".join(v.name for v in self.in_vars)
        rep = f", replicate {self.replicate}" if self.replicate > 1 else ""
        off = f" from {self.thread_offset}" if self.thread_offset else ""
        return (f"Fragment{self.shape} over {self.num_threads} threads{off}, "
                f"{self.locals_per_thread} locals/thread{rep}: ({args}) -> "
                f"thread {self.thread!r}, local {self.local!r}")


# ----------------------------------------------------------------------------
# families

def fully_replicated(shape, threads: int) -> Fragment:
    """Every thread holds the whole tile, in row-major local order."""
    shape = check_shape(shape)
    if threads == 1:
        return Fragment(shape, lambda *i: (0, flatten_index(i, shape)), threads=1,
                        logical_fn=lambda t, l: unflatten_index(l, shape))
    return Fragment(shape, lambda *a: (a[-1], flatten_index(a[:-1], shape)), replicate=threads,
                    threads=threads,
                    logical_fn=lambda t, l: unflatten_index(l, shape) + [t])


def make_partition(shape, threads: int, vector: int = 1) -> Fragment:
    """The default plan of an element-wise loop: flatten row-major, cut into runs of `vector`
    contiguous elements (one vectorized access each), deal the runs to threads round-robin.
    Element f goes to thread (f // vector) % threads, local
    (f // vector // threads) * vector + f % vector."""
    shape = check_shape(shape)
    total = math.prod(shape)
    if total % vector:
        raise LayoutError(f"a tile of {total} elements cannot be cut into runs of {vector}")

    def forward(*idx):
        flat = flatten_index(idx, shape)
        run = flat // vector
        return run % threads, (run // threads) * vector + flat % vector

    def logical(t, l):
        return unflatten_index(((l // vector) * threads + t) * vector + l % vector, shape)
    return Fragment(shape, forward, threads=threads, logical_fn=logical)


def mixed_radix(values):
    """values (distinct ints) as base + sum_k digit_k * stride_k, digit_k < count_k, digit 0
    fastest in sorted order; returns (base, [(stride, count), ...]) or None."""
    vals = sorted(int(v) for v in values)
    base, rel = vals[0], [v - vals[0] for v in vals]
    digits, size = [], 1
    while size < len(rel):
        stride, count = rel[size], 1
        while (count + 1) * size <= len(rel) and all(
                rel[count * size + m] == count * stride + rel[m] for m in range(size)):
            count += 1
        if count == 1:
            return None
        digits.append((stride, count))
        size *= count
    return (base, digits) if size == len(rel) else None


def digits_value(rank, base, digits):
    """The value with position `rank` in a mixed-radix set (inverse of digits_rank)."""
    out, size = convert(base), 1
    for k, (stride, count) in enumerate(digits):
        digit = rank // size if k == len(digits) - 1 else (rank // size) % count
        out = out + digit * stride
        size *= count
    return simplify(out)


def digits_rank(value, base, digits):
    """The position of `value` in a mixed-radix set."""
    out, size = convert(0), 1
    for stride, count in digits:
        out = out + (((value - base) // stride) % count) * size
        size *= count
    return simplify(out)


def _exact_radix(values):
    """mixed_radix(values) when its rank formula numbers the sorted values 0, 1, 2, ..."""
    found = mixed_radix(values)
    if found is not None:
        v = Var("v")
        ranks = evaluate([digits_rank(v, *found)], {v: np.asarray(sorted(values))}, (len(values),))
        if np.array_equal(ranks[0], np.arange(len(values))):
            return found
    return None


def _checked_radix(values, what):
    found = _exact_radix(values)
    if found is not None:
        return found
    raise LayoutError(f"reduce_fragment: the {what} {sorted(values)[:16]} do not form a regular "
                      f"grid, so no closed form describes the reduced fragment")


_CANONICAL = [Var(f"c{k}") for k in range(8)]
_REDUCED: dict = {}   # what reduce_fragment gave each fragment (by its index map) and dim


def _map_key(frag: Fragment) -> tuple | None:
    """A hashable key equal for fragments with the same index map (their placeholders put in
    canonical order), or None when the fragment is too unusual to key."""
    own = frag.in_vars + [frag.rep_var]
    if len(own) > len(_CANONICAL) or frag._inverse_fn is None:
        return None
    mapping = {id(v): c for v, c in zip(own, _CANONICAL)}
    return (type(frag), frag.shape, frag.replicate, frag.thread_offset, frag.declared_threads,
            structural_key(tuple(substitute(o, mapping) for o in frag.outputs)))


def reduce_fragment(frag: Fragment, dim: int) -> Fragment:
    """The fragment of a reduction's result: `dim` dropped, each remaining element held by every
    thread that held part of its slice (T.reduce combines the partial results across them).
    Needs, for every slice, the same set of first-holding positions along `dim` and the same
    local slot at all of them; the MMA accumulators satisfy this. Layout inference asks for the
    same reduction of equal fragments many times (each seed of its free phase makes them
    anew), so the answers are kept by the fragment's index map."""
    key = _map_key(frag)
    key = key and (key, dim % frag.ndim)
    if key is not None and key in _REDUCED:
        return _REDUCED[key]
    out = _reduce_fragment(frag, dim)
    if key is not None:
        if len(_REDUCED) > 4096:
            _REDUCED.clear()
        _REDUCED[key] = out
    return out


def _reduce_fragment(frag: Fragment, dim: int) -> Fragment:
    dim = dim % frag.ndim
    n = frag.shape[dim]
    tab = np.moveaxis(frag.table()[..., 0, :], dim, -2)  # rep 0: (..., n, 2)
    threads = tab[..., 0].reshape(-1, n)
    locals_ = tab[..., 1].reshape(-1, n)
    firsts = {tuple(sorted(np.unique(row, return_index=True)[1])) for row in threads}
    if len(firsts) != 1:
        raise LayoutError(f"reduce_fragment: slices along dim {dim} are spread over threads in "
                          f"different patterns: {frag.describe()}")
    held = list(firsts.pop())
    if np.any(locals_[:, held] != locals_[:, held[:1]]):
        raise LayoutError(f"reduce_fragment: the threads sharing a slice keep it in different "
                          f"local slots: {frag.describe()}")
    j_radix = _checked_radix(held, "positions along the reduced dim")
    l_radix = _checked_radix(np.unique(locals_[:, held[0]]).tolist(), "local slots")
    src_r, slice_r = frag.replicate, len(held)
    # The threads that hold something; a partition of a small tile over a larger block leaves
    # the last threads empty, and the result (whose replicas are the holders) must not count
    # them, or its inverse, wrapping around, would hand them elements they do not hold.
    held_threads = int(frag.table()[..., 0].max()) + 1 - frag.thread_offset

    new_shape = frag.shape[:dim] + frag.shape[dim + 1:] or (1,)
    new_vars = placeholders(len(frag.shape) - 1) if frag.ndim > 1 else []
    rho = Var("rep")
    src_rep = rho % src_r if src_r > 1 else 0
    j = digits_value(rho // src_r, *j_radix)
    old_index = new_vars[:dim] + [j] + new_vars[dim:]
    thread, _ = substitute_all(frag.outputs, frag.in_vars + [frag.rep_var], old_index + [src_rep])
    thread0, local0 = substitute_all(frag.outputs, frag.in_vars + [frag.rep_var],
                                     new_vars[:dim] + [held[0]] + new_vars[dim:] + [0])
    # Usually the replicas sit at fixed thread offsets from the first (the lanes of a quad,
    # the N-warps): thread(first) + offset(rep) is then the same map, written readably.
    deltas = threads[:, held] - threads[:, held[:1]]
    if src_r == 1 and np.all(deltas == deltas[:1]) and list(deltas[0]) == sorted(deltas[0]):
        t_radix = _exact_radix(deltas[0].tolist())
        if t_radix is not None:
            thread = simplify(thread0 + digits_value(rho, *t_radix))
    local = digits_rank(local0, *l_radix)
    if frag.ndim == 1:
        new_vars = placeholders(1)
    inv = None
    if frag.has_inverse:
        parent = frag._inverse_fn

        def inv(t, l):
            back = list(parent(t, digits_value(l, *l_radix)))
            rep = back[-1] + digits_rank(back[dim], *j_radix) * src_r
            kept = back[:dim] + back[dim + 1:frag.ndim] or [convert(0)]
            return kept + [rep]
    return frag._derive(new_shape, new_vars, [thread, local], inv, replicate=src_r * slice_r,
                        rep_var=rho, thread_offset=frag.thread_offset,
                        declared_threads=held_threads)


def _pow2_divisor(n: int, limit: int) -> int:
    d = 1
    while d * 2 <= limit and n % (d * 2) == 0:
        d *= 2
    return d


def grid_partition(shape, threads: int) -> Fragment:
    """A tile split over a grid of ti x tj threads (powers of two dividing the tile): element
    (i, j) of the tile viewed as rows x cols (leading dims flattened into rows) goes to thread
    (i % ti) * tj + j % tj, local (i // ti) * (cols // tj) + j // tj. The threads sharing a row
    or a column differ in fixed low bits, which is what a reduction along either dim needs."""
    shape = check_shape(shape)
    cols = shape[-1]
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    tj = _pow2_divisor(cols, threads)
    ti = _pow2_divisor(rows, threads // tj)
    per_row = cols // tj

    def forward(*idx):
        i = flatten_index(idx[:-1], shape[:-1]) if len(shape) > 1 else 0
        j = idx[-1]
        return (i % ti) * tj + j % tj, (i // ti) * per_row + j // tj

    def logical(t, l):
        i = (l // per_row) * ti + t // tj
        j = (l % per_row) * tj + t % tj
        lead = unflatten_index(i, shape[:-1]) if len(shape) > 1 else []
        return list(lead) + [j]
    return Fragment(shape, forward, threads=ti * tj, logical_fn=logical)


def slot_elements(frag: Fragment) -> np.ndarray:
    """held[t, l]: the row-major flat index of the element thread t (counted from the
    fragment's first thread) keeps in register l, or -1 where that slot holds nothing."""
    tab = frag.table()
    n = frag.locals_per_thread
    held = np.full((frag.num_threads, n), -1, np.int64)
    flat = np.broadcast_to(np.arange(math.prod(frag.shape)).reshape(frag.shape + (1,)),
                           tab.shape[:-1])
    held[tab[..., 0].reshape(-1) - frag.thread_offset, tab[..., 1].reshape(-1)] = flat.reshape(-1)
    return held


def vector_runs(frag: Fragment, limit: int) -> int:
    """The most elements (a power of two, at most `limit`) one vector access can move between
    a thread's registers and a row-major tile: every thread's registers v q .. v q + v - 1 hold
    elements v c .. v c + v - 1 of one row (or nothing at all), for every q."""
    held = slot_elements(frag)
    last = frag.shape[-1]
    v = 1
    while v * 2 <= limit and held.shape[1] % (v * 2) == 0 and last % (v * 2) == 0:
        w = v * 2
        runs = held.reshape(held.shape[0], -1, w)
        first = runs[..., :1]
        empty = np.all(runs == -1, axis=-1)
        whole = np.all(runs == first + np.arange(w), axis=-1) & (first[..., 0] % w == 0)
        if not np.all(empty | whole):
            break
        v = w
    return v
