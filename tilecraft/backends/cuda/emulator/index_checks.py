"""Run-time checks of register-buffer indices that the compiler cannot bound.

A fragment becomes each thread's register array and a local buffer a flat one: an index
past the end of one dimension lands on another element's register while the flat index stays
inside the array, so the memory checks of the lowered kernel cannot see it. The compiler
refuses every index whose range it knows to leave its buffer (frontend/access_bounds.py);
what is left are indices computed from loaded data, `T.alloc_var` values or scalar
arguments. Before lowering, the emulator wraps each such index of a fragment or local buffer
in tc::checked_index(index, extent, "buffer", dim), which reports the threads whose index
leaves [0, extent) at the access's line and passes the index on unchanged. Only the
emulator's lowering does this: the CUDA source never contains the call.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ....ir.buffer import FRAGMENT, LOCAL
from ....ir.expr import BufferLoad, Call, Var, const
from ....ir.visitor import Mutator, walk
from .checker import Site
from ..intrinsics import CHECKED_INDEX as CHECKED_INDEX_INTRINSIC

CHECKED_INDEX = CHECKED_INDEX_INTRINSIC.name


def check_indices_at_run(func):
    """func with the register-buffer indices no compile-time bound covers checked."""
    return _Wrap().visit(func)


class _Wrap(Mutator):
    def __init__(self):
        self.bounded: set = set()  # ids of loop and block variables, whose ranges are known

    def visit_Kernel(self, k):
        self.bounded.update(id(v) for v in k.block_vars)
        return self.generic_visit(k)

    def visit_For(self, s):
        self.bounded.add(id(s.var))
        return self.generic_visit(s)

    def visit_BufferLoad(self, e):
        e = self.generic_visit(e)
        return self.wrapped(e)

    def visit_BufferStore(self, s):
        s = self.generic_visit(s)
        return self.wrapped(s)

    def wrapped(self, node):
        b = node.buffer
        if b.scope not in (FRAGMENT, LOCAL) or b.static_shape() is None:
            return node
        indices = tuple(self.checked(b, d, i) for d, i in enumerate(node.indices))
        if all(a is c for a, c in zip(indices, node.indices)):
            return node
        return dataclasses.replace(node, indices=indices)

    def checked(self, buffer, dim: int, index):
        unbounded = any(isinstance(n, BufferLoad) or (isinstance(n, Var) and
                                                      id(n) not in self.bounded)
                        for n in walk(index))
        if not unbounded:
            return index
        return Call(CHECKED_INDEX, (index, const(buffer.shape[dim], index.dtype), buffer.name,
                                    const(dim, index.dtype)), index.dtype, index.span)


def checked_index(m, index, extent, name: str, dim):
    """tc::checked_index for the executing lanes: report those whose index leaves
    [0, extent), and return the index."""
    idx = np.broadcast_to(np.asarray(index), (m.T,))
    lanes = m.lanes
    n = int(np.asarray(extent).reshape(-1)[0])
    bad = lanes[(idx[lanes] < 0) | (idx[lanes] >= n)]
    if bad.size:
        t = int(bad[0])
        site = Site("index", name, m.span)
        m.reports.add("out-of-bounds", f"{name}: thread {t} indexes dimension "
                      f"{int(np.asarray(dim).reshape(-1)[0])} at {int(idx[t])}, outside its "
                      f"extent {n}, at {site.where()}", name, (t,), (site,))
    return index
