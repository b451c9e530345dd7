"""TileLang's reducer buffers: `r = T.alloc_reducer(shape, dtype, op="sum")` is a fragment that
T.Parallel iterations may accumulate into together, and `T.finalize_reducer(r)` makes its
values whole:

    for i, j in T.Parallel(M, N):
        r[i] += a[i, j] * x[j]          # iterations differing in j add into one element

Each iteration's term goes into an element of its own of a fragment over the whole nest, and
a T.reduce_<op> (clear=False) along the dimension the reducer's indices leave out folds them
into it after the nest: the reducer holds complete values from then on, so finalize has
nothing left to do. The store must read `r[idx] + v` (or T.max / T.min of r[idx] and v for
those ops) with idx the nest's variables less exactly one.
"""
from __future__ import annotations

import dataclasses

from ..errors import TileError
from ..ir.buffer import FRAGMENT, Buffer, BufferRegion
from ..ir.expr import Binary, BufferLoad, Cast, Var, cast, const
from ..ir.linear import structural_key
from ..ir.stmt import Allocate, BufferStore, For, Kernel, seq
from ..ir.tileop import Reduce
from ..ir.visitor import Mutator, walk
from ..passes.parallel_nests import nest_extents, nest_vars

REDUCERS = "reducers"     # frame attr while parsing: id(buffer) -> (buffer, op)
_BINARY = {"sum": "+", "max": "max", "min": "min"}


def rewrite_reducers(kernel: Kernel) -> Kernel:
    reducers = kernel.attrs.get(REDUCERS)
    if not reducers:
        return kernel
    attrs = {k: v for k, v in kernel.attrs.items() if k != REDUCERS}
    body = _Nests(reducers).visit(kernel.body)
    return dataclasses.replace(kernel, body=body, attrs=attrs)


class _Nests(Mutator):
    def __init__(self, reducers: dict):
        self.reducers = reducers

    def visit_For(self, s: For):
        if s.kind != "parallel":
            return self.generic_visit(s)
        stores = [n for n in walk(s) if isinstance(n, BufferStore) and
                  id(n.buffer) in self.reducers]
        if not stores:
            return s
        return _rewrite_nest(s, stores, self.reducers)


def _rewrite_nest(nest: For, stores: list, reducers: dict):
    loop_vars, extents = nest_vars(nest), nest_extents(nest)
    before, after, replaced = [], [], {}
    for store in stores:
        buf, op = reducers[id(store.buffer)]
        kept = _indices_as_vars(store, loop_vars)
        where = [_position(v, loop_vars) for v in kept]
        left = [k for k in range(len(loop_vars)) if k not in where and extents[k] != 1]
        if len(left) != 1:
            raise TileError(f"T.alloc_reducer: the accumulation into {buf.name} must leave out "
                            f"exactly one loop variable of its T.Parallel nest (the one summed "
                            f"over), but it leaves out {len(left)}", store.span)
        term = _term(store, op)
        partial = Buffer(f"{buf.name}_terms", extents, buf.dtype, FRAGMENT, store.span)
        before.append(Allocate(partial, store.span))
        replaced[id(store)] = BufferStore(partial, tuple(loop_vars), cast(term, buf.dtype),
                                          store.span)
        whole = BufferRegion(partial, tuple((const(0), const(e)) for e in extents))
        dst = BufferRegion(buf, tuple((const(0), const(n)) for n in buf.static_shape()))
        if where != sorted(where):
            raise TileError(f"T.alloc_reducer: index {buf.name} with the nest's variables in "
                            "the nest's order", store.span)
        after.append(Reduce(op, whole, dst, left[0], False, store.span))
    accumulated = {id(_own_load(st)) for st in stores}
    for n in walk(nest):
        if isinstance(n, BufferLoad) and id(n.buffer) in reducers and id(n) not in accumulated:
            raise TileError(f"T.alloc_reducer: {n.buffer.name} is read in the T.Parallel nest "
                            "that accumulates into it; its values are whole after the nest",
                            n.span)

    class _Swap(Mutator):
        def visit_BufferStore(self, st):
            return replaced.get(id(st), st)
    return seq(before + [_Swap().visit(nest)] + after, nest.span)


def _position(v, loop_vars: list) -> int:
    return next(k for k, u in enumerate(loop_vars) if u is v)


def _indices_as_vars(store: BufferStore, loop_vars: list) -> list:
    out = []
    for i in store.indices:
        if not (isinstance(i, Var) and any(i is v for v in loop_vars)) or \
                any(i is v for v in out):
            raise TileError(f"T.alloc_reducer: index {store.buffer.name} with distinct "
                            "variables of the T.Parallel nest accumulating into it",
                            store.span)
        out.append(i)
    return out


def _combined(store: BufferStore):
    """The value a reducer store writes, through the casts around it."""
    v = store.value
    while isinstance(v, Cast):
        v = v.value
    return v


def _own_load(store: BufferStore):
    """The load of the stored element in `r[idx] op v`, or None."""
    v = _combined(store)
    if isinstance(v, Binary):
        key = structural_key(tuple(store.indices))
        for side in (v.a, v.b):
            if isinstance(side, BufferLoad) and side.buffer is store.buffer and \
                    structural_key(tuple(side.indices)) == key:
                return side
    return None


def _term(store: BufferStore, op: str):
    """v of `r[idx] = r[idx] <op> v`."""
    v, own = _combined(store), _own_load(store)
    if not isinstance(v, Binary) or v.op != _BINARY[op] or own is None:
        form = {"sum": "r[i] += v", "max": "r[i] = T.max(r[i], v)",
                "min": "r[i] = T.min(r[i], v)"}[op]
        raise TileError(f"T.alloc_reducer: a {op} reducer ({store.buffer.name}) is accumulated "
                        f"as {form}", store.span)
    return v.b if v.a is own else v.a


__all__ = ["REDUCERS", "rewrite_reducers"]
