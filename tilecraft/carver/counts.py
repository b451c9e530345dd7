"""What one launch of a specialized kernel moves and computes, read off its FTG.

Every FTG node is charged per execution (its tile sizes are static in a specialized program)
and then multiplied by how often it runs: the trip counts of its enclosing serial / pipelined
loops, evaluated for every block of the grid (loop bounds may depend on block indices, as a
causal attention's do), summed over the grid.

- Global memory: a T.copy whose source (destination) is global loads (stores) the region's
  elements, clipped to the tensor's extent per dimension. Everything goes through L2, so the
  L2 level sees every load and store. Global loads reach HBM under a simple L2 model: blocks
  that are resident at the same time (one wave, in launch order after T.use_swizzle's
  rasterization) share a tile they all load, so HBM sees each distinct tile origin once per
  wave (once per loop iteration if the origin moves with the loop, else once); there is no
  reuse across waves unless the tensor is at most half the L2, in which case it is fetched from
  HBM at most once in total. Stores go to HBM once. Element accesses to global buffers inside
  T.Parallel nests are charged per element, without reuse.
- Shared memory: a copy into (out of) a shared buffer writes (reads) its tile; a gemm reads
  its shared A once per warp column and its shared B once per warp row of its warp partition;
  element accesses to shared buffers in T.Parallel nests and reductions are charged per
  element.
- Tensor cores: a gemm with fp16 / bf16 operands does 2*M*N*K FLOPs per execution; other
  operand types multiply on CUDA cores (M*N*K FMAs).
- CUDA cores and SFUs: floating-point arithmetic per element of a T.Parallel nest (one lane op
  per +, -, *, min, max, comparison, select, conversion; a division is a reciprocal on the SFU
  and a multiply; exp2 / log2 / rsqrt / sqrt / sin / cos / tanh are one SFU op, exp / log one
  SFU op and a scaling multiply), one op per source element for reductions (two for the abs
  variants) and cumsum, one per element for a copy that converts dtypes. Integer index
  arithmetic is not counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from ..errors import TileError
from ..interp.values import Evaluator
from ..ir.buffer import GLOBAL, BufferRegion, is_shared
from ..ir.expr import Binary, BufferLoad, Call, Cast, Const, Expr, Select, Unary, Var
from ..ir.ftg import FTG
from ..ir.stmt import BufferStore, For, Kernel
from ..ir.tileop import Atomic, Copy, CumSum, Fill, Gemm, Reduce, UseSwizzle
from ..ir.visitor import walk

MMA_DTYPES = ("float16", "bfloat16")
_SFU_ONE = {"exp2": 0, "log2": 0, "rsqrt": 0, "sqrt": 0, "sin": 0, "cos": 0, "tanh": 0,
            "exp": 1, "log": 1, "exp10": 1, "log10": 1, "log1p": 2, "tan": 1, "pow": 2}
_SFU_MORE = {"sigmoid": (2, 2), "erf": (1, 8)}  # (SFU ops, lane ops)
_LANE_ONLY = ("abs", "floor", "ceil", "round", "trunc", "fmod", "isnan", "isinf", "isfinite")


@dataclass
class NodeCount:
    """One FTG node's charges, per execution and in total over the grid."""
    index: int
    kind: str
    executions: int = 0            # summed over the grid
    gmem_load: int = 0             # bytes per execution
    gmem_store: int = 0
    hbm_load: float = 0.0          # total over the grid, after the L2 model
    smem: int = 0                  # bytes per execution
    tensor_flops: int = 0          # per execution
    cuda_ops: int = 0
    sfu_ops: int = 0
    buffer: object = None          # the global buffer loaded, if any


@dataclass
class LaunchCounts:
    grid: tuple
    num_blocks: int
    threads: int
    nodes: list = field(default_factory=list)
    hbm_read: float = 0.0
    hbm_write: float = 0.0
    l2_bytes: float = 0.0
    smem_bytes: float = 0.0
    tensor_flops: float = 0.0
    cuda_ops: float = 0.0
    sfu_ops: float = 0.0
    inflight_per_block: int = 0    # bytes of global loads a block keeps in flight
    pipelined: bool = False        # some loop with global loads runs num_stages >= 2
    loop_phases: int = 0           # executions of tile ops inside loops, over the grid
    swizzle: tuple | None = None


def static_int(e, what: str) -> int:
    if isinstance(e, int):
        return e
    if isinstance(e, Const):
        return int(e.value)
    raise TileError(f"the cost model needs a static {what}, got {e!r}; specialize the kernel "
                    "for a problem size first")


def _vars_in(e) -> set:
    return {id(n) for n in walk(e) if isinstance(n, Var)}


class _Env:
    """Vectorized evaluation of integer expressions over all blocks of the grid."""

    def __init__(self, env: dict, n: int):
        self.env, self.n = env, n
        self.ev = Evaluator(SimpleNamespace(env=env))

    def eval(self, e) -> np.ndarray:
        v = np.asarray(self.ev.eval(e) if isinstance(e, Expr) else e).astype(np.int64)
        return np.broadcast_to(v, (self.n,))


def _rasterize(panel: int, order: str, gx: int, gy: int, bx, by):
    """T.use_swizzle's block -> tile map (tilecraft/codegen/include/tilecraft/raster.h)."""
    lin = by * gx + bx
    if order == "row":
        p, o = np.divmod(lin, panel * gx)
        rows = np.minimum(panel, gy - p * panel)
        x, y = o // rows, p * panel + o % rows
        return np.where(p % 2 == 1, gx - 1 - x, x), y
    p, o = np.divmod(lin, panel * gy)
    cols = np.minimum(panel, gx - p * panel)
    y, x = o // cols, p * panel + o % cols
    return x, np.where(p % 2 == 1, gy - 1 - y, y)


def block_env(kernel: Kernel) -> tuple[_Env, tuple]:
    grid = tuple(static_int(g, "grid extent") for g in kernel.grid)
    dims = list(grid) + [1] * (3 - len(grid))
    n = int(np.prod(dims))
    lin = np.arange(n, dtype=np.int64)
    idx = [lin % dims[0], (lin // dims[0]) % dims[1], lin // (dims[0] * dims[1])]
    swz = next((s for s in walk(kernel.body) if isinstance(s, UseSwizzle) and s.enable), None)
    if swz is not None and swz.panel_size > 0 and len(grid) >= 2:
        idx[0], idx[1] = _rasterize(swz.panel_size, swz.order, dims[0], dims[1], idx[0], idx[1])
    env = {id(v): idx[d] for d, v in enumerate(kernel.block_vars)}
    return _Env(env, n), grid


def _region_elems(region: BufferRegion, clip: bool) -> int:
    ext = region.static_extents()
    if ext is None:
        raise TileError(f"the cost model needs static tile extents ({region.buffer.name})")
    shape = region.buffer.static_shape() if clip else None
    n = 1
    for d, e in enumerate(ext):
        n *= min(e, shape[d]) if shape is not None else e
    return n


def _lane_ops(e) -> tuple[int, int]:
    """(lane ops, SFU ops) of the floating-point arithmetic in an expression."""
    lane = sfu = 0
    for n in walk(e):
        if isinstance(n, Binary):
            operand_float = n.a.dtype.is_float or n.b.dtype.is_float
            if not (n.dtype.is_float or operand_float):
                continue
            lane += 1
            if n.op == "/":
                sfu += 1
        elif isinstance(n, Unary) and n.dtype.is_float:
            lane += 1
        elif isinstance(n, Select) and n.dtype.is_float:
            lane += 1
        elif isinstance(n, Cast) and n.dtype.is_float and n.value.dtype is not n.dtype:
            lane += 1
        elif isinstance(n, Call):
            if n.name in _SFU_ONE:
                sfu += 1
                lane += _SFU_ONE[n.name]
            elif n.name in _SFU_MORE:
                s, l = _SFU_MORE[n.name]
                sfu, lane = sfu + s, lane + l
            elif n.name in _LANE_ONLY:
                lane += 1
    return lane, sfu


def _parallel(node, loop: For, c: NodeCount):
    elems, body = 1, loop
    while isinstance(body, For):
        elems *= static_int(body.extent, "T.Parallel extent")
        body = body.body
    lane = sfu = 0
    for s in walk(loop):
        if isinstance(s, BufferStore):
            l, f = _lane_ops(s.value)
            lane, sfu = lane + l, sfu + f
            if is_shared(s.buffer.scope):
                c.smem += s.buffer.dtype.bytes
            elif s.buffer.scope == GLOBAL:
                c.gmem_store += s.buffer.dtype.bytes
        elif isinstance(s, BufferLoad):
            if is_shared(s.buffer.scope):
                c.smem += s.buffer.dtype.bytes
            elif s.buffer.scope == GLOBAL:
                c.gmem_load += s.buffer.dtype.bytes
    c.cuda_ops, c.sfu_ops = lane * elems, sfu * elems
    c.smem *= elems
    c.gmem_load *= elems
    c.gmem_store *= elems


def charge(node, warps_of) -> NodeCount:
    """Per-execution charges of one FTG node. warps_of(gemm) -> (warps along M, along N)."""
    s = node.stmt
    c = NodeCount(node.index, node.kind)
    if isinstance(s, Copy):
        src, dst = s.src.buffer, s.dst.buffer
        elems = _region_elems(s.src if src.scope == GLOBAL else s.dst, clip=True)
        if src.scope == GLOBAL:
            c.gmem_load, c.buffer = elems * src.dtype.bytes, src
        if dst.scope == GLOBAL:
            c.gmem_store = elems * dst.dtype.bytes
        if is_shared(src.scope):
            c.smem += elems * src.dtype.bytes
        if is_shared(dst.scope):
            c.smem += elems * dst.dtype.bytes
        if src.dtype is not dst.dtype:
            c.cuda_ops = elems
    elif isinstance(s, Gemm):
        from ..passes.infer_layouts import _gemm_dims
        m, n, k = _gemm_dims(s)
        if s.A.buffer.dtype.name in MMA_DTYPES and s.B.buffer.dtype.name in MMA_DTYPES:
            c.tensor_flops = 2 * m * n * k
        else:
            c.cuda_ops = m * n * k
        wm, wn = warps_of(s, m, n)
        if is_shared(s.A.buffer.scope):
            c.smem += m * k * s.A.buffer.dtype.bytes * wn
        if is_shared(s.B.buffer.scope):
            c.smem += k * n * s.B.buffer.dtype.bytes * wm
    elif isinstance(s, (Reduce, CumSum)):
        elems = _region_elems(s.src, clip=False)
        abs_kind = isinstance(s, Reduce) and s.kind.startswith("abs")
        c.cuda_ops = elems * (2 if abs_kind else 1)
        if is_shared(s.src.buffer.scope):
            c.smem += elems * s.src.buffer.dtype.bytes
    elif isinstance(s, Fill):
        b = s.dst.buffer
        elems = _region_elems(s.dst, clip=b.scope == GLOBAL)
        if is_shared(b.scope):
            c.smem = elems * b.dtype.bytes
        elif b.scope == GLOBAL:
            c.gmem_store = elems * b.dtype.bytes
    elif isinstance(s, Atomic):
        dst = s.dst.buffer
        if dst.scope == GLOBAL:
            elems = _region_elems(s.dst, clip=True)
            c.gmem_load = c.gmem_store = elems * dst.dtype.bytes
            c.cuda_ops = elems
    elif isinstance(s, For):
        _parallel(node, s, c)
    elif node.kind in ("store", "call"):
        for n in walk(s):
            if isinstance(n, BufferLoad) and n.buffer.scope == GLOBAL:
                c.gmem_load += n.buffer.dtype.bytes
            if isinstance(n, BufferStore) and n.buffer.scope == GLOBAL:
                c.gmem_store += n.buffer.dtype.bytes
        if isinstance(s, BufferStore):
            c.cuda_ops, c.sfu_ops = _lane_ops(s.value)
    return c


def _group_ids(columns) -> np.ndarray:
    """Dense ids of the distinct rows of integer columns (0 .. groups-1)."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        _, ids = np.unique(col, return_inverse=True)
        key = key * (int(ids.max()) + 1) + ids.reshape(-1)
        _, key = np.unique(key, return_inverse=True)
        key = key.reshape(-1)
    return key


def _trip_counts(env: _Env, loops) -> tuple[np.ndarray, dict]:
    """Executions per block of a body inside `loops` (outermost first), and an environment
    with each loop variable at its first value (for tile origins). An inner bound that depends
    on an outer loop variable is taken at the outer loop's middle iteration."""
    it = np.ones(env.n, dtype=np.int64)
    mid, first = dict(env.env), dict(env.env)
    for loop in loops:
        here = _Env(mid, env.n)
        extent = np.maximum(here.eval(loop.extent), 0)
        start = here.eval(loop.start)
        it = it * extent
        mid[id(loop.var)] = start + np.maximum(extent - 1, 0) // 2
        first[id(loop.var)] = _Env(first, env.n).eval(loop.start)
    return it, first


def _stages(loop) -> int:
    if loop.kind != "pipelined":
        return 1
    n = loop.annotations.get("num_stages", 1)
    return int(n.value) if isinstance(n, Const) else int(n or 1)


def count_launch(kernel: Kernel, ftg: FTG, warps_of, wave_blocks: int,
                 l2_bytes: int) -> LaunchCounts:
    """Totals of one launch over its grid, with `wave_blocks` blocks resident at a time."""
    env, grid = block_env(kernel)
    lc = LaunchCounts(grid, env.n, kernel.num_threads)
    wave = np.arange(env.n, dtype=np.int64) // max(1, wave_blocks)
    per_buffer: dict = {}
    inflight: dict = {}
    for node in ftg.nodes:
        c = charge(node, warps_of)
        it, first = _trip_counts(env, node.loops)
        total = int(it.sum())
        c.executions = total
        lc.nodes.append(c)
        lc.l2_bytes += (c.gmem_load + c.gmem_store) * total
        lc.hbm_write += c.gmem_store * total
        lc.smem_bytes += c.smem * total
        lc.tensor_flops += c.tensor_flops * total
        lc.cuda_ops += c.cuda_ops * total
        lc.sfu_ops += c.sfu_ops * total
        if not c.gmem_load or total == 0:
            continue
        inner = node.loops[-1] if node.loops else None
        stages = _stages(inner) if inner is not None else 1
        lc.pipelined |= stages >= 2
        key = id(inner) if inner is not None else None
        inflight[key] = inflight.get(key, 0) + c.gmem_load * max(1, stages - 1)
        if c.buffer is None:  # element accesses in a T.Parallel nest: no reuse assumed
            c.hbm_load = float(c.gmem_load * total)
            lc.hbm_read += c.hbm_load
            continue
        fenv = _Env(first, env.n)
        starts = [fenv.eval(s) for s in node.stmt.src.starts]
        loop_vars = {id(l.var) for l in node.loops}
        moves = any(_vars_in(s) & loop_vars for s in node.stmt.src.starts)
        inv = _group_ids([wave] + starts)
        most = np.zeros(int(inv.max()) + 1, dtype=np.int64)
        np.maximum.at(most, inv, it)
        fetched = most.sum() if moves else np.count_nonzero(most)
        c.hbm_load = float(c.gmem_load * fetched)
        entry = per_buffer.setdefault(id(c.buffer), [c.buffer, 0.0])
        entry[1] += c.hbm_load
    for buffer, modelled in per_buffer.values():
        shape = buffer.static_shape()
        size = int(np.prod(shape)) * buffer.dtype.bytes if shape is not None else None
        if size is not None and size <= l2_bytes // 2:
            modelled = min(modelled, float(size))
        lc.hbm_read += modelled
    lc.loop_phases = sum(c.executions for c, node in zip(lc.nodes, ftg.nodes) if node.loops)
    lc.inflight_per_block = max(inflight.values(), default=0)
    swz = next((s for s in walk(kernel.body) if isinstance(s, UseSwizzle) and s.enable), None)
    lc.swizzle = (swz.panel_size, swz.order) if swz is not None else None
    return lc
