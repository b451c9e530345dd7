"""The roofline cost model (paper section 4.2) over a specialized kernel's FTG.

For one launch, counts.py gives the bytes each memory level moves and the operations each
compute unit performs, for the program the compiler builds for the target's arch (`plan`: on
sm_90a wgmma where a gemm fits and a TMA producer warpgroup for pipelined loops, else
ldmatrix + mma.sync and cp.async). This module adds what the target can hold (shared memory, registers,
threads: blocks per SM, occupancy, waves) and turns the counts into time:

    t = max_i(bytes_i / BW_i, ops_j / P_j) + t_intrinsic

over the levels i in (HBM, L2, shared) and the units j in (tensor cores, CUDA cores, SFUs).
Refinements, each a single stated rule:
- per-SM units (shared memory, tensor / CUDA cores, SFUs) lose the last wave's idle SMs: their
  time is scaled by ceil(blocks / SMs) * SMs / blocks;
- an SM sub-partition issues from its own warps, so fewer than 4 resident warps per SM use
  only that many of its 4 tensor / CUDA-core / SFU pipes;
- Little's law caps HBM and L2 bandwidth at (bytes a block keeps in flight x resident blocks x
  active SMs) / latency;
- memory and compute overlap only when a loop with global loads is software-pipelined
  (num_stages >= 2) or at least two blocks share an SM; otherwise their times add;
- t_intrinsic = launch overhead + waves x 2 x first-load latency (each wave's first load and
  last store are not hidden: pipeline prologue and epilogue) + a fixed latency for every tile
  op executed inside a loop (target.phase_cycles: the dependent issue, barrier and drain
  between the phases of an iteration), spread over the SMs and overlapped between the
  warpgroups that issue on one SM (its resident blocks' consumer warpgroups). This is what
  makes many thin iterations (block_K = 16, block_N = 16) cost more than few thick ones at
  equal traffic and FLOPs. A loop that loads from global memory
  without a software pipeline (num_stages <= 1) adds one L2 latency per iteration, likewise
  spread over the SMs and the blocks they hold (one-stage GEMM configs measured far slower
  than the roofline alone says: bench/carver_search.md). A warp-specialized loop of two
  stages is charged so too: its consumers free a stage only when the wgmma batch after it
  is issued, so no load is ahead of the tensor cores (two-stage GEMM and convolution tiles
  measured well behind three and four stages: bench/carver_search.md, bench/conv2d.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.buffer import FRAGMENT, LOCAL, is_shared
from ..ir.ftg import FTG
from ..ir.stmt import Kernel, PrimFunc
from ..ir.tileop import Copy, Gemm
from ..ir.visitor import walk
from ..passes.parallel_nests import allocated, gather_targets
from ..analysis.counts import MMA_DTYPES, LaunchCounts, _stages, tile_counts, with_hbm_reads
from ..target import Target, get_target
from ..ir.annotations import (LAYOUTS, MIN_BLOCKS_PER_SM, PRODUCER_THREADS, SMEM_BYTES,
                              WARPGROUP_THREADS)

REG_OVERHEAD = 32      # addresses, loop counters, indices, predicates (estimate)
REG_GRANULE = 8        # registers per thread are allocated in multiples of 8
WARPGROUP = WARPGROUP_THREADS   # what setmaxnreg moves registers between
MEMORY_UNITS = ("hbm", "l2", "smem")
COMPUTE_UNITS = ("tensor", "cuda", "sfu")


@dataclass
class Resources:
    threads: int
    smem_per_block: int
    regs_per_thread: int
    blocks_per_sm: int
    occupancy_limit: str
    fits: bool
    problems: list = field(default_factory=list)
    placement: list = field(default_factory=list)  # (buffer, scope, bytes per block, note)
    warp_partitions: list = field(default_factory=list)  # (C buffer, policy, split M, N)
    producer_threads: int = 0  # the TMA producer warpgroup of a warp-specialized kernel
    regs_per_block: int = 0    # registers the SM allocates for one block (all roles)

    @property
    def warps_per_sm(self) -> int:
        return self.blocks_per_sm * self.threads // 32


@dataclass
class Cost:
    """Every term of the model for one launch (or a sum over a program's launches)."""
    target: str
    grid: tuple
    num_blocks: int
    resources: Resources
    waves: int
    hbm_bytes: float
    hbm_read: float
    hbm_write: float
    l2_bytes: float
    smem_bytes: float
    tensor_flops: float
    cuda_ops: float
    sfu_ops: float
    terms: dict          # unit -> seconds (memory levels and compute units)
    t_roofline: float
    t_intrinsic: float
    time: float
    bound: str           # the unit whose term is largest
    overlapped: bool
    effective_bw: dict   # level -> bytes/s after the Little's-law cap
    counts: list = field(default_factory=list)  # LaunchCounts per launch
    zero_fill_bytes: float = 0.0  # loaded tiles' bytes past the tensors' edges (zeros)

    @property
    def flops(self) -> float:
        """Floating-point work: tensor-core FLOPs plus CUDA-core lane ops (an FMA as 2)."""
        return self.tensor_flops + self.cuda_ops

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.hbm_bytes if self.hbm_bytes else math.inf

    @property
    def tflops(self) -> float:
        return self.flops / self.time / 1e12

    @property
    def utilization(self) -> dict:
        """How busy each unit is over the predicted time (its term / time)."""
        return {k: v / self.time for k, v in self.terms.items()}

    @property
    def roofline_util(self) -> float:
        """The binding unit's share of the predicted time: 1.0 means the prediction sits on
        the roof, lower means wave tails, latency or intrinsic overheads eat into it."""
        return self.terms[self.bound] / self.time if self.time else 0.0


# --- resources ------------------------------------------------------------------------

def _shared_stages(ftg: FTG) -> dict:
    """id(shared buffer) -> versions of it the software pipeline keeps: num_stages of the
    pipelined loop whose copy from global memory, or gather (the T.Parallel nests
    pipeline_loops versions: T.c2d_im2col's), fills it."""
    out = {}
    for node in ftg.nodes:
        s = node.stmt
        if not node.loops:
            continue
        if isinstance(s, Copy) and s.src.buffer.scope == "global":
            filled = [s.dst.buffer]
        else:
            filled = gather_targets(s) or ()
        n = max(_stages(l) for l in node.loops)
        for b in filled:
            if is_shared(b.scope):
                out[id(b)] = max(out.get(id(b), 1), n)
    return out


def _fragment_regs(b, layouts, threads: int) -> int:
    words_per = max(1, b.dtype.bits) / 32
    if layouts is not None and layouts.has(b):
        per_thread = layouts.buffer(b).locals_per_thread
    else:
        shape = b.static_shape() or (1,)
        per_thread = math.ceil(math.prod(shape) / threads)
    return math.ceil(per_thread * words_per)


def _rules(arch: str):
    """The instruction facts of the backend that compiles for arch (the cost model asks the
    compiler for them; it knows no backend itself)."""
    from ..compiler import rules_for
    return rules_for(arch)


def gemm_planner(threads: int, arch: str):
    """gemm_plan for counts.charge: (instruction, split along M, split along N) of each gemm as
    the compiler lowers it for `threads` consumer threads (the backend's rule)."""
    return _rules(arch).gemm_planner(threads, arch)


def _register_roles(t: Target, consumer: int, producer: int, regs: int, problems: list):
    """(registers per thread the SM allocates for the block, the block's register total).

    Without a producer every thread gets the consumers' count. A warp-specialized kernel is
    emitted with __launch_bounds__(T + 128, 1); from 384 threads on it also shares the file
    between roles with setmaxnreg, for which ptxas fixes the count at entry to what those
    bounds allow (the whole file over the block's threads): the block then holds every register
    of the SM, one block per SM, and the consumers may grow to warp_specialize's setmaxnreg."""
    threads = consumer + producer
    # No register moving where the producer is a warp (setmaxnreg acts on warpgroups).
    grown = _rules(t.arch).consumer_registers(consumer) if producer >= WARPGROUP else None
    if grown is not None:
        if regs > grown:
            problems.append(f"about {regs} registers per consumer thread > {grown} (setmaxnreg)")
        entry = min(t.max_regs_per_thread, t.regs_per_sm // threads // REG_GRANULE * REG_GRANULE)
        return entry, t.regs_per_sm
    per = min(regs, t.max_regs_per_thread)
    warps = math.ceil(threads / 32)
    return per, warps * math.ceil(per * 32 / 256) * 256


def resources(kernel: Kernel, ftg: FTG, target: Target, layouts=None,
              smem_bytes: int | None = None, producer_threads: int = 0) -> Resources:
    """What one block needs and how many fit on an SM. smem_bytes: the planned arena (with
    reuse between tiles whose lifetimes do not meet); without it, the sum of the tiles with
    their pipeline versions. producer_threads: the warpgroup warp specialization adds."""
    t = target
    consumer = kernel.num_threads
    threads = consumer + producer_threads
    stages = _shared_stages(ftg)
    smem, regs, placement, problems = 0, REG_OVERHEAD, [], []
    for b in allocated(kernel.body):
        shape = b.static_shape()
        nbytes = math.prod(shape) * b.dtype.bytes if shape is not None else 0
        if is_shared(b.scope):
            k = stages.get(id(b), 1)
            smem += nbytes * k
            placement.append((b.name, "shared", nbytes * k, f"x{k} stages" if k > 1 else ""))
        elif b.scope in (FRAGMENT, LOCAL):
            r = (_fragment_regs(b, layouts, consumer) if b.scope == FRAGMENT
                 else math.ceil(math.prod(shape or (1,)) * b.dtype.bits / 32))
            regs += r
            placement.append((b.name, "registers", nbytes, f"{r} regs/thread"))
    partitions, staging = [], 0
    plan_of = gemm_planner(consumer, t.arch)
    for node in ftg.nodes:
        if isinstance(node.stmt, Gemm):
            op = node.stmt
            m, n, _ = op.dims()
            instruction, sm, sn = plan_of(op, m, n)
            partitions.append((op.C.buffer.name, op.policy.name, sm, sn))
            if instruction == "mma":
                # ldmatrix stages each warp's A and B fragments of one k16 step in registers;
                # wgmma reads shared operands straight from their descriptors.
                staging = max(staging, (m // sm // 16) * 4 + (n // sn // 8) * 2)
    regs = math.ceil((regs + staging) / REG_GRANULE) * REG_GRANULE
    wanted = kernel.attrs.get(MIN_BLOCKS_PER_SM)
    if wanted:  # T.annotate_min_blocks_per_sm: ptxas keeps within the n-th share (or spills)
        regs = min(regs, t.regs_per_sm // (wanted * threads) // REG_GRANULE * REG_GRANULE)
    if smem_bytes is not None:
        smem = smem_bytes
    if threads > t.max_threads_per_block:
        problems.append(f"{threads} threads > {t.max_threads_per_block} per block")
    if smem > t.smem_per_block:
        problems.append(f"shared memory {smem // 1024} KB > {t.smem_per_block // 1024} KB "
                        "per block")
    if regs > t.max_regs_per_thread:
        problems.append(f"about {regs} registers per thread > {t.max_regs_per_thread}")
    _, regs_block = _register_roles(t, consumer, producer_threads, regs, problems)
    limits = {"blocks": t.max_blocks_per_sm, "threads": t.max_threads_per_sm // threads,
              "registers": t.regs_per_sm // regs_block,
              "shared": (t.smem_per_sm // (smem + t.smem_reserved_per_block)) if smem else
              t.max_blocks_per_sm}
    limit = min(limits, key=lambda k: limits[k])
    bps = limits[limit] if not problems else 0
    if bps == 0 and not problems:
        problems.append(f"no block fits on an SM ({limit})")
    return Resources(threads, smem, regs, bps, limit, not problems, problems, placement,
                     partitions, producer_threads, regs_block)


# --- time -----------------------------------------------------------------------------

def tensor_seconds(lc: LaunchCounts, t: Target, fallback_dtype: str) -> float:
    """Tensor-core time of the launch on the whole chip at full issue: every gemm's FLOPs at
    the rate of the instruction it runs on (mma.sync is slower than wgmma on sm_90)."""
    total = 0.0
    for c in lc.nodes:
        if c.tensor_flops and c.executions:
            rate = t.tensor_rate(c.dtype or fallback_dtype) or t.tensor_rate("float16")
            if c.instruction == "mma":
                rate *= t.mma_sync_fraction
            total += c.tensor_flops * c.executions / rate
    return total


def estimate_launch(kernel: Kernel, target, layouts=None, smem_bytes=None,
                    producer_threads: int = 0, tiles=None) -> Cost:
    """The model for one launch. tiles: its counts.tile_counts, when already computed."""
    t = get_target(target)
    ftg = FTG(kernel)
    res = resources(kernel, ftg, t, layouts, smem_bytes, producer_threads)
    bps = max(1, res.blocks_per_sm)
    if tiles is None:
        tiles = tile_counts(kernel, ftg, gemm_planner(kernel.num_threads, t.arch))
    lc: LaunchCounts = with_hbm_reads(tiles, t.num_sms * bps, t.l2_bytes)
    return _time(t, kernel, res, lc, bps)


def consumer_warpgroups(threads: int) -> int:
    """The warpgroups among a block's computing threads, at least one. The fixed latency
    between an iteration's phases is hidden by the other warpgroups that issue on the SM:
    those of the other resident blocks, and a block's own other consumer warpgroups (one
    waits at a barrier while the other's wgmma batch runs)."""
    return max(1, threads // WARPGROUP)


def _time(t: Target, kernel: Kernel, res: Resources, lc: LaunchCounts, bps: int) -> Cost:
    blocks = lc.num_blocks
    waves = math.ceil(blocks / (t.num_sms * bps))
    active_sms = min(t.num_sms, blocks)
    resident = min(bps, math.ceil(blocks / t.num_sms))
    tail = math.ceil(blocks / t.num_sms) * t.num_sms / blocks
    # Only the warps that compute issue math: a producer warpgroup moves data.
    pipes = min(1.0, resident * (res.threads - res.producer_threads) / 32 / 4)
    inflight = lc.inflight_per_block * resident * active_sms
    bw = {"hbm": min(t.hbm_bw, inflight / t.dram_latency_s) if inflight else t.hbm_bw,
          "l2": min(t.l2_bw, inflight / t.l2_latency_s) if inflight else t.l2_bw,
          "smem": t.smem_bw}
    hbm = lc.hbm_read + lc.hbm_write
    terms = {"hbm": hbm / bw["hbm"], "l2": lc.l2_bytes / bw["l2"],
             "smem": lc.smem_bytes / t.smem_bw * tail}
    tc = tensor_seconds(lc, t, _tensor_dtype(kernel))
    terms["tensor"] = tc / pipes * tail if lc.tensor_flops else 0.0
    terms["cuda"] = lc.cuda_ops / (t.cuda_rate() * pipes) * tail
    terms["sfu"] = lc.sfu_ops / (t.sfu_ops * pipes) * tail
    overlapped = lc.pipelined or resident >= 2
    mem = max(terms[k] for k in MEMORY_UNITS)
    comp = max(terms[k] for k in COMPUTE_UNITS)
    t_roof = max(mem, comp) if overlapped else mem + comp
    groups = consumer_warpgroups(res.threads - res.producer_threads)
    t_loops = (lc.loop_phases / (active_sms * resident * groups)) * t.phase_cycles / t.clock_hz
    # A loop without a software pipeline waits for its loads in every iteration; the blocks
    # sharing an SM hide each other's waits. So does a warp-specialized loop of two stages:
    # its consumers keep a wgmma batch in flight and free a stage one iteration late, so the
    # producer's next load starts only as the last batch retires.
    waits = lc.exposed_loads + (lc.two_stage_loads if res.producer_threads else 0)
    t_exposed = waits / (active_sms * resident) * t.l2_latency_s
    t_intr = t.launch_s + waves * 2 * t.first_load_s + t_loops + t_exposed
    bound = max(terms, key=lambda k: terms[k])
    return Cost(t.name, lc.grid, blocks, res, waves, hbm, lc.hbm_read, lc.hbm_write,
                lc.l2_bytes, lc.smem_bytes, lc.tensor_flops, lc.cuda_ops, lc.sfu_ops, terms,
                t_roof, t_intr, t_roof + t_intr, bound, overlapped, bw, [lc],
                lc.zero_fill_bytes)


def _tensor_dtype(kernel: Kernel) -> str:
    for n in walk(kernel.body):
        if isinstance(n, Gemm) and (n.A.buffer.dtype.name in MMA_DTYPES or
                                    n.multiply_dtype() == "tfloat32"):
            return n.multiply_dtype()
    return "float16"


WGMMA_ARCHS = ("sm_90a",)


def plan(func: PrimFunc, target="h100", configs: dict | None = None) -> list:
    """(tile kernel, LayoutMap, planned shared bytes, producer threads) per launch, as the
    compiler builds it for the target: the compiler's own pipeline run up to the shared-memory
    plan (instructions, epilogue staging and warp specialization on sm_90a, software
    pipelines, layouts, the shared arena). The tile kernels (after instruction selection)
    carry the chosen instructions. `configs`: pass configs, as the kernel is compiled with.
    Raises TileError when the configuration does not build."""
    from ..compiler import lower
    stages = lower(func, get_target(target), configs, stop_after="plan_shared_memory",
                   keep=("infer_instructions",))
    tile, planned = stages["infer_instructions"], stages["result"]
    # Fragments keep their identity through these passes, so the planned program's layout
    # maps serve the tile program's fragments; gemm splits are recomputed from the policy.
    return [(k, p.attrs.get(LAYOUTS), p.attrs.get(SMEM_BYTES),
             p.attrs.get(PRODUCER_THREADS, 0))
            for k, p in zip(tile.kernels(), planned.kernels())]


def estimate(func, target="h100", planned: list | None = None,
             configs: dict | None = None) -> Cost:
    """The model's prediction for a specialized PrimFunc (its launches run one after another)
    or a single Kernel (layouts then estimated as elements / threads per fragment)."""
    if isinstance(func, Kernel):
        return estimate_launch(func, target)
    planned = plan(func, target, configs) if planned is None else planned
    costs = [estimate_launch(k, target, lm, smem, producer) for k, lm, smem, producer in planned]
    return costs[0] if len(costs) == 1 else _combine(costs)


def _combine(costs: list) -> Cost:
    main = max(costs, key=lambda c: c.time)
    s = lambda f: sum(getattr(c, f) for c in costs)  # noqa: E731
    terms = {k: sum(c.terms[k] for c in costs) for k in main.terms}
    return Cost(main.target, main.grid, s("num_blocks"), main.resources, s("waves"),
                s("hbm_bytes"), s("hbm_read"), s("hbm_write"), s("l2_bytes"), s("smem_bytes"),
                s("tensor_flops"), s("cuda_ops"), s("sfu_ops"), terms, s("t_roofline"),
                s("t_intrinsic"), s("time"), main.bound, all(c.overlapped for c in costs),
                main.effective_bw, [lc for c in costs for lc in c.counts],
                s("zero_fill_bytes"))
