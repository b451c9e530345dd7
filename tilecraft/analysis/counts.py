"""What one launch of a specialized kernel moves and computes, read off its FTG.

Every FTG node is charged per execution (its tile sizes are static in a specialized program)
and then multiplied by how often it runs: the trip counts of its enclosing serial / pipelined
loops, evaluated for every block of the grid (loop bounds may depend on block indices, as a
causal attention's do), summed over the grid. A tile op's charges are the cost rule of its
contract (tilecraft/ops); T.Parallel nests and scalar statements are charged here. What each
kind of node is charged:

- Global memory: a T.copy whose source (destination) is global loads (stores) the region's
  elements, clipped to the tensor's extent per dimension. Everything goes through L2, so the
  L2 level sees every load and store. Global loads reach HBM under a simple L2 model: blocks
  that are resident at the same time (one wave, in launch order after T.use_swizzle's
  rasterization) share a tile they all load, so HBM sees each distinct tile origin once per
  wave (once per loop iteration if the origin moves with the loop, else once); there is no
  reuse across waves unless the tensor is at most half the L2, in which case it is fetched from
  HBM at most once in total. Stores go to HBM once. Element accesses to global buffers inside
  T.Parallel nests are charged per element, without reuse.
- Shared memory: a copy into (out of) a shared buffer writes (reads) its tile; a gemm on
  mma.sync reads its shared A once per warp column and its shared B once per warp row of its
  warp partition (ldmatrix); a gemm on wgmma reads A once per warpgroup column and B once per
  64 rows of the tile (every m64nNk16 instruction reads its operands from shared memory);
  element accesses to shared buffers in T.Parallel nests and reductions are charged per
  element. The part of a loaded tile that lies past the tensor is filled with zeros: counted
  apart (zero_fill_bytes), as no level's traffic; the ranking breaks ties on it.
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

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from ..errors import TileError
from ..interp.values import Evaluator
from ..ir.buffer import GLOBAL, BufferRegion, is_shared
from ..ir.expr import Binary, BufferLoad, Call, Cast, Const, Expr, Select, Unary, Var
from ..ir.ftg import FTG
from ..ir.stmt import BufferStore, For, Kernel
from ..ir.tileop import TileOp, UseSwizzle, contract_of
from ..ir.visitor import walk
from .l2model import fetched_tiles, grid_indices
from ..ir.annotations import NUM_STAGES

MMA_DTYPES = ("float16", "bfloat16")
WGMMA_M = 64   # rows of one wgmma instruction (m64nNk16)
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
    zero_fill: int = 0             # bytes per execution of a loaded tile past the tensor's edge
    tensor_flops: int = 0          # per execution
    cuda_ops: int = 0
    sfu_ops: int = 0
    buffer: object = None          # the global buffer loaded, if any
    instruction: str = ""          # a gemm's tensor-core instruction ("mma" / "wgmma")
    dtype: str = ""                # a gemm's operand dtype (its tensor-core rate)


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
    # iterations, over the grid, of loops that load from global memory without a software
    # pipeline (num_stages <= 1): each waits for its loads before it computes
    exposed_loads: int = 0
    # shared-memory bytes that loads fill with zeros because the tile reaches past the tensor
    # (a 64-row tile over 16 rows): no DRAM traffic, but not free either (see the ranking)
    zero_fill_bytes: float = 0.0
    # iterations, over the grid, of loops that load from global memory in two stages: one
    # stage loading while the other is computed (the cost model says when that is too few)
    two_stage_loads: int = 0


def static_int(e, what: str) -> int:
    if isinstance(e, int):
        return e
    if isinstance(e, Const):
        return int(e.value)
    raise TileError(f"the cost model needs a static {what}, got {e!r}; specialize the kernel "
                    "for a problem size first")


def _vars_in(e) -> set:
    return {id(n) for n in walk(e) if isinstance(n, Var)}


def _no_memory(buffer):
    raise TileError(f"the cost model cannot know the values read from {buffer.name}: a tile "
                    "whose place depends on them has no static address")


class _Env:
    """Vectorized evaluation of integer expressions over all blocks of the grid (no memory:
    an expression that reads a buffer raises a TileError)."""

    def __init__(self, env: dict, n: int):
        self.env, self.n = env, n
        self.ev = Evaluator(SimpleNamespace(env=env, array_of=_no_memory))

    def eval(self, e) -> np.ndarray:
        v = np.asarray(self.ev.eval(e) if isinstance(e, Expr) else e).astype(np.int64)
        return np.broadcast_to(v, (self.n,))


def _swizzle_of(kernel: Kernel):
    return next((s for s in walk(kernel.body) if isinstance(s, UseSwizzle) and s.enable), None)


def block_env(kernel: Kernel, swz=None) -> tuple[_Env, tuple]:
    grid = tuple(static_int(g, "grid extent") for g in kernel.grid)
    dims = tuple(list(grid) + [1] * (3 - len(grid)))
    raster = (swz.panel_size, swz.order) if (swz is not None and swz.panel_size > 0
                                             and len(grid) >= 2) else (0, "")
    idx = grid_indices(dims, *raster)
    env = {id(v): idx[d] for d, v in enumerate(kernel.block_vars)}
    return _Env(env, int(np.prod(dims))), grid


def region_elems(region: BufferRegion, clip: bool) -> int:
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


def charge(node, gemm_plan) -> NodeCount:
    """Per-execution charges of one FTG node: a tile op's come from its contract, the rest
    (T.Parallel nests, scalar statements) are counted here. gemm_plan(gemm, m, n) ->
    (instruction, split along M, split along N): warps for "mma", warpgroups for "wgmma"."""
    s = node.stmt
    c = NodeCount(node.index, node.kind)
    if isinstance(s, TileOp):   # what a tile op costs is its contract (tilecraft/ops)
        contract_of(s).charge(s, c, gemm_plan)
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


def _trip_counts(env: _Env, loops) -> tuple[np.ndarray, dict]:
    """Executions per block of a body inside `loops` (outermost first), and an environment
    with each loop variable at its first value (for tile origins). An inner bound that depends
    on an outer loop variable is taken at the outer loop's middle iteration."""
    it = 1
    mid, first = dict(env.env), dict(env.env)
    for loop in loops:
        extent, start = _static_or_none(loop.extent), _static_or_none(loop.start)
        if extent is None or start is None:  # depends on block indices or outer loops
            here = _Env(mid, env.n)
            extent = np.maximum(here.eval(loop.extent), 0)
            start = here.eval(loop.start)
            first[id(loop.var)] = _Env(first, env.n).eval(loop.start)
        else:
            extent = max(extent, 0)
            first[id(loop.var)] = start
        it = it * extent
        mid[id(loop.var)] = start + np.maximum(extent - 1, 0) // 2
    return np.broadcast_to(np.asarray(it, dtype=np.int64), (env.n,)), first


def _static_or_none(e):
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, Const) else None


def _stages(loop) -> int:
    if loop.kind != "pipelined":
        return 1
    n = loop.annotations.get(NUM_STAGES, 1)
    return int(n.value) if isinstance(n, Const) else int(n or 1)


def _nest_origin(nest, known: set) -> list | None:
    """The variables that say which global elements a T.Parallel nest reads, besides its own
    loop variables: block indices and enclosing loop counters (ids in `known`). Blocks of one
    wave that agree on them read the same elements (an im2col tile is the same for every
    filter tile of its pixel rows), so they share one fetch, as blocks loading one tile
    origin do. None where an index reads memory or a variable bound elsewhere: the elements
    cannot be told apart by the block's coordinates."""
    found, own = {}, {id(n.var) for n in walk(nest) if isinstance(n, For)}
    for n in walk(nest):
        if isinstance(n, BufferLoad) and n.buffer.scope == GLOBAL:
            for m in (m for index in n.indices for m in walk(index)):
                if isinstance(m, BufferLoad):
                    return None
                if isinstance(m, Var) and id(m) in known:
                    found[id(m)] = m
                elif isinstance(m, Var) and id(m) not in own:
                    return None
    return list(found.values())


@dataclass
class _Load:
    """What the L2 model needs of one global load: its tile origins per block and trips."""
    count: NodeCount
    starts: list
    it: np.ndarray
    moves: bool


@dataclass
class TileCounts:
    """The part of a launch's counts that does not depend on how many blocks share an SM:
    everything but the HBM reads, and the loads the L2 model turns into them."""
    lc: LaunchCounts
    loads: list
    per_block_hbm: float   # element accesses at places read from memory: no reuse, always HBM


def tile_counts(kernel: Kernel, ftg: FTG, gemm_plan) -> TileCounts:
    """Charges and trip counts of every FTG node over the grid (see `charge`)."""
    swz = _swizzle_of(kernel)
    env, grid = block_env(kernel, swz)
    lc = LaunchCounts(grid, env.n, kernel.num_threads)
    loads, inflight, direct, serial, two_stage = [], {}, 0.0, {}, {}
    for node in ftg.nodes:
        c = charge(node, gemm_plan)
        it, first = _trip_counts(env, node.loops)
        total = int(it.sum())
        c.executions = total
        lc.nodes.append(c)
        lc.l2_bytes += (c.gmem_load + c.gmem_store) * total
        lc.hbm_write += c.gmem_store * total
        lc.smem_bytes += c.smem * total
        lc.zero_fill_bytes += c.zero_fill * total
        lc.tensor_flops += c.tensor_flops * total
        lc.cuda_ops += c.cuda_ops * total
        lc.sfu_ops += c.sfu_ops * total
        if not c.gmem_load or total == 0:
            continue
        inner = node.loops[-1] if node.loops else None
        stages = _stages(inner) if inner is not None else 1
        lc.pipelined |= stages >= 2
        key = id(inner) if inner is not None else None
        if inner is not None and stages <= 1:
            serial[key] = max(serial.get(key, 0), total)  # one wait per iteration
        elif inner is not None and stages == 2:
            two_stage[key] = max(two_stage.get(key, 0), total)
        inflight[key] = inflight.get(key, 0) + c.gmem_load * max(1, stages - 1)
        fenv = _Env(first, env.n)
        loop_vars = {id(l.var) for l in node.loops}
        origin = node.stmt.src.starts if c.buffer is not None else \
            _nest_origin(node.stmt, set(first))
        if origin is None:  # what the nest reads depends on memory: no reuse assumed
            c.hbm_load = float(c.gmem_load * total)
            direct += c.hbm_load
            continue
        moves = any(_vars_in(s) & loop_vars for s in origin)
        loads.append(_Load(c, [fenv.eval(s) for s in origin], it, moves))
    lc.loop_phases = sum(c.executions for c, node in zip(lc.nodes, ftg.nodes) if node.loops)
    lc.inflight_per_block = max(inflight.values(), default=0)
    lc.exposed_loads = sum(serial.values())
    lc.two_stage_loads = sum(two_stage.values())
    lc.swizzle = (swz.panel_size, swz.order) if swz is not None else None
    return TileCounts(lc, loads, direct)


def with_hbm_reads(tc: TileCounts, wave_blocks: int, l2_bytes: int) -> LaunchCounts:
    """The launch's counts with HBM reads under the L2 model for `wave_blocks` blocks resident
    at a time (a fresh LaunchCounts: the TileCounts can be reused for another residency)."""
    src = tc.lc
    lc = LaunchCounts(src.grid, src.num_blocks, src.threads, [], 0.0, src.hbm_write,
                      src.l2_bytes, src.smem_bytes, src.tensor_flops, src.cuda_ops, src.sfu_ops,
                      src.inflight_per_block, src.pipelined, src.loop_phases, src.swizzle,
                      src.exposed_loads, src.zero_fill_bytes, src.two_stage_loads)
    by_node = {id(load.count): load for load in tc.loads}
    wave = np.arange(lc.num_blocks, dtype=np.int64) // max(1, wave_blocks)
    per_buffer, gathered = {}, 0.0
    for c in src.nodes:
        c = dataclasses.replace(c)
        lc.nodes.append(c)
        load = by_node.get(id(src.nodes[len(lc.nodes) - 1]))
        if load is None:
            continue
        c.hbm_load = float(c.gmem_load * fetched_tiles(wave, load.starts, load.it, load.moves))
        if c.buffer is None:   # a T.Parallel nest's gather: its elements, not one buffer's tiles
            gathered += c.hbm_load
            continue
        entry = per_buffer.setdefault(id(c.buffer), [c.buffer, 0.0])
        entry[1] += c.hbm_load
    lc.hbm_read = tc.per_block_hbm + gathered
    for buffer, modelled in per_buffer.values():
        shape = buffer.static_shape()
        size = int(np.prod(shape)) * buffer.dtype.bytes if shape is not None else None
        if size is not None and size <= l2_bytes // 2:
            modelled = min(modelled, float(size))
        lc.hbm_read += modelled
    return lc


def count_launch(kernel: Kernel, ftg: FTG, gemm_plan, wave_blocks: int,
                 l2_bytes: int) -> LaunchCounts:
    """Totals of one launch over its grid, with `wave_blocks` blocks resident at a time."""
    return with_hbm_reads(tile_counts(kernel, ftg, gemm_plan), wave_blocks, l2_bytes)
