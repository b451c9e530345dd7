"""Tile recommendation for a @tilecraft.jit factory: enumerate configurations, keep the legal
ones, rank them by the cost model's predicted time.

A configuration is legal when its prim_func builds, every gemm tile is a whole number of the
mma.sync fragment (m16n8k16 for fp16 / bf16: M % 16, N % 8, K % 16), the block splits every
gemm in whole instructions (warpgroups in m64nNk16 where the compiler picks wgmma, else warps
in m16n8k16), layout inference succeeds, and the block's shared memory (planned as
the compiler plans it), registers (estimated from the inferred fragment layouts) and threads
fit the target. A configuration that raises TileError anywhere on that path is skipped with
the error as its reason.
"""
from __future__ import annotations

import inspect
import itertools
import math
from dataclasses import dataclass

from ..errors import TileError, span_scope
from ..ir.buffer import FRAGMENT
from ..ir.ftg import FTG
from ..ir.stmt import Allocate, PrimFunc
from ..ir.tileop import Gemm
from ..ir.visitor import walk
from .cost import Cost, estimate, plan
from ..analysis.counts import MMA_DTYPES
from ..target import get_target

# Candidate values for the usual tunable parameters, used for those a factory has.
DEFAULT_VALUES = {
    "block_M": [16, 32, 64, 128, 256],
    "block_N": [16, 32, 64, 128, 256],
    "block_K": [16, 32, 64, 128],
    "block_H": [16, 32, 64],
    "num_stages": [1, 2, 3, 4],
    "threads": [128, 256],
}


@dataclass
class Candidate:
    config: dict
    cost: Cost | None = None
    reason: str = ""          # why it was skipped; empty when legal
    rank: int = 0
    bound: float | None = None  # left unplanned: a lower bound on its time (carver.search)

    @property
    def ok(self) -> bool:
        return self.cost is not None and not self.reason

    @property
    def time(self) -> float:
        return self.cost.time if self.cost is not None else math.inf

    def row(self) -> dict:
        """The figures a person needs to accept, pin or override this configuration."""
        c = self.cost
        res = c.resources
        t = get_target(c.target)
        return {
            "rank": self.rank, "config": dict(self.config),
            "time_us": c.time * 1e6, "tflops": c.tflops,
            "arith_intensity": c.arithmetic_intensity,
            "hbm_mb": c.hbm_bytes / 1e6, "l2_mb": c.l2_bytes / 1e6, "smem_mb": c.smem_bytes / 1e6,
            "zero_fill_mb": c.zero_fill_bytes / 1e6,
            "bound": c.bound, "roofline_util": c.roofline_util,
            "utilization": c.utilization,
            "blocks_per_sm": res.blocks_per_sm,
            "occupancy": res.warps_per_sm * 32 / t.max_threads_per_sm,
            "occupancy_limit": res.occupancy_limit, "waves": c.waves,
            "regs_per_thread": res.regs_per_thread, "smem_per_block": res.smem_per_block,
            "warp_partitions": list(res.warp_partitions),
            "placement": list(res.placement),
        }


def underlying(factory):
    """The plain Python factory behind a @tilecraft.jit object (or the factory itself)."""
    return getattr(factory, "factory", None) or getattr(factory, "__wrapped__", factory)


def default_space(factory, args=(), fixed=None) -> dict:
    """{parameter: candidates} for the usual tunables the factory takes and the caller did not
    fix (positionally or by keyword)."""
    fn = underlying(factory)
    params = list(inspect.signature(fn).parameters)
    taken = set(params[:len(args)]) | set(fixed or {})
    return {p: list(v) for p, v in DEFAULT_VALUES.items() if p in params and p not in taken}


def _mma_problem(func: PrimFunc) -> str:
    for k in func.kernels():
        for n in walk(k.body):
            if isinstance(n, Gemm) and n.A.buffer.dtype.name in MMA_DTYPES:
                m, nn, kk = n.dims()
                if m % 16 or nn % 8 or kk % 16:
                    return (f"gemm tile {m}x{nn}x{kk} is not a multiple of the m16n8k16 "
                            "tensor-core fragment")
    return ""


def _register_floor(func: PrimFunc, target) -> str:
    """Reject early what cannot fit in registers: a fragment spread over the block holds at
    least elements / threads values per thread."""
    for k in func.kernels():
        words = 0
        for n in walk(k.body):
            if isinstance(n, Allocate) and n.buffer.scope == FRAGMENT:
                shape = n.buffer.static_shape() or (1,)
                words += math.ceil(math.prod(shape) / k.num_threads) * n.buffer.dtype.bits / 32
        if words > target.max_regs_per_thread:
            return (f"fragments need at least {int(words)} registers per thread > "
                    f"{target.max_regs_per_thread}")
        if k.num_threads > target.max_threads_per_block:
            return f"{k.num_threads} threads > {target.max_threads_per_block} per block"
    return ""


def _shared_floor(func: PrimFunc, target) -> str:
    """Reject early what cannot fit in shared memory: the tiles a loop body touches are live
    together for the whole loop, each with its pipeline versions."""
    from .cost import _shared_stages
    for k in func.kernels():
        ftg = FTG(k)
        versions = _shared_stages(ftg)
        per_loop: dict = {}
        for node in ftg.nodes:
            for loop in node.loops:
                touched = per_loop.setdefault(id(loop), {})
                for b in node.reads + node.writes:
                    shape = b.static_shape()
                    if b.scope.startswith("shared") and shape is not None:
                        touched[id(b)] = math.prod(shape) * b.dtype.bytes * versions.get(id(b), 1)
        floor = max((sum(t.values()) for t in per_loop.values()), default=0)
        if floor > target.smem_per_block:
            return (f"shared memory at least {floor // 1024} KB > "
                    f"{target.smem_per_block // 1024} KB per block")
    return ""


def _gemm_split_problem(func: PrimFunc, target) -> str:
    """Reject before planning a gemm the block's warps (mma.sync) or warpgroups (wgmma, where
    the compiler picks it) cannot split in whole instructions."""
    from .cost import gemm_planner
    for k in func.kernels():
        plan_of = gemm_planner(k.num_threads, target.arch)
        for n in walk(k.body):
            if isinstance(n, Gemm):
                m, nn, _ = n.dims()
                plan_of(n, m, nn)  # raises TileError where no split fits
    return ""


def build(factory, args, config: dict, target) -> tuple:
    """(Candidate, prim_func) for one configuration after the checks that need no compiler
    pass (the prim_func is None when the configuration is already rejected)."""
    t = get_target(target)
    cand = Candidate(dict(config))
    try:
        func = underlying(factory)(*args, **config)
        if not isinstance(func, PrimFunc):
            cand.reason = f"the factory returned {type(func).__name__}, not a prim_func"
            return cand, None
        # IR built by the passes takes the span in scope; without one every expression would
        # search the Python stack for the user's line.
        with span_scope(func.span):
            cand.reason = (_mma_problem(func) or _register_floor(func, t)
                           or _shared_floor(func, t) or _gemm_split_problem(func, t))
    except Exception as e:  # noqa: BLE001 - see _rejected
        cand.reason = _rejected(e)
    return cand, (None if cand.reason else func)


def finish(cand: Candidate, func: PrimFunc, target) -> Candidate:
    """Plan and predict a configuration `build` let through."""
    t = get_target(target)
    try:
        with span_scope(func.span):
            cand.cost = estimate(func, t, plan(func, t))
    except Exception as e:  # noqa: BLE001 - see _rejected
        cand.reason = _rejected(e)
        return cand
    if not cand.cost.resources.fits:
        cand.reason = "; ".join(cand.cost.resources.problems)
    return cand


def _rejected(e: Exception) -> str:
    # What the compiler would refuse (TileError) or a factory's own checks are a verdict on
    # the configuration; anything else is a bug to see.
    if isinstance(e, TileError):
        return "TileError: " + str(e).splitlines()[0]
    if isinstance(e, (AssertionError, ValueError, ZeroDivisionError)):
        return f"{type(e).__name__}: {e}"
    raise e


def evaluate(factory, args, config: dict, target="h100") -> Candidate:
    """Build one configuration and predict it; a Candidate with a reason when it is illegal."""
    cand, func = build(factory, args, config, target)
    return cand if func is None else finish(cand, func, target)


def configurations(factory, args, space=None, fixed=None) -> list:
    """Every configuration of the space (default: default_space), fixed keywords added."""
    fixed = dict(fixed or {})
    space = default_space(factory, args, fixed) if space is None else dict(space)
    names = list(space)
    return [{**fixed, **dict(zip(names, values))}
            for values in itertools.product(*(space[n] for n in names))]


def enumerate_candidates(factory, args, space=None, target="h100", fixed=None) -> list:
    """Every configuration of the space (fixed keywords added to each), evaluated."""
    return [evaluate(factory, args, config, target)
            for config in configurations(factory, args, space, fixed)]


def preference(time: float, num_stages, smem: int, regs: int, zero_fill: float = 0.0) -> tuple:
    """Sort key of a candidate: fastest predicted first; among equal predictions the tile that
    fills fewer shared-memory bytes with zeros past the tensors' edges first, then the deeper
    software pipeline (the roofline counts no latency, which more stages hide), then less
    shared memory, then fewer registers.

    Zero fill moves nothing from DRAM, so the roofline ties an HBM-bound tile that reaches past
    M with one that does not, yet it costs TMA time where A's box is most of a stage, and the
    tiles the model tied at M 16 measured in the order of their zero-filled bytes
    (bench/gemm.md)."""
    return (time, zero_fill, -(num_stages or 0), smem, regs)


def rank(candidates) -> list:
    """The legal candidates in preference order (`preference`), numbered from 1."""
    legal = [c for c in candidates if c.ok]
    legal.sort(key=lambda c: preference(c.time, c.config.get("num_stages"),
                                        c.cost.resources.smem_per_block,
                                        c.cost.resources.regs_per_thread,
                                        c.cost.zero_fill_bytes))
    for i, c in enumerate(legal, start=1):
        c.rank = i
    return legal


def recommend(factory, args, space=None, target="h100", top: int | None = 10, fixed=None,
              candidates_out: list | None = None) -> list:
    """Ranked legal configurations (the best `top`, or all with top=None) for the factory on
    the problem `args` (its positional arguments), predicted for `target` ("auto": this
    machine's, placement.machine_target()). space: {parameter: candidate values};
    default: the usual tunables the factory has (DEFAULT_VALUES). candidates_out, if given,
    receives every evaluated candidate, the skipped ones with their reasons."""
    if target == "auto":
        from ..placement import machine_target
        target = machine_target()
    if top is not None and candidates_out is None:
        # Only the best few are wanted: plan just what can reach them (carver.search; the
        # same top `top` as planning every configuration).
        from .search import best_candidates
        cands = best_candidates(factory, args, configurations(factory, args, space, fixed),
                                target, keep=top)
    else:
        cands = enumerate_candidates(factory, args, space, target, fixed)
    if candidates_out is not None:
        candidates_out.extend(cands)
    ranked = rank(cands)
    return ranked if top is None else ranked[:top]


def format_table(rows: list, keys=None) -> str:
    """A plain-text table of Candidate.row() dicts."""
    if not rows:
        return "(no legal configuration)"
    keys = keys or sorted({k for r in rows for k in r["config"]})
    head = ["#"] + list(keys) + ["time us", "TFLOP/s", "AI F/B", "HBM MB", "L2 MB", "zeros MB",
                                 "bound", "util", "blk/SM", "occ", "waves", "regs", "smem KB",
                                 "warps"]
    lines = []
    for r in rows:
        warps = ",".join(f"{wm}x{wn}" for _, _, wm, wn in r["warp_partitions"]) or "-"
        lines.append([str(r["rank"])] + [str(r["config"].get(k, "")) for k in keys] + [
            f"{r['time_us']:.1f}", f"{r['tflops']:.0f}", f"{r['arith_intensity']:.0f}",
            f"{r['hbm_mb']:.0f}", f"{r['l2_mb']:.0f}", f"{r['zero_fill_mb']:.0f}", r["bound"],
            f"{r['roofline_util']:.2f}",
            str(r["blocks_per_sm"]), f"{r['occupancy']:.2f}", str(r["waves"]),
            str(r["regs_per_thread"]), f"{r['smem_per_block'] / 1024:.0f}", warps])
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(l) for l in lines])
