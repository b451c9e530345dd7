"""Global tensors given a layout by T.annotate_layout: every access goes through it.

TileLang lets a kernel store a global tensor's elements in another order than row-major:
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
from ..ir.buffer import GLOBAL, BufferRegion
from ..ir.expr import BufferLoad, Var, cast, const, convert, logical, select
from ..ir.linear import constant_value, decide, structural_key
from ..ir.stmt import BufferStore, For, IfThenElse, Kernel, SeqStmt, seq, stmts_of
from ..ir.tileop import AnnotateLayout, Atomic, Copy, TileOp
from ..ir.visitor import Mutator, walk
from ..layout.layout import flatten_index, unflatten_index


def apply_global_layouts(body):
    """body (a prim_func's launches) with every kernel's annotated global tensors accessed
    through their layouts, and those annotations gone."""
    out = [_kernel(s) if isinstance(s, Kernel) else s for s in stmts_of(body)]
    if all(a is b for a, b in zip(out, stmts_of(body))):
        return body
    return seq(out, getattr(body, "span", None))


def _kernel(k: Kernel) -> Kernel:
    layouts = {}
    for node in walk(k.body):
        if isinstance(node, AnnotateLayout):
            for buf, layout in node.layouts.items():
                if buf.scope == GLOBAL:
                    if buf in layouts and layouts[buf] is not layout:
                        raise TileError(f"T.annotate_layout: {buf.name} is given two layouts in "
                                        "one kernel", node.span)
                    layouts[buf] = layout
    if not layouts:
        return k
    return dataclasses.replace(k, body=_Rewrite(layouts).visit(k.body))


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
    def __init__(self, layouts: dict):
        self.layouts = layouts
        self.boxes = {}

    # --- one element -------------------------------------------------------------------
    def index(self, buf, indices, span):
        layout = self.layouts[buf]
        if buf not in self.boxes:
            self.boxes[buf] = box_of(buf, layout, span)
        flat = flatten_index(layout.forward(indices), self.boxes[buf])
        return tuple(unflatten_index(flat, layout.shape))

    def visit_BufferLoad(self, node):
        node = self.generic_visit(node)
        if node.buffer not in self.layouts:
            return node
        return dataclasses.replace(node, indices=self.index(node.buffer, node.indices, node.span))

    def visit_BufferStore(self, node):
        node = self.generic_visit(node)
        if node.buffer not in self.layouts:
            return node
        return dataclasses.replace(node, indices=self.index(node.buffer, node.indices, node.span))

    def visit_BufferRegion(self, node):
        node = self.generic_visit(node)
        if node.buffer not in self.layouts:
            return node
        if any(constant_value(e) != 1 for e in node.extents):
            raise TileError(f"a tile of {node.buffer.name}, whose T.annotate_layout places its "
                            "elements out of row-major order, can only be copied (T.copy) or "
                            "added to (T.atomic_add); read or write it element by element "
                            "otherwise", node.span)
        starts = self.index(node.buffer, node.starts, node.span)
        return dataclasses.replace(node, ranges=tuple((s, convert(1)) for s in starts))

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
                            f"{node.dst.buffer.name}'s T.annotate_layout places its elements out "
                            "of row-major order; leave use_tma out", node.span)
        return self.visit(_element_loop(node.value, node.dst, node.span, lambda d, v: (
            dataclasses.replace(node, dst=_unit(node.dst.buffer, d),
                                value=cast(v, node.dst.buffer.dtype, node.span)))))

    def generic_visit(self, node):
        if isinstance(node, TileOp) and not isinstance(node, (Copy, Atomic, AnnotateLayout)):
            for r in _regions(node):
                if r.buffer in self.layouts and any(constant_value(e) != 1 for e in r.extents):
                    raise TileError(f"T.{node.op_name} of a tile of {r.buffer.name}: its "
                                    "T.annotate_layout places its elements out of row-major "
                                    "order, so only T.copy and T.atomic_add take its tiles",
                                    node.span)
        return super().generic_visit(node)

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
        raise TileError(f"a tile of {src.buffer.name} or {dst.buffer.name}, whose "
                        "T.annotate_layout places elements out of row-major order, is copied "
                        "element by element, which needs extents known when compiling", span)
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
