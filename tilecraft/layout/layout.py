"""Layout: a map from a tile's logical index space to physical indices, as IR expressions.

Lowering rewrites every access `buf[i, j]` to `buf_phys[*layout.forward([i, j])]`, so a layout
must be symbolic (expressions over placeholder variables, one per logical dim) rather than a
table. At the same time every question the compiler asks about a layout (is it a bijection,
what is its physical extent, are two layouts the same) has a finite answer, because tile shapes
are compile-time constants: we answer them by enumerating the whole index space with the numpy
expression evaluator instead of by symbolic reasoning, which keeps the algebra small and exact.

Inverses are closed forms supplied by whoever builds a layout (the swizzle and MMA families know
theirs); derived layouts (reshape, repeat, compose, ...) build their inverse from their parents'.
A layout with no known inverse says so instead of guessing one.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ..ir.linear import simplify
from ..errors import TileError
from ..ir.expr import (COMPARE_OPS, LOGIC_OPS, Binary, Cast, Const, Expr, Select, Unary, Var,
                       binary, cast, compare, convert, logical, select, unary)
from ..ir.visitor import Mutator
from ..interp.values import Evaluator


class LayoutError(TileError):
    """A layout that cannot do what was asked (not bijective, shapes that do not fit, ...)."""


# ----------------------------------------------------------------------------
# expression helpers shared by the layout modules

def placeholders(count: int, prefix: str = "i") -> list[Var]:
    return [Var(f"{prefix}{k}") for k in range(count)]


def as_exprs(values) -> list[Expr]:
    if isinstance(values, (Expr, int)):
        values = [values]
    return [convert(v) for v in values]


def substitute(e: Expr, mapping: dict) -> Expr:
    """e with variables replaced (mapping: id(var) -> expr), constants folded on the way."""
    if isinstance(e, Var):
        return convert(mapping.get(id(e), e))
    if isinstance(e, Const):
        return e
    if isinstance(e, Binary):
        a, b = substitute(e.a, mapping), substitute(e.b, mapping)
        if a is e.a and b is e.b:
            return e
        if e.op in COMPARE_OPS:
            return compare(e.op, a, b, e.span)
        if e.op in LOGIC_OPS:
            return logical(e.op, a, b, e.span)
        return binary(e.op, a, b, e.span)
    if isinstance(e, Unary):
        a = substitute(e.a, mapping)
        return e if a is e.a else unary(e.op, a, e.span)
    if isinstance(e, Cast):
        v = substitute(e.value, mapping)
        return e if v is e.value else cast(v, e.dtype, e.span)
    if isinstance(e, Select):
        parts = [substitute(x, mapping) for x in (e.cond, e.a, e.b)]
        return select(*parts, e.span)
    return _Substituter(mapping).visit(e)


class _Substituter(Mutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Var(self, v):
        return convert(self.mapping.get(id(v), v))


def substitute_all(exprs, variables, values) -> list[Expr]:
    mapping = {id(v): convert(x) for v, x in zip(variables, values)}
    return [simplify(substitute(e, mapping)) for e in exprs]


def evaluate(exprs, bindings: dict, shape) -> list[np.ndarray]:
    """Evaluate exprs with numpy arrays bound to variables (bindings: Var -> array), each result
    broadcast to `shape` as int64."""
    machine = SimpleNamespace(env={id(v): np.asarray(a) for v, a in bindings.items()})
    ev = Evaluator(machine)
    return [np.broadcast_to(np.asarray(ev.eval(e)).astype(np.int64), shape) for e in exprs]


def grid(variables, extents) -> dict:
    """Bindings placing variable k's range along axis k of a grid of the given extents."""
    out = {}
    for k, (v, n) in enumerate(zip(variables, extents)):
        axis = [1] * len(extents)
        axis[k] = n
        out[v] = np.arange(n, dtype=np.int64).reshape(axis)
    return out


def flatten_index(indices, shape) -> Expr:
    """Row-major flat offset of a multi-index."""
    flat = convert(0)
    for idx, n in zip(indices, shape):
        flat = flat * n + idx
    return simplify(flat)


def unflatten_index(flat, shape) -> list[Expr]:
    """Row-major multi-index of a flat offset (the first dim is left unbounded)."""
    out = []
    stride = 1
    for n in reversed(shape[1:]):
        out.append((flat // stride) % n if stride > 1 else flat % n)
        stride *= n
    out.append(flat // stride if stride > 1 else convert(flat))
    return [simplify(convert(x)) for x in reversed(out)]


def check_shape(shape) -> tuple[int, ...]:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise LayoutError(f"a layout needs a non-empty shape of positive integers, got {shape}")
    return shape


# ----------------------------------------------------------------------------

class Layout:
    """Logical index (one placeholder Var per dim of `shape`) -> list of physical index Exprs.

    `Layout((16, 64), lambda i, j: [i * 64 + j])`; `inverse_fn`, when given, maps physical
    indices back: `inverse_fn(*outputs) -> [input exprs]`, valid on the layout's range.
    """

    _FIELDS: tuple = ()  # what a subclass keeps besides the index map, copied by _derive

    def __init__(self, shape, forward_fn, inverse_fn=None):
        shape = check_shape(shape)
        in_vars = placeholders(len(shape))
        self._setup(shape, in_vars, as_exprs(forward_fn(*in_vars)), inverse_fn)

    def _setup(self, shape, in_vars, outputs, inverse_fn):
        self.shape = tuple(shape)
        self.in_vars = list(in_vars)
        self.outputs = [simplify(convert(o)) for o in outputs]
        self._inverse_fn = inverse_fn
        self._table = None

    def _derive(self, shape, in_vars, outputs, inverse_fn, **fields):
        """A layout of the same kind with new index space / outputs (subclasses add fields)."""
        kind = self._derived_kind()
        new = object.__new__(kind)
        for name in kind._FIELDS:
            setattr(new, name, fields.get(name, getattr(self, name)))
        new._setup(shape, in_vars, outputs, inverse_fn)
        return new

    def _derived_kind(self) -> type:
        return type(self)

    # --- what subclasses with extra enumeration variables (a Fragment's `rep`) override ------
    def _extra_vars(self) -> list:
        return []

    def _output_bases(self) -> list[int]:
        return [0] * len(self.outputs)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def has_inverse(self) -> bool:
        return self._inverse_fn is not None

    # --- evaluation --------------------------------------------------------
    def forward(self, indices) -> list[Expr]:
        """The physical indices of logical index `indices` (exprs or ints), simplified."""
        indices = list(indices)
        if len(indices) != self.ndim:
            raise LayoutError(f"layout over {self.shape} indexed with {len(indices)} indices")
        return substitute_all(self.outputs, self.in_vars, indices)

    def backward(self, outputs) -> list[Expr]:
        """The logical index stored at physical index `outputs` (closed-form inverse)."""
        if self._inverse_fn is None:
            raise LayoutError(f"no closed-form inverse is known for {self.describe()}")
        return [simplify(convert(e)) for e in self._inverse_fn(*[convert(o) for o in outputs])]

    def table(self) -> np.ndarray:
        """Every output for every input point: int64 array of shape (*shape, *extras, n_out)."""
        if self._table is None:
            extras = self._extra_vars()
            variables = self.in_vars + [v for v, _ in extras]
            extents = list(self.shape) + [n for _, n in extras]
            values = evaluate(self.outputs, grid(variables, extents), tuple(extents))
            self._table = np.stack(values, axis=-1)
            self._table.setflags(write=False)
        return self._table

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Physical extent per output dim: max + 1 over the whole index space."""
        points = self.table().reshape(-1, len(self.outputs))
        return tuple(int(x) + 1 for x in points.max(axis=0))

    def _flat_points(self):
        bases = np.array(self._output_bases(), dtype=np.int64)
        return self.table().reshape(-1, len(self.outputs)) - bases

    def is_injective(self) -> bool:
        points = self._flat_points()
        return len(np.unique(points, axis=0)) == len(points)

    def is_bijective(self) -> bool:
        """Injective, and its range is the whole output box."""
        points = self._flat_points()
        extents = self.output_shape
        inside = np.all((points >= 0) & (points < np.array(extents)), axis=1).all()
        return bool(inside and self.is_injective() and len(points) == math.prod(extents))

    def check(self) -> bool:
        """The inverse (if known) returns every input point from its output; raises if not."""
        if self._inverse_fn is None:
            return True
        points = self.table().reshape(-1, len(self.outputs))
        out_vars = placeholders(len(self.outputs), "o")
        back = self._inverse_fn(*out_vars)
        got = evaluate(as_exprs(back), dict(zip(out_vars, points.T)), (len(points),))
        want = np.indices(self.shape).reshape(self.ndim, -1)
        for k in range(self.ndim):
            bad = np.nonzero(got[k] != want[k])[0]
            if len(bad):
                p = tuple(int(w[bad[0]]) for w in want)
                raise LayoutError(f"inverse disagrees with forward at {p}: dim {k} comes back as "
                                  f"{int(got[k][bad[0]])} ({self.describe()})")
        return True

    def is_equal(self, other: "Layout") -> bool:
        """Same kind, same index space, same outputs at every point (by enumeration)."""
        return (type(self) is type(other) and self.shape == other.shape
                and len(self.outputs) == len(other.outputs)
                and [n for _, n in self._extra_vars()] == [n for _, n in other._extra_vars()]
                and np.array_equal(self.table(), other.table()))

    # --- algebra -----------------------------------------------------------
    def inverse(self) -> "Layout":
        """The inverse layout (output box -> logical index); needs a bijection and a closed form."""
        if self._extra_vars():
            raise LayoutError("inverse() of a layout with replication is not a Layout; "
                              "use backward()")
        if not self.is_bijective():
            raise LayoutError(f"only a bijective layout has an inverse: {self.describe()}")
        if self._inverse_fn is None:
            raise LayoutError(f"no closed-form inverse is known for {self.describe()}")
        return Layout(self.output_shape, self._inverse_fn, inverse_fn=lambda *i: self.forward(i))

    def compose(self, other: "Layout") -> "Layout":
        """Apply self, then other: x -> other(self(x)). The result has other's kind (composing
        an index remap with a Fragment gives a Fragment over the remapped space)."""
        if self._extra_vars():
            raise LayoutError("only a plain Layout can be composed before another layout")
        if len(self.outputs) != other.ndim:
            raise LayoutError(f"cannot compose: {len(self.outputs)} outputs feed a layout over "
                              f"{other.ndim} dims")
        if any(e > n for e, n in zip(self.output_shape, other.shape)):
            raise LayoutError(f"cannot compose: outputs reach {self.output_shape}, beyond the "
                              f"next layout's shape {other.shape}")
        outputs = substitute_all(other.outputs, other.in_vars, self.outputs)
        inv = None
        if self._inverse_fn is not None and other._inverse_fn is not None:
            def inv(*o):
                back = list(other._inverse_fn(*o))
                return list(self._inverse_fn(*back[:other.ndim])) + back[other.ndim:]
        return other._derive(self.shape, self.in_vars, outputs, inv)

    def reshape(self, new_shape) -> "Layout":
        """The same storage seen through another logical shape (row-major flatten/unflatten)."""
        new_shape = check_shape(new_shape)
        if math.prod(new_shape) != math.prod(self.shape):
            raise LayoutError(f"cannot reshape a layout over {self.shape} to {new_shape}")
        new_vars = placeholders(len(new_shape))
        old_index = unflatten_index(flatten_index(new_vars, new_shape), self.shape)
        outputs = substitute_all(self.outputs, self.in_vars, old_index)
        inv = None
        if self._inverse_fn is not None:
            n, parent = self.ndim, self._inverse_fn

            def inv(*o):
                back = list(parent(*o))
                flat = flatten_index(back[:n], self.shape)
                return unflatten_index(flat, new_shape) + back[n:]
        return self._derive(new_shape, new_vars, outputs, inv)

    def permute(self, order) -> "Layout":
        """Reorder the logical dims: new dim k is old dim order[k] (transpose = (1, 0))."""
        order = list(order)
        if sorted(order) != list(range(self.ndim)):
            raise LayoutError(f"{order} is not a permutation of {self.ndim} dims")
        new_shape = tuple(self.shape[k] for k in order)
        new_vars = placeholders(self.ndim)
        old_index = [None] * self.ndim
        for k, old in enumerate(order):
            old_index[old] = new_vars[k]
        outputs = substitute_all(self.outputs, self.in_vars, old_index)
        inv = None
        if self._inverse_fn is not None:
            n, parent = self.ndim, self._inverse_fn

            def inv(*o):
                back = list(parent(*o))
                return [back[k] for k in order] + back[n:]
        return self._derive(new_shape, new_vars, outputs, inv)

    def repeat(self, dim: int, factor: int, out_dim: int | None = None) -> "Layout":
        """Tile the layout `factor` times along input dim `dim`: copy r of the index space maps
        like copy 0 with output `out_dim` offset by r * (its extent). out_dim defaults to `dim`
        when inputs and outputs have the same rank, else to 0 (the outermost output)."""
        dim = dim % self.ndim
        if out_dim is None:
            out_dim = dim if len(self.outputs) == self.ndim else 0
        return self._repeat(dim, factor, out_dim, self.output_shape[out_dim])

    def _repeat(self, dim, factor, out_dim, extent, **fields):
        n = self.shape[dim]
        new_shape = self.shape[:dim] + (n * factor,) + self.shape[dim + 1:]
        new_vars = placeholders(self.ndim)
        copy = new_vars[dim] // n
        old_index = list(new_vars)
        old_index[dim] = new_vars[dim] % n
        outputs = substitute_all(self.outputs, self.in_vars, old_index)
        outputs[out_dim] = simplify(outputs[out_dim] + copy * extent)
        inv = None
        if self._inverse_fn is not None:
            parent, base = self._inverse_fn, self._output_bases()[out_dim]

            def inv(*o):
                o = list(o)
                r = (o[out_dim] - base) // extent
                o[out_dim] = o[out_dim] - r * extent
                back = list(parent(*o))
                back[dim] = back[dim] + r * n
                return back
        return self._derive(new_shape, new_vars, outputs, inv, **fields)

    def expand(self, leading_shape) -> "Layout":
        """Prepend dims that pass through unchanged: (l..., x...) -> (l..., self(x)...)."""
        if self._extra_vars():
            raise LayoutError("expand() applies to plain layouts; repeat a Fragment instead")
        leading = check_shape(leading_shape)
        lead_vars = placeholders(len(leading), "e")
        outputs = list(lead_vars) + self.outputs
        inv = None
        if self._inverse_fn is not None:
            k, parent = len(leading), self._inverse_fn

            def inv(*o):
                return list(o[:k]) + list(parent(*o[k:]))
        return self._derive(leading + self.shape, lead_vars + self.in_vars, outputs, inv)

    # --- printing ------------------------------------------------------------
    def describe(self) -> str:
        args = ", ".join(v.name for v in self.in_vars)
        outs = ", ".join(repr(o) for o in self.outputs)
        return f"{type(self).__name__}{self.shape}: ({args}) -> [{outs}]"

    def __repr__(self) -> str:
        return self.describe()


def linear_layout(shape) -> Layout:
    """Row-major flat offset (the identity storage order)."""
    shape = check_shape(shape)
    return Layout(shape, lambda *idx: [flatten_index(idx, shape)],
                  inverse_fn=lambda flat: unflatten_index(flat, shape))


def identity_layout(shape) -> Layout:
    """Each logical index is its own physical index (multi-dim)."""
    return Layout(shape, lambda *idx: list(idx), inverse_fn=lambda *o: list(o))
