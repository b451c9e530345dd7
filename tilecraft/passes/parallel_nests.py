"""What the layout passes ask of a kernel body: its tile ops and outermost T.Parallel nests in
program order, the fragments each touches, and how a nest's fragment accesses relate to its loop
variables (the same indices, a row / column projection of them, or a coarsening: `x[i, j // 2]`,
where several iterations read one element), also counting the T.serial loops inside a nest's
body (walked_in_registers)."""
from __future__ import annotations

from ..arith.bounds import simplify
from ..ir import dtypes as dt
from ..ir.buffer import FRAGMENT, GLOBAL, LOCAL, is_shared, row_major_offset
from ..ir.expr import Binary, BufferLoad, Const, Select, Var, logical
from ..ir.ftg import element_accesses
from ..ir.linear import linear_form
from ..ir.stmt import Allocate, BufferStore, For, Stmt, flat_stmts
from ..ir.tileop import TileOp
from ..ir.visitor import children, substitute, walk
from ..layout.derive import coarsens, expand_fragment, project_loop


def tile_ops(body) -> list:
    """Tile ops and outermost T.Parallel nests, in program order."""
    out = []

    def visit(s, in_parallel):
        if isinstance(s, For) and s.kind == "parallel" and not in_parallel:
            out.append(s)
            return
        if isinstance(s, TileOp):
            out.append(s)
            return
        for c in children(s):
            if isinstance(c, Stmt):
                visit(c, in_parallel)

    visit(body, False)
    return out


def fragments_of(op) -> list:
    """The fragments a tile op or T.Parallel nest touches."""
    reads, writes = element_accesses(op)
    return [b for b in reads + writes if b.scope == FRAGMENT]


def on_warpgroup_fragments(op, local: set) -> bool:
    """The op touches a fragment of one warpgroup (named in `local`, the kernel's
    WARPGROUP_FRAGMENTS), so it runs on that warpgroup's 128 threads."""
    return any(b.name in local for b in fragments_of(op))


def is_twin_copy(op, local: set) -> bool:
    """A copy between a fragment of one warpgroup and its block-wide twin."""
    s, d = op.src.buffer, op.dst.buffer
    return s.scope == FRAGMENT and d.scope == FRAGMENT and (s.name in local) != (d.name in local)


def allocated(body) -> list:
    return [n.buffer for n in walk(body) if isinstance(n, Allocate)]


def nest_extents(loop: For) -> tuple:
    out = []
    while isinstance(loop, For) and loop.kind == "parallel":
        out.append(int(loop.extent.value))
        loop = loop.body
    return tuple(out)


def nest_vars(loop: For) -> list:
    out = []
    while isinstance(loop, For) and loop.kind == "parallel":
        out.append(loop.var)
        loop = loop.body
    return out


def nest_body(loop: For):
    """The body inside a nest of directly nested T.Parallel loops."""
    while isinstance(loop, For) and loop.kind == "parallel":
        loop = loop.body
    return loop


def fragment_accesses(loop: For) -> list:
    out = []
    for n in walk(loop):
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope == FRAGMENT:
            out.append((n.buffer, n.indices))
    # Stores first: the buffer a loop writes is the natural owner of its layout.
    out.sort(key=lambda p: 0 if any(isinstance(x, BufferStore) and x.buffer is p[0]
                                    for x in walk(loop)) else 1)
    return out


def is_identity_access(indices, loop_vars, buffer, loop) -> bool:
    if len(indices) != len(loop_vars) or any(i is not v for i, v in zip(indices, loop_vars)):
        return False
    return tuple(buffer.static_shape()) == nest_extents(loop)


def projection(indices, loop_vars):
    """Positions of the loop variables used as indices, if the indices are a subsequence."""
    positions = []
    for i in indices:
        match = [p for p, v in enumerate(loop_vars) if v is i]
        if not match:
            return None
        positions.append(match[0])
    if positions != sorted(positions) or len(set(positions)) != len(positions):
        return None
    return positions


def access_map(indices, loop_vars):
    """[(loop dim, divisor)] per index when each index is a loop variable `v` (divisor 1) or a
    coarsening `v // c` of one (c a positive constant), the dims distinct (in any order: a
    loop may read a fragment transposed); None for any other access. A projection is the case
    where every divisor is 1."""
    out = []
    for i in indices:
        div = 1
        if isinstance(i, Binary) and i.op == "//" and isinstance(i.b, Const) and \
                isinstance(i.b.value, int) and i.b.value > 0:
            i, div = i.a, i.b.value
        match = [p for p, v in enumerate(loop_vars) if v is i]
        if not match:
            return None
        out.append((match[0], div))
    positions = [p for p, _ in out]
    if len(set(positions)) != len(positions):
        return None
    return out


def merged_access(indices, loop_vars, extents, shape):
    """(view shape, access map) when each index is a loop variable, a coarsening `v // c` of
    one, or a row-major merge of consecutive ones (`b * H + c`, c's extent H; `b * H + c // 2`,
    H being c's extent halved) covering the fragment's whole dim, the variables distinct and in
    loop order: the fragment is then read as if reshaped to those loop dims (a T.reshape of it,
    written through), at their own iteration, coarsened where divided. None otherwise."""
    view, amap = [], []
    for idx, size in zip(indices, shape):
        terms, constant = linear_form(idx)
        if constant != 0 or not terms:
            return None
        dims = []
        for atom, coeff in terms.values():
            div = 1
            if isinstance(atom, Binary) and atom.op == "//" and isinstance(atom.b, Const) and \
                    isinstance(atom.b.value, int) and atom.b.value > 0:
                atom, div = atom.a, atom.b.value
            match = [p for p, v in enumerate(loop_vars) if v is atom]
            if not match or extents[match[0]] % div:
                return None
            dims.append((match[0], coeff, div))
        dims.sort()
        stride = 1
        for k in range(len(dims) - 1, -1, -1):
            p, coeff, div = dims[k]
            if coeff != stride or (k + 1 < len(dims) and dims[k + 1][0] != p + 1):
                return None
            stride *= extents[p] // div
        if stride != size:
            return None
        view += [extents[p] // div for p, _, div in dims]
        amap += [(p, div) for p, _, div in dims]
    positions = [p for p, _ in amap]
    if positions != sorted(positions) or len(set(positions)) != len(positions):
        return None
    return tuple(view), amap


def store_run(loop: For) -> int:
    """How many consecutive innermost elements each thread takes at a time in an element-wise
    nest that touches no fragment: for a body of stores into shared memory at the innermost
    variable's own position (x[..., j + c]) whose global reads either do not vary with it or
    read consecutive elements along it (_contiguous_runs), runs of up to 16 bytes of the widest
    stored type, which the lowering moves with one vector access each and computes from
    registers (tileops/vector_runs.py); 1 (one element per thread in turn) otherwise."""
    loop_vars, extents = nest_vars(loop), nest_extents(loop)
    inner = nest_body(loop)
    stores = flat_stmts(inner)
    if not stores or not all(isinstance(s, BufferStore) and is_shared(s.buffer.scope)
                             for s in stores):
        return 1
    j, nest = loop_vars[-1], {id(v) for v in loop_vars}
    for s in stores:
        terms, _ = linear_form(s.indices[-1])
        if not any(atom is j and c == 1 for atom, c in terms.values()):
            return 1
        if any(atom is not j and any(id(x) in nest for x in walk(atom))
               for atom, _ in terms.values()):
            return 1
    v = min(16 // s.buffer.dtype.bytes for s in stores)
    while v > 1 and extents[-1] % v:
        v //= 2
    for n in walk(inner):
        if isinstance(n, BufferLoad) and n.buffer.scope == GLOBAL and \
                any(x is j for i in n.indices for x in walk(i)) and \
                not _contiguous_runs(n, j, v, loop_vars, extents):
            # Read from global memory element by element, a run per thread would make each
            # warp-wide load touch w times the lines (the rows of an im2col, a gather).
            return 1
    return v


def _contiguous_runs(load: BufferLoad, j, v: int, loop_vars, extents) -> bool:
    """The load reads v consecutive elements of its tensor for each run of v values of j that
    starts at a multiple of v (im2col's data[n, ih, iw, kk % C] with C a multiple of v), other
    variables taken as non-negative; the lowering checks it again with the real ranges
    (tileops/global_runs.py) and reads element by element where it does not hold."""
    offset = row_major_offset(load)
    if v < 2 or offset is None:
        return False
    q = Var("run", dt.int32)
    bounds = {id(x): (0, 1 << 30) for x in walk(offset) if isinstance(x, Var)}
    bounds.update({id(x): (0, e - 1) for x, e in zip(loop_vars, extents)})
    bounds[id(q)] = (0, max(0, extents[-1] // v - 1))
    at = [simplify(substitute(offset, {id(j): q * v + k}), bounds) for k in range(v)]
    return all(isinstance(d, Const) and d.value == k
               for k, d in enumerate(simplify(x - at[0], bounds) for x in at))


def guarded_global_read(e):
    """(load, guard or None) when e is a global load, or a select of one (or of such a select)
    with a zero else-branch: T.if_then_else(valid, data[...], 0), the bounds check the lowering
    puts on a read that may leave its tensor, or both; None otherwise."""
    if isinstance(e, BufferLoad) and e.buffer.scope == GLOBAL:
        return e, None
    if isinstance(e, Select) and isinstance(e.b, Const) and e.b.value == 0:
        inner = guarded_global_read(e.a)
        if inner is not None:
            load, guard = inner
            return load, e.cond if guard is None else logical("and", e.cond, guard)
    return None


def gather_targets(s) -> tuple | None:
    """The shared tiles a T.Parallel nest fills when the nest is a gather: every statement of
    its body stores into a shared tile a guarded_global_read (one tile, or several filled side
    by side: a key tile and a value tile at the same listed rows). Its indices and guard may read
    scalars, shared tiles and global tensors (a list of rows the block compacted), never
    registers another thread may hold; whether what they read may be read ahead is
    infer_pipeline's question, as for any statement. None for anything else."""
    if not (isinstance(s, For) and s.kind == "parallel"):
        return None
    stores = flat_stmts(nest_body(s))
    if not stores or not all(isinstance(x, BufferStore) and is_shared(x.buffer.scope)
                             for x in stores):
        return None
    for x in stores:
        read = guarded_global_read(x.value)
        if read is None or any(isinstance(n, BufferLoad) and n.buffer.scope in (FRAGMENT, LOCAL)
                               for part in (*read[0].indices, read[1]) if part is not None
                               for n in walk(part)):
            return None
    return tuple({id(x.buffer): x.buffer for x in stores}.values())


def walked_in_registers(frag, loop: For, indices, shape):
    """The layout of a fragment a T.Parallel nest laid out as `frag` indexes with the variables
    of T.serial / T.unroll loops inside its body as well as its own (`x[i, k]`, `x[t * 8 + e]`,
    `b[i, t * 4 + e // 2]`): each thread runs an iteration's inner loops whole, so the inner
    dims are walked in its registers, and the fragment is the projection (or coarsening) of
    that extended iteration space. None where the indices are no such access."""
    access = inner_loop_access(loop, indices, shape)
    if access is None:
        return None
    extents, amap, view, nest = access
    walked = expand_fragment(frag, extents, list(range(nest)))
    derived = project_loop(walked, extents, amap, view)
    if derived is None:
        return None
    return derived if tuple(derived.shape) == tuple(shape) else derived.reshape(tuple(shape))


def inner_loop_access(loop: For, indices, shape):
    """(extents, access map, view shape, nest dims) of an access that is a projection,
    coarsening or row-major merge of the nest's variables and those of the inner loops it
    uses (walked_in_registers); None otherwise."""
    used = [(v, n) for v, n in _inner_loops(nest_body(loop))
            if any(x is v for i in indices for x in walk(i))]
    if not used:
        return None
    loop_vars = nest_vars(loop) + [v for v, _ in used]
    extents = tuple(nest_extents(loop)) + tuple(n for _, n in used)
    amap, view = access_map(indices, loop_vars), tuple(shape)
    if amap is None:
        merged = merged_access(indices, loop_vars, extents, shape)
        if merged is None:
            return None
        view, amap = merged
    if not coarsens(amap, extents, view):
        return None
    return extents, amap, view, len(extents) - len(used)


def outer_pinned(indices, loop: For):
    """The indices with the variables of the loops around the nest (and the block indices) set
    to 0, when any appear; None when none do. A nest reading x[i, jj * 4 + j] in a loop over
    jj runs in the threads holding what it reads at jj = 0: the lowering checks the read at
    every jj (tileops/parallel.check_ownership) and reads through shared memory where another
    thread holds it."""
    own = {id(v) for v in nest_vars(loop)} | {id(v) for v, _ in _inner_loops(nest_body(loop))}
    pinned = {id(v): Const(0, v.dtype) for i in indices for v in walk(i)
              if isinstance(v, Var) and id(v) not in own}
    if not pinned:
        return None
    return [simplify(substitute(i, pinned)) for i in indices]


def _inner_loops(body) -> list:
    """(var, extent) of the T.serial / T.unroll loops of constant extent from 0 in a nest's
    body, outermost first."""
    return [(n.var, n.extent.value) for n in walk(body)
            if isinstance(n, For) and n.kind in ("serial", "unroll") and
            isinstance(n.extent, Const) and isinstance(n.start, Const) and n.start.value == 0]
