"""infer_layouts: a layout for every fragment, shared tile and T.Parallel nest (paper alg. 1-2).

Three phases over a kernel's tile ops, as in the paper:
- strict: ops with hard requirements decide first (a gemm fixes its accumulator and register
  operand fragments and its shared operands' swizzles; T.annotate_layout pins what it names);
- common: to a fixed point, ops propagate what their neighbours decided (a T.Parallel nest takes
  the layout of a fragment it indexes with its own variables and passes it on to the fragments
  it indexes the same way, or a row/column projection of it to fragments indexed by a subset of
  its variables; a reduction derives its output from its input; fragment copies share layouts);
- free: whatever is left chooses for itself (a partition over the threads), then the common
  phase runs again so the choice propagates.
A buffer that two ops want laid out differently is an error naming both ops and their lines.
"""
from __future__ import annotations

import numpy as np

from ..errors import TileError
from ..ir.buffer import FRAGMENT, Buffer, is_shared
from ..ir.stmt import For, Kernel
from ..ir.tileop import AnnotateLayout, Copy, CumSum, Gemm, Reduce
from ..arith.linear import structural_key
from .. import layout as lay
from .parallel_nests import (allocated, fragment_accesses, is_identity_access, is_twin_copy,
                             nest_extents, nest_vars, on_warpgroup_fragments, projection,
                             tile_ops)
from ..ir.annotations import WARPGROUP_FRAGMENTS
from ..ir.visitor import map_kernels


class LayoutMap:
    def __init__(self, num_threads: int):
        self.num_threads = num_threads
        self.buffers: dict = {}
        self.origin: dict = {}  # id(buffer) -> the node that decided its layout
        self.loops: dict = {}
        self.gemm_warps: dict = {}

    def buffer(self, b: Buffer):
        try:
            return self.buffers[id(b)]
        except KeyError:
            raise TileError(f"internal: no layout was inferred for {b.name}", b.span) from None

    def loop(self, loop: For):
        return self.loops[id(loop)]

    def has(self, b: Buffer) -> bool:
        return id(b) in self.buffers

    def set(self, b: Buffer, layout, by) -> bool:
        """Record b's layout; False if it was already this layout, error if another."""
        old = self.buffers.get(id(b))
        if old is None:
            self.buffers[id(b)] = layout
            self.origin[id(b)] = by
            return True
        if same_layout(old, layout):
            return False
        first = self.origin[id(b)]
        raise TileError(
            f"layout conflict for {b.name}: {_describe(by)} needs a different layout than the "
            f"one {_describe(first)} chose", getattr(by, "span", None),
            notes=((f"{b.name}'s layout was chosen here", getattr(first, "span", None)),))


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
    if not (isinstance(a, lay.Fragment) and isinstance(b, lay.Fragment)) or \
            tuple(a.shape) != tuple(b.shape) or a.replicate != b.replicate or \
            a.num_threads != b.num_threads or a.thread_offset != b.thread_offset:
        return False
    return bool(np.array_equal(a.table()[..., 0], b.table()[..., 0]))


def _annotated(b: Buffer, given, threads: int):
    """A T.annotate_layout entry as a layout object (a callable is an index map)."""
    if isinstance(given, lay.Layout):
        return given
    if callable(given):
        shape = b.static_shape()
        return lay.Layout(shape, lambda *idx: list(_as_list(given(*idx))))
    raise TileError(f"T.annotate_layout: the layout given for {b.name} is neither a Layout, a "
                    "Fragment nor a function of the indices", b.span)


def _as_list(x):
    return x if isinstance(x, (list, tuple)) else [x]


def _tile_layout(b: Buffer, allow_pad: bool = True):
    """The swizzled layout of a shared tile (lay.make_swizzled_layout); a tile with leading
    dimensions (the versions of a pipelined tile) stores them one after another."""
    shape = b.static_shape()
    tile = lay.make_swizzled_layout(shape[-2], shape[-1], b.dtype.bits, allow_pad=allow_pad)
    if len(shape) > 2:
        alignment = tile.alignment
        tile = tile.expand(shape[:-2])
        tile.alignment = alignment
    return tile


def tma_tile_layout(b: Buffer):
    """The layout of a shared tile that TMA boxes fill or read."""
    return _tile_layout(b, allow_pad=False)


def _shared_default(b: Buffer, tma_tiles=()):
    """A 2-d tile nobody constrains is swizzled too: fragments written into it (an
    accumulator's epilogue) then spread over the banks, and 16-byte chunks stay whole for the
    vectorized copies in and out. A tile TMA fills takes the layout its boxes write."""
    shape = b.static_shape()
    if id(b) in tma_tiles:
        return tma_tile_layout(b)
    if len(shape) == 2 and b.dtype.bits >= 8:
        return _tile_layout(b)
    return lay.linear_layout(shape)


def _describe(node) -> str:
    if isinstance(node, For):
        return "this T.Parallel loop"
    name = getattr(node, "op_name", type(node).__name__)
    return f"T.{name}" if name != "tileop" else type(node).__name__


class _Inference:
    def __init__(self, kernel: Kernel, rules):
        self.kernel = kernel
        self.rules = rules
        self.T = kernel.num_threads
        self.map = LayoutMap(self.T)
        # Fragments of one warpgroup (seesaw_warpgroups) are laid out over its 128 threads.
        self.local = set(kernel.attrs.get(WARPGROUP_FRAGMENTS, ()))
        self.ops = tile_ops(kernel.body)
        self.fragments = [b for b in allocated(kernel.body) if b.scope == FRAGMENT]
        self.shared = [b for b in allocated(kernel.body) if is_shared(b.scope)]
        # Tiles TMA writes (warp_specialize) or reads (a TMA store): boxes know no padding.
        self.tma_tiles = set(kernel.attrs.get("tma_tiles", set())) | {
            id(op.src.buffer) for op in self.ops
            if isinstance(op, Copy) and op.annotations.get("instruction") == "tma"}

    def run(self) -> LayoutMap:
        for op in self.ops:
            self.strict(op)
        self.replicate_multi_read()
        self.common()
        reduced = {id(op.src.buffer) for op in self.ops if isinstance(op, Reduce)}
        for b in self.fragments:
            if not self.map.has(b):
                # A tile that is reduced gets thread groups along both dims; others the plain
                # round-robin partition.
                choose = lay.grid_partition if id(b) in reduced else lay.make_partition
                self.map.set(b, choose(b.static_shape(), self.buffer_threads(b)), None)
                self.common()
        for op in self.ops:
            if isinstance(op, For) and id(op) not in self.map.loops:
                self.map.loops[id(op)] = lay.make_partition(nest_extents(op), self.op_threads(op))
        for b in self.shared:
            if not self.map.has(b):
                self.map.set(b, _shared_default(b, self.tma_tiles), None)
        return self.map

    def buffer_threads(self, b: Buffer) -> int:
        return self.rules.warpgroup_threads if b.name in self.local else self.T

    def op_threads(self, op) -> int:
        """The threads an op runs on: one warpgroup's if it touches one's fragments."""
        return self.rules.warpgroup_threads if on_warpgroup_fragments(op, self.local) \
            else self.T

    # --- strict -------------------------------------------------------------------
    def strict(self, op):
        if isinstance(op, Gemm):
            m, n, k = op.dims()
            wm, wn, c_layout = self.rules.gemm_accumulator(op, m, n, self.op_threads(op))
            self.map.gemm_warps[id(op)] = (wm, wn)
            self.map.set(op.C.buffer, c_layout, op)
            if op.A.buffer.scope == FRAGMENT:
                self.map.set(op.A.buffer, lay.gemm_a_fragment(
                    m, k, wm, wn, dtype=op.A.buffer.dtype.name, transposed=op.transpose_A), op)
            for operand in (op.A, op.B):
                b = operand.buffer
                if is_shared(b.scope):
                    self.map.set(b, _tile_layout(b, self.rules.pads_gemm_operands(op) and
                                                 id(b) not in self.tma_tiles), op)
        elif isinstance(op, AnnotateLayout):
            for b, given in op.layouts.items():
                self.map.set(b, _annotated(b, given, self.T), op)

    def replicate_multi_read(self):
        """A fragment some loop reads at two positions per iteration (G[r] - G[i]) or at
        computed positions cannot follow that loop's layout: every thread keeps all of it."""
        for op in self.ops:
            if not isinstance(op, For):
                continue
            loop_vars = nest_vars(op)
            patterns: dict = {}
            for b, indices in fragment_accesses(op):
                patterns.setdefault(id(b), (b, set()))[1].add(structural_key(tuple(indices)))
                if projection(indices, loop_vars) is None and \
                        not is_identity_access(indices, loop_vars, b, op):
                    patterns[id(b)][1].add(("computed",))
            for b, keys in patterns.values():
                if len(keys) > 1 and not self.map.has(b):
                    self.map.set(b, lay.fully_replicated(b.static_shape(),
                                                         self.buffer_threads(b)), op)

    # --- common -------------------------------------------------------------------
    def common(self):
        changed = True
        while changed:
            changed = False
            for op in self.ops:
                changed |= self.propagate(op)

    def propagate(self, op) -> bool:
        m = self.map
        if isinstance(op, For):
            return self.propagate_loop(op)
        if isinstance(op, Reduce) and op.src.buffer.scope == FRAGMENT and m.has(op.src.buffer) \
                and op.dst.buffer.scope == FRAGMENT and not m.has(op.dst.buffer):
            reduced = lay.reduce_fragment(m.buffer(op.src.buffer), op.dim)
            shape = op.dst.buffer.static_shape()
            if tuple(reduced.shape) != shape and np.prod(reduced.shape) == np.prod(shape):
                reduced = reduced.reshape(shape)  # the result keeps the reduced dim, of 1
            return m.set(op.dst.buffer, reduced, op)
        if isinstance(op, (Copy, CumSum)):
            s, d = op.src.buffer, op.dst.buffer
            if s.scope == FRAGMENT and d.scope == FRAGMENT and s.static_shape() == d.static_shape():
                if is_twin_copy(op, self.local):
                    return self.propagate_twin(s, d, op)
                if m.has(s) and not m.has(d):
                    return m.set(d, m.buffer(s), op)
                if m.has(d) and not m.has(s):
                    return m.set(s, m.buffer(d), op)
        return False

    def propagate_twin(self, s: Buffer, d: Buffer, op) -> bool:
        """A copy between a fragment of one warpgroup and its block-wide twin: the twin holds
        each element in the same threads of every warpgroup (a copy of registers)."""
        m = self.map
        local, other = (s, d) if s.name in self.local else (d, s)
        if m.has(local) and not m.has(other):
            return m.set(other, m.buffer(local).replicate_over(self.T // self.rules.warpgroup_threads), op)
        return False

    def propagate_loop(self, loop: For) -> bool:
        m = self.map
        loop_vars = nest_vars(loop)
        accesses = fragment_accesses(loop)
        changed = False
        if id(loop) not in m.loops:
            for b, indices in accesses:
                if m.has(b) and is_identity_access(indices, loop_vars, b, loop):
                    m.loops[id(loop)] = m.buffer(b)
                    changed = True
                    break
            else:
                for b, indices in accesses:
                    kept = projection(indices, loop_vars)
                    layout = m.buffers.get(id(b))
                    if kept is not None and isinstance(layout, lay.Fragment) and \
                            not layout.is_fully_replicated():
                        # Run each iteration in the threads that hold the element it reads.
                        m.loops[id(loop)] = expand_fragment(layout, nest_extents(loop), kept)
                        changed = True
                        break
                else:
                    return False
        frag = m.loops[id(loop)]
        patterns: dict = {}
        for b, indices in accesses:
            patterns.setdefault(id(b), set()).add(structural_key(tuple(indices)))
        for b, indices in accesses:
            if m.has(b):
                continue
            if len(patterns[id(b)]) > 1 or (projection(indices, loop_vars) is None and
                                            not is_identity_access(indices, loop_vars, b, loop)):
                changed |= m.set(b, lay.fully_replicated(b.static_shape(),
                                                         self.buffer_threads(b)), loop)
                continue
            if is_identity_access(indices, loop_vars, b, loop):
                changed |= m.set(b, frag, loop)
                continue
            kept = projection(indices, loop_vars)
            if kept is not None:
                dropped = [d for d in range(len(loop_vars)) if d not in kept]
                derived = frag
                for d in reversed(dropped):
                    derived = lay.reduce_fragment(derived, d)
                if tuple(derived.shape) == tuple(b.static_shape()):
                    changed |= m.set(b, derived, loop)
        return changed


def expand_fragment(frag, extents, kept) -> "lay.Fragment":
    """A layout of the iteration space `extents` in which iteration idx runs in the threads
    holding element idx[kept] of frag, the other dimensions walked in its registers."""
    extents = tuple(extents)
    others = [d for d in range(len(extents)) if d not in kept]
    inner = 1
    for d in others:
        inner *= extents[d]
    rep = frag.replicate

    def forward(*args):
        idx = args[:len(extents)]
        sub = [idx[d] for d in kept]
        flat = 0
        for d in others:
            flat = flat * extents[d] + idx[d]
        thread = frag.thread_of(sub, args[-1] if rep > 1 else None)
        return thread, frag.local_of(sub) * inner + flat

    def logical(t, l):
        back = frag.logical_of(t, l // inner)
        out = [None] * len(extents)
        for pos, d in enumerate(kept):
            out[d] = back[pos]
        rest = l % inner
        for d in reversed(others):
            out[d] = rest % extents[d]
            rest = rest // extents[d]
        return out + ([frag.rep_of(t, l // inner)] if rep > 1 else [])

    return lay.Fragment(extents, forward, replicate=rep, threads=frag.num_threads,
                        logical_fn=logical)


def infer_layouts(node, rules):
    """Layouts of one Kernel (a LayoutMap), or of every kernel of a PrimFunc (the func, with
    each kernel's map in kernel.attrs["layouts"], which later passes use). `rules` are the
    backend's instruction facts (passes/instruction_rules.py)."""
    if isinstance(node, Kernel):
        return _Inference(node, rules).run()
    import dataclasses
    return map_kernels(node, lambda k: dataclasses.replace(
        k, attrs={**k.attrs, "layouts": _Inference(k, rules).run()}))

