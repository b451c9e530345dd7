"""Accesses through an index map: global tensors given a layout, and views of a buffer.

Two things TileLang writes make one buffer's elements reachable under other indices.

A view (T.reshape, or T.view keeping the dtype) names a buffer's storage in another shape:
element `idx` of the view is the element of the buffer at the same row-major offset. Each
access to a view is rewritten here to that element of the buffer, so the layers below see one
buffer, with its own layout inference, allocation and bounds.

A global tensor given a layout: TileLang lets a kernel store its elements in another order
than row-major:
`T.annotate_layout({dQ: T.Layout(dQ.shape, fn)})` puts element `idx` at the row-major offset
of `fn(idx)` in the layout's output box. Backward attention kernels use it so that the atomic
adds of a warp's accumulator land on consecutive addresses; the kernel that reads the tensor
back annotates the same layout, so the order never shows outside the two kernels.

Everything below the frontend (the interpreter, the passes, the lowering, the emulator) keeps
one meaning of an access: the tensor's own row-major index. So when a prim_func is built, each
access to such a tensor in the kernel that annotates it is rewritten here to the row-major
index of its layout offset, and a tile op over a tile of it becomes the element-wise loop it
stands for (a copy, an atomic add): that tile is no longer a rectangle of memory. Out-of-bounds
elements of a copy keep T.copy's meaning (read as zero, not written).
"""
from __future__ import annotations

import dataclasses
import math

from ..arith.bounds import bound_of
from ..errors import TileError
from ..ir.buffer import FRAGMENT, GLOBAL, LOCAL_VAR, Buffer, BufferRegion
from ..ir.expr import BufferLoad, Var, cast, const, convert, logical, select
from ..ir.linear import constant_value, decide, structural_key
from ..ir.stmt import Allocate, BufferStore, For, IfThenElse, Kernel, SeqStmt, seq, stmts_of
from ..ir.tileop import AnnotateLayout, Atomic, Copy, TileOp
from ..ir.visitor import Mutator, walk
from ..layout.layout import flatten_index, unflatten_index


def remap_accesses(body, views: dict, iteration_scalars: dict | None = None):
    """body (a prim_func's launches) with every access to a view (views: {view buffer: the
    buffer it views}) made to the buffer it views, every T.alloc_var of a T.Parallel body
    (iteration_scalars: {variable: (loop variables, extents)}) made an element per iteration
    of a fragment over the loop, and every kernel's annotated global tensors accessed through
    their layouts, those annotations gone."""
    maps = {v: _view_map(v, base) for v, base in views.items()}
    for var, (loop_vars, extents) in (iteration_scalars or {}).items():
        maps[var] = _iteration_map(var, loop_vars, extents)
    out = [_kernel(s, maps) if isinstance(s, Kernel) else s for s in stmts_of(body)]
    if all(a is b for a, b in zip(out, stmts_of(body))):
        return body
    return seq(out, getattr(body, "span", None))


def _view_map(view, base):
    """(base, index map) of a view: the base's element at the view index's row-major offset,
    worked out per group of dims whose sizes match (a view that splits a dim in two reads it at
    `i * n + j`, with no division), the whole index as one group otherwise."""
    groups = _dim_groups(tuple(view.shape), tuple(base.shape))

    def index(idx, span):
        out, v, b = [], 0, 0
        for nv, nb in groups:
            sub_view, sub_base = view.shape[v:v + nv], base.shape[b:b + nb]
            out += unflatten_index(flatten_index(idx[v:v + nv], sub_view), sub_base)
            v, b = v + nv, b + nb
        return tuple(out)
    return base, index


def _dim_groups(view: tuple, base: tuple) -> list:
    """[(view dims, base dims)] consecutive groups of equal size products."""
    groups, v, b = [], 0, 0
    while v < len(view) and b < len(base):
        nv, nb, pv, pb = 1, 1, view[v], base[b]
        while pv != pb:
            if pv < pb and v + nv < len(view):
                pv, nv = pv * view[v + nv], nv + 1
            elif pb < pv and b + nb < len(base):
                pb, nb = pb * base[b + nb], nb + 1
            else:
                return [(len(view), len(base))]
        groups.append((nv, nb))
        v, b = v + nv, b + nb
    if v != len(view) or b != len(base):
        return [(len(view), len(base))]
    return groups


def _iteration_map(var, loop_vars, extents):
    """(fragment, index map) of a scalar variable of a T.Parallel body: its element for the
    iteration that reads or writes it. Each iteration has its own, as in TileLang, and the
    fragment follows the loop's layout, so each lands in a register of the thread that runs
    the iteration."""
    frag = Buffer(var.name, tuple(int(constant_value(convert(e))) for e in extents), var.dtype,
                  FRAGMENT, var.span)
    return frag, lambda idx, span: tuple(loop_vars)


def _kernel(k: Kernel, maps: dict) -> Kernel:
    maps = dict(maps)
    layouts = {}
    for node in walk(k.body):
        if isinstance(node, AnnotateLayout):
            for buf, layout in node.layouts.items():
                if buf.scope == GLOBAL:
                    if buf in layouts and layouts[buf] is not layout:
                        raise TileError(f"T.annotate_layout: {buf.name} is given two layouts in "
                                        "one kernel", node.span)
                    layouts[buf] = layout
    for buf, layout in layouts.items():
        maps[buf] = (buf, _layout_map(buf, layout))
    if not maps:
        return k
    rewrite = _Rewrite(maps)
    body = _Flatten().visit(rewrite.visit(k.body))
    return dataclasses.replace(k, body=seq(rewrite.staging + [body], k.body.span))


class _Flatten(Mutator):
    """Statement lists inside statement lists (a tile op that became several) made one."""

    def visit_SeqStmt(self, node):
        node = self.generic_visit(node)
        if len(node.stmts) != 1 and not any(isinstance(s, SeqStmt) for s in node.stmts):
            return node
        return seq(node.stmts, node.span)


def _layout_map(buf, layout):
    """The index map of a global tensor's layout: the tensor's element at the row-major offset
    of the layout's output in its box."""
    box = []

    def index(idx, span):
        if not box:
            box.extend(box_of(buf, layout, span))
        return tuple(unflatten_index(flatten_index(layout.forward(idx), box), layout.shape))
    return index


def box_of(buf, layout, span) -> tuple:
    """The output box of a global tensor's layout, checked to hold exactly its elements (a
    tensor's storage is its elements, no more): from the outputs' bounds, without enumerating
    the index space (a tensor may have billions of elements)."""
    bounds = {id(v): (0, n - 1) for v, n in zip(layout.in_vars, layout.shape)}
    box = []
    for k, out in enumerate(layout.outputs):
        lo, hi = bound_of(out, bounds)
        if lo != 0 or hi == float("inf"):
            raise TileError(f"T.annotate_layout: output {k} of the layout of {buf.name} ranges over "
                            f"[{lo}, {hi}]; a global tensor's layout must map onto a box from 0",
                            span)
        box.append(int(hi) + 1)
    if math.prod(box) != math.prod(layout.shape):
        raise TileError(f"T.annotate_layout: the layout of {buf.name} maps its "
                        f"{math.prod(layout.shape)} elements into a box of "
                        f"{math.prod(box)} {tuple(box)}; a global tensor's layout must be a "
                        "permutation of its elements", span)
    return tuple(box)


class _Rewrite(Mutator):
    def __init__(self, maps: dict):
        self.layouts = maps   # buffer -> (the buffer accessed instead, index map)
        self.staging: list = []   # Allocates of the tiles views are read through

    def why(self, buf) -> str:
        """What buf is, saying why a tile of it is no box of memory (for messages)."""
        target = self.layouts[buf][0]
        if target is buf:
            return ("a global tensor whose T.annotate_layout places its elements out of "
                    "row-major order")
        return f"a view of {target.name} in another shape"

    # --- one element -------------------------------------------------------------------
    def _element(self, node, indices):
        target, index = self.layouts[node.buffer]
        return dataclasses.replace(node, buffer=target, indices=index(indices, node.span))

    def visit_Allocate(self, node):
        target = self.layouts.get(node.buffer, (None,))[0]
        if target is None or node.buffer.scope != LOCAL_VAR:
            return node
        return dataclasses.replace(node, buffer=target)   # a T.Parallel body's scalar

    def visit_BufferLoad(self, node):
        node = self.generic_visit(node)
        return self._element(node, node.indices) if node.buffer in self.layouts else node

    def visit_BufferStore(self, node):
        node = self.generic_visit(node)
        return self._element(node, node.indices) if node.buffer in self.layouts else node

    def visit_BufferRegion(self, node):
        node = self.generic_visit(node)
        if node.buffer not in self.layouts:
            return node
        if any(constant_value(e) != 1 for e in node.extents):
            raise TileError(f"a tile of {node.buffer.name}, {self.why(node.buffer)}, can only be "
                            "copied (T.copy) or added to (T.atomic_add); read or write it "
                            "element by element otherwise", node.span)
        target, index = self.layouts[node.buffer]
        starts = index(node.starts, node.span)
        return dataclasses.replace(node, buffer=target,
                                   ranges=tuple((s, convert(1)) for s in starts))

    # --- tile ops -----------------------------------------------------------------------
    def visit_AnnotateLayout(self, node):
        kept = {b: lay for b, lay in node.layouts.items() if b.scope != GLOBAL}
        if len(kept) == len(node.layouts):
            return node
        return dataclasses.replace(node, layouts=kept) if kept else SeqStmt(())

    def visit_Copy(self, node: Copy):
        if not self._tiled(node.src) and not self._tiled(node.dst):
            return self.generic_visit(node)
        return self.visit(_element_loop(node.src, node.dst, node.span, lambda d, v: BufferStore(
            node.dst.buffer, d, cast(v, node.dst.buffer.dtype, node.span), node.span)))

    def visit_Atomic(self, node: Atomic):
        if not self._tiled(node.dst):
            return self.generic_visit(node)
        if node.annotations.get("use_tma"):
            raise TileError(f"T.atomic_add(use_tma=True) adds a box of memory, but "
                            f"{node.dst.buffer.name} is {self.why(node.dst.buffer)}; leave use_tma "
                            "out", node.span)
        return self.visit(_element_loop(node.value, node.dst, node.span, lambda d, v: (
            dataclasses.replace(node, dst=_unit(node.dst.buffer, d),
                                value=cast(v, node.dst.buffer.dtype, node.span)))))

    def generic_visit(self, node):
        if isinstance(node, TileOp) and not isinstance(node, (Copy, Atomic, AnnotateLayout)):
            staged = self._staged(node)
            if staged is not None:
                return staged
        return super().generic_visit(node)

    def _staged(self, node):
        """A tile op that reads a tile of a view of a fragment or shared tile reads a copy of
        it (made element by element into a tile of its own) instead; one that writes such a
        tile, or a tile of a global tensor with a layout, is an error."""
        changes, before = {}, []
        for f in dataclasses.fields(node):
            r = getattr(node, f.name)
            if not self._tiled(r):
                continue
            target = self.layouts[r.buffer][0]
            if any(b is r.buffer for b in node.writes()) or target.scope == GLOBAL:
                raise TileError(f"T.{node.op_name} of a tile of {r.buffer.name}, "
                                f"{self.why(r.buffer)}: only T.copy and T.atomic_add "
                                f"{'write' if target is not r.buffer else 'take'} its tiles",
                                node.span)
            extents = [constant_value(e) for e in r.extents]
            if None in extents:
                raise TileError(f"T.{node.op_name} reads a tile of {r.buffer.name} whose "
                                "extents are not known when compiling", node.span)
            copy = Buffer(f"{r.buffer.name}_tile", tuple(extents), r.buffer.dtype,
                          target.scope, node.span)
            self.staging.append(Allocate(copy, node.span))
            before.append(_element_loop(r, copy.region(), node.span, lambda d, v: BufferStore(
                copy, d, v, node.span)))
            changes[f.name] = copy.region()
        if not changes:
            return None
        return seq([self.visit(s) for s in before] +
                   [super().generic_visit(dataclasses.replace(node, **changes))], node.span)

    def _tiled(self, r) -> bool:
        return (isinstance(r, BufferRegion) and r.buffer in self.layouts
                and any(constant_value(e) != 1 for e in r.extents))


def _regions(node) -> list:
    return [v for f in dataclasses.fields(node) for v in [getattr(node, f.name)]
            if isinstance(v, BufferRegion)]


def _unit(buf, indices) -> BufferRegion:
    return BufferRegion(buf, tuple((i, convert(1)) for i in indices))


def _element_loop(src: BufferRegion, dst: BufferRegion, span, make):
    """The T.Parallel nest a tile op over src -> dst stands for: make(dst index, src value)
    per element, with T.copy's bounds: a global source element out of bounds reads zero, a
    global destination element out of bounds is not written."""
    extents = [e for e in src.extents if constant_value(e) != 1]
    static = [constant_value(e) for e in extents]
    if None in static:
        raise TileError(f"a tile of {src.buffer.name} or {dst.buffer.name} (a view, or a global "
                        "tensor with a layout) is copied element by element, which needs "
                        "extents known when compiling", span)
    loop_vars = [Var(f"i{k}", const(0).dtype) for k in range(len(extents))]
    src_idx, dst_idx = _indices(src, loop_vars), _indices(dst, loop_vars)
    value = BufferLoad(src.buffer, src_idx, span)
    read_inside = _inside(src, src_idx, loop_vars, static)
    write_inside = _inside(dst, dst_idx, loop_vars, static)
    if read_inside is not None and not (write_inside is not None and structural_key(
            read_inside) == structural_key(write_inside)):
        value = select(read_inside, value, const(0, src.buffer.dtype), span)
    body = make(dst_idx, value)
    if write_inside is not None:
        body = IfThenElse(write_inside, body, None, span)
    for v, n in reversed(list(zip(loop_vars, static))):
        body = For(v, convert(0), convert(n), "parallel", body, {}, span)
    return body


def _indices(r: BufferRegion, loop_vars) -> tuple:
    it = iter(loop_vars)
    return tuple(s if constant_value(e) == 1 else s + next(it) for s, e in r.ranges)


def _inside(r: BufferRegion, idx, loop_vars, extents):
    """The condition that idx lies inside r's global buffer, where that is not known."""
    if r.buffer.scope != GLOBAL:
        return None
    cond = None
    bounds = {id(v): (0, n - 1) for v, n in zip(loop_vars, extents)}
    for i, size in zip(idx, r.buffer.shape):
        lo, hi = bound_of(i, bounds)
        n = constant_value(convert(size))
        if n is not None and 0 <= lo and hi < n:
            continue
        c = i < size
        if decide(c) is True:
            continue
        cond = c if cond is None else logical("and", cond, c)
    return cond
