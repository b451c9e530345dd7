"""infer_layouts: a layout for every fragment, shared tile and T.Parallel nest (paper alg. 1-2).

Three phases over a kernel's tile ops, as in the paper:
- strict: ops with hard requirements decide first (a gemm fixes its accumulator and register
  operand fragments and its shared operands' swizzles; T.annotate_layout pins what it names);
- common: to a fixed point, ops propagate what their neighbours decided (a T.Parallel nest takes
  the layout of a fragment it indexes with its own variables, or with coarsened ones
  (x[i, j // 2]: iterations (i, 2m) and (i, 2m + 1) run where element (i, m) is), and passes it
  on to the fragments it indexes the same way, or a row/column projection or coarsening of it to
  the others, each element held by every thread whose iterations read it (a fragment indexed
  with the variables of a T.serial loop inside the nest as well, `x[i, k]`, `x[t * 8 + e]`,
  follows the nest with those dims walked in the thread's registers); a reduction derives
  its output from its input; fragment copies share layouts);
- free (paper appendix E, phase III): the fragments left are grouped by the ops that tie them
  together; each group is seeded in turn from each fragment that decides the others with each
  candidate partition over the threads (runs of v consecutive row elements dealt round robin,
  for every power of two v dividing a row), the common phase carries the seed through, and the
  outcome of least cost is kept: register bytes per thread, plus the memory instructions,
  cache lines and bytes of its global accesses, plus the shuffle steps of its reductions.
  Seeds that meet a conflict are discarded.
A buffer that two ops want laid out differently is an error naming both ops and their lines. A
fragment that a loop reads where no partition follows (at two positions per iteration, or at
computed ones) is kept whole in every thread, with a warning at the read.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import TileError, warn_at
from ..ir.buffer import FRAGMENT, LOCAL, Buffer, is_shared
from ..ir.expr import BufferLoad
from ..ir.stmt import BufferStore, For, Kernel
from ..ir.visitor import walk
from ..ir.tileop import AnnotateLayout, Copy, CumSum, Gemm, Reduce
from ..ir.linear import structural_key
from .. import layout as lay
from ..layout.derive import coarsens, expand_fragment, project_loop, same_layout
from .free_layout_cost import free_cost
from .parallel_nests import (access_map, allocated, fragment_accesses, fragments_of,
                             inner_loop_access, is_identity_access, is_twin_copy, merged_access,
                             nest_extents, nest_vars, on_warpgroup_fragments, outer_pinned,
                             store_run, tile_ops, walked_in_registers)
from ..ir.annotations import (INSTRUCTION, LAYOUTS, LOOP_LAYOUT, MANUAL_WARPGROUPS, TMA_TILES,
                              WARPGROUP_FRAGMENTS, is_warpgroup_branch)
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
    """The swizzled layout of a shared tile (lay.swizzled_layout); a tile with leading
    dimensions (the versions of a pipelined tile) stores them one after another. A 1-d tile
    (a chunk's row of decays filled by TMA) is stored in order."""
    shape = b.static_shape()
    if len(shape) < 2:
        return lay.linear_layout(shape)
    tile = lay.swizzled_layout(shape[-2], shape[-1], b.dtype.bits, allow_pad=allow_pad)
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
        # The ops of T.ws regions (manual_warpgroups) run on their warpgroup's threads.
        regions = [b for b in walk(kernel.body) if is_warpgroup_branch(b)] \
            if kernel.attrs.get(MANUAL_WARPGROUPS) else []
        self.in_regions = {id(n) for b in regions for n in walk(b.then_body)}
        self.ops = tile_ops(kernel.body)
        self.fragments = [b for b in allocated(kernel.body) if b.scope == FRAGMENT]
        self.shared = [b for b in allocated(kernel.body) if is_shared(b.scope)]
        # Tiles TMA writes (warp_specialize) or reads (a TMA store): boxes know no padding.
        self.tma_tiles = set(kernel.attrs.get(TMA_TILES, set())) | {
            id(op.src.buffer) for op in self.ops
            if isinstance(op, Copy) and op.annotations.get(INSTRUCTION) == "tma"}

    def run(self) -> LayoutMap:
        for op in self.ops:
            self.strict(op)
        self.replicate_multi_read()
        self.common()
        for component in self.free_components():
            self.choose_free(component)
        for op in self.ops:
            if isinstance(op, For) and id(op) not in self.map.loops:
                if _writes_thread_local(op):
                    # A T.alloc_local is one copy per thread: every thread must fill all of
                    # its copy, as T.copy and T.fill into one do (tileops/per_thread.py). Its
                    # stores to shared or global memory stay with the first replica.
                    self.map.loops[id(op)] = lay.fully_replicated(nest_extents(op),
                                                                  self.op_threads(op))
                    continue
                self.map.loops[id(op)] = lay.make_partition(nest_extents(op), self.op_threads(op),
                                                            store_run(op))
        for b in self.shared:
            if not self.map.has(b):
                self.map.set(b, _shared_default(b, self.tma_tiles), None)
        self.warn_whole()
        return self.map

    def warn_whole(self):
        """A fragment of several elements that a loop reads where no partition of it over the
        threads can follow (two positions per iteration, or computed ones) is kept whole in
        every thread: say so, at the read, since it costs registers in every thread and a copy
        of the whole tile into each of them."""
        for b in self.fragments:
            layout = self.map.buffers.get(id(b))
            loop = self.map.origin.get(id(b))
            if not isinstance(loop, For) or not isinstance(layout, lay.Fragment) or \
                    layout.replicate < 2 or layout.replicate != layout.num_threads or \
                    math.prod(b.static_shape()) == 1:
                continue
            reads = [n for n in walk(loop) if isinstance(n, (BufferLoad, BufferStore))
                     and n.buffer is b]
            if reads and all(inner_loop_access(loop, n.indices, b.static_shape()) is not None
                             for n in reads):
                continue    # each iteration's inner loop reads all of it: a broadcast
            shown = []
            for n in reads:
                text = f"{b.name}[{', '.join(repr(i) for i in n.indices)}]"
                if text not in shown:
                    shown.append(text)
            why = (f"at {len(shown)} positions in each iteration ({', '.join(shown)})"
                   if len(shown) > 1 else f"as {shown[0]}" if shown else "")
            span = next((n.span for n in reads if n.span is not None), loop.span)
            warn_at(span, f"tilecraft: no partition over the threads exists for fragment "
                          f"{b.name} ({math.prod(b.static_shape())} elements): this T.Parallel "
                          f"loop reads it {why}, which no layout of it across threads "
                          f"follows, so each of the {layout.num_threads} threads keeps all of "
                          f"it; index it with the loop's own variables (x[i], x[i // c], or "
                          f"x[t * 8 + e] with e a T.serial loop's inside it) or read it from a "
                          f"shared tile")

    # --- free -----------------------------------------------------------------------
    def free_components(self) -> list:
        """The fragments no op constrains, grouped by the ops that tie their layouts together
        (a T.Parallel nest, a copy or cumsum between fragments, a reduction), in allocation
        order."""
        free = [b for b in self.fragments if not self.map.has(b)]
        parent = {id(b): id(b) for b in free}

        def root(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x
        for op in self.ops:
            touched = [id(b) for b in _fragments_tied(op) if id(b) in parent]
            for x in touched[1:]:
                parent[root(x)] = root(touched[0])
        groups: dict = {}
        for b in free:
            groups.setdefault(root(id(b)), []).append(b)
        return list(groups.values())

    def default_layout(self, b: Buffer):
        """What a fragment nothing else decides gets: thread groups along both dims for a tile
        that is reduced, the plain round-robin partition otherwise."""
        reduced = any(isinstance(op, Reduce) and op.src.buffer is b for op in self.ops)
        choose = lay.grid_partition if reduced else lay.make_partition
        return choose(b.static_shape(), self.buffer_threads(b))

    def candidates(self, b: Buffer) -> list:
        """Partitions of fragment b over the block's threads to try as the seed of its
        component: the default, then runs of v consecutive row elements dealt round robin for
        every power of two v that divides a row (short runs for coalescing, long ones keep a
        row in few threads for a reduction)."""
        shape, threads = b.static_shape(), self.buffer_threads(b)
        out = [self.default_layout(b)]
        v = 1
        while shape[-1] % v == 0:
            out.append(lay.make_partition(shape, threads, v))
            v *= 2
        unique = []
        for c in out:
            if not any(same_layout(c, u) for u in unique):
                unique.append(c)
        return unique

    def roots(self, component: list) -> list:
        """The fragments whose layout decides the others': those some T.Parallel nest reads
        or writes at every iteration's own element (an identity or coarsening access keeping
        all loop dims), or that no nest touches; not a reduction's result, which decides
        nothing upstream. All of them if that leaves none."""
        results = {id(op.dst.buffer) for op in self.ops if isinstance(op, Reduce)}
        full, partial = set(), set()
        for op in self.ops:
            if isinstance(op, For):
                loop_vars = nest_vars(op)
                for b, indices in fragment_accesses(op):
                    amap = access_map(indices, loop_vars)
                    whole = amap is not None and len(amap) == len(loop_vars)
                    (full if whole else partial).add(id(b))
        out = [b for b in component if id(b) not in results and
               (id(b) in full or id(b) not in partial)]
        return out or component

    def snapshot(self):
        m = self.map
        return dict(m.buffers), dict(m.origin), dict(m.loops)

    def restore(self, state):
        m = self.map
        m.buffers, m.origin, m.loops = (dict(x) for x in state)

    def choose_free(self, component: list):
        """Paper appendix E, phase III: seed the component from each of its roots in turn
        with each candidate partition, let the common phase carry the choice through the ops,
        give what is still open its default, and keep the feasible outcome of least cost
        (free_cost). A seed whose propagation meets a conflict is discarded, and so is one that
        an earlier seed's outcome already gave its fragment (the same outcome again)."""
        start = self.snapshot()
        best = None
        outcomes = []   # what earlier seeds gave each fragment: a seed met there is skipped
        for b in self.roots(component):
            for layout in self.candidates(b):
                if any(same_layout(o.get(id(b)), layout) for o in outcomes
                       if o.get(id(b)) is not None):
                    continue
                self.restore(start)
                try:
                    self.map.set(b, layout, None)
                    self.common()
                    for other in component:
                        if not self.map.has(other):
                            self.map.set(other, self.default_layout(other), None)
                            self.common()
                    cost = free_cost(self, component)
                except TileError:
                    continue
                outcomes.append(dict(self.map.buffers))
                if cost is not None and (best is None or cost < best[0]):
                    best = (cost, self.snapshot())
        self.restore(start)
        if best is not None:
            self.restore(best[1])
            return
        # No seed works out: the plain defaults, whose conflict (if any) is then reported.
        for b in component:
            if not self.map.has(b):
                self.map.set(b, self.default_layout(b), None)
                self.common()

    def buffer_threads(self, b: Buffer) -> int:
        return self.rules.warpgroup_threads if b.name in self.local else self.T

    def op_threads(self, op) -> int:
        """The threads an op runs on: one warpgroup's if it touches one's fragments or lies in
        a T.ws region."""
        return self.rules.warpgroup_threads if on_warpgroup_fragments(op, self.local) or \
            id(op) in self.in_regions else self.T

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
        elif isinstance(op, For) and op.annotations.get(LOOP_LAYOUT) is not None:
            given = op.annotations[LOOP_LAYOUT]
            threads = self.op_threads(op)
            if given.num_threads > threads:
                raise TileError(f"T.Parallel: its loop_layout spreads the iterations over "
                                f"{given.num_threads} threads, but the loop runs on {threads}",
                                op.span)
            self.map.loops[id(op)] = given

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
                if access_map(indices, loop_vars) is None and \
                        not is_identity_access(indices, loop_vars, b, op) and \
                        inner_loop_access(op, indices, b.static_shape()) is None:
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
        extents = nest_extents(loop)
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
                    amap = access_map(indices, loop_vars)
                    layout = m.buffers.get(id(b))
                    shape = b.static_shape()
                    if amap is None and isinstance(layout, lay.Fragment):
                        # x[i, jj * 4 + j] in a loop over jj: laid out as read at jj = 0
                        indices = outer_pinned(indices, loop) or indices
                        amap = access_map(indices, loop_vars)
                    if amap is None and isinstance(layout, lay.Fragment):
                        merged = merged_access(indices, loop_vars, extents, shape)
                        if merged is not None:   # b[i, j * H + k]: b seen as (.., .., H)
                            shape, amap = merged
                            layout = layout.reshape(shape)
                    if amap is not None and isinstance(layout, lay.Fragment) and \
                            not layout.is_fully_replicated() and \
                            coarsens(amap, extents, shape):
                        # Run each iteration in the threads that hold the element it reads.
                        m.loops[id(loop)] = expand_fragment(layout, extents,
                                                            [d for d, _ in amap],
                                                            [c for _, c in amap])
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
            amap = access_map(indices, loop_vars)
            if len(patterns[id(b)]) > 1 or (amap is None and
                                            not is_identity_access(indices, loop_vars, b, loop)):
                walked = None if len(patterns[id(b)]) > 1 else \
                    walked_in_registers(frag, loop, indices, b.static_shape())
                changed |= m.set(b, walked if walked is not None else lay.fully_replicated(
                    b.static_shape(), self.buffer_threads(b)), loop)
                continue
            if is_identity_access(indices, loop_vars, b, loop):
                changed |= m.set(b, frag, loop)
                continue
            derived = project_loop(frag, extents, amap, b.static_shape())
            if derived is not None:
                changed |= m.set(b, derived, loop)
        return changed


def _writes_thread_local(loop: For) -> bool:
    """Whether a T.Parallel nest stores into a per-thread array (T.alloc_local)."""
    return any(isinstance(n, BufferStore) and n.buffer.scope == LOCAL for n in walk(loop))


def _fragments_tied(op) -> list:
    """The fragments whose layouts an op relates (the common phase passes layouts between
    them)."""
    if isinstance(op, For):
        return fragments_of(op)
    if isinstance(op, (Copy, CumSum, Reduce)):
        return [r.buffer for r in (op.src, op.dst) if r.buffer.scope == FRAGMENT]
    return []


def infer_layouts(node, rules):
    """Layouts of one Kernel (a LayoutMap), or of every kernel of a PrimFunc (the func, with
    each kernel's map in kernel.attrs["layouts"], which later passes use). `rules` are the
    backend's instruction facts (passes/instruction_rules.py)."""
    if isinstance(node, Kernel):
        return _Inference(node, rules).run()
    import dataclasses
    return map_kernels(node, lambda k: dataclasses.replace(
        k, attrs={**k.attrs, LAYOUTS: _Inference(k, rules).run()}))

