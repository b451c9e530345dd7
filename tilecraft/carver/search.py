"""The best few configurations of a space without planning every one of them.

Predicting a configuration has a cheap part (build the prim_func, reject what cannot fit, count
what the tile program moves and computes) and an expensive part (the compiler's passes up to
the shared-memory plan, which give the layouts, the arena and warp specialization). The cheap
part alone gives a lower bound on the predicted time: every term of the model only grows from
what the counts say at full rate, since resources can only take rate away (a wave tail,
sub-partitions left idle, Little's law) and add time (waves, loop phases spread over fewer
resident blocks). So configurations are planned in order of their bound, and the search stops
once the next bound exceeds the k-th best prediction found: no configuration left can enter
the top k. The top k, their predictions and their order are exactly those of predicting
everything (tests/unit/test_carver_search.py compares both).
"""
from __future__ import annotations

import heapq
import math

from ..errors import span_scope
from ..ir.ftg import FTG
from .cost import _tensor_dtype, consumer_warpgroups, gemm_planner, tensor_seconds
from ..analysis.counts import tile_counts
from .recommend import build, finish
from ..target import get_target


def lower_bound(func, target) -> float:
    """A time no prediction of func on target can beat (seconds); see the module docstring."""
    t = get_target(target)
    total = 0.0
    with span_scope(func.span):
        for k in func.kernels():
            total += _launch_bound(k, t)
    return total


def _launch_bound(kernel, t) -> float:
    tiles = tile_counts(kernel, FTG(kernel), gemm_planner(kernel.num_threads, t.arch))
    lc = tiles.lc
    terms = [lc.hbm_write / t.hbm_bw, lc.l2_bytes / t.l2_bw, lc.smem_bytes / t.smem_bw,
             tensor_seconds(lc, t, _tensor_dtype(kernel)), lc.cuda_ops / t.cuda_rate(),
             lc.sfu_ops / t.sfu_ops]
    # The most blocks an SM could hold: the thread limit with the consumer threads alone (a
    # producer warpgroup only lowers it).
    most = max(1, min(t.max_blocks_per_sm, t.max_threads_per_sm // max(1, lc.threads)))
    blocks = lc.num_blocks
    waves = math.ceil(blocks / (t.num_sms * most))
    resident = min(most, math.ceil(blocks / t.num_sms))
    # Loop phases spread over the resident blocks and each block's consumer warpgroups, as
    # the model spreads them (its consumers are the kernel's threads).
    spread = min(t.num_sms, blocks) * resident * consumer_warpgroups(lc.threads)
    loops = lc.loop_phases / spread * t.phase_cycles / t.clock_hz
    exposed = lc.exposed_loads / spread * t.l2_latency_s
    return max(terms) + t.launch_s + waves * 2 * t.first_load_s + loops + exposed


def best_candidates(factory, args, configs: list, target, keep=None, fraction=None) -> list:
    """One Candidate per configuration, in the given order: the `keep` best legal ones (or
    the best `fraction` of those that pass the checks before planning, rounded up) fully
    predicted; a configuration that cannot reach them is left unplanned, with `bound` set to
    its lower bound (cost None, no reason)."""
    t = get_target(target)
    cands, bounds = [], {}
    for i, config in enumerate(configs):
        cand, func = build(factory, args, config, t)
        cands.append((cand, func))
        if func is not None:
            try:
                bounds[i] = lower_bound(func, t)
            except Exception:  # noqa: BLE001 - counting fails only where planning would too
                bounds[i] = 0.0  # plan it: the full path gives the verdict
    if keep is None:
        keep = max(1, math.ceil(fraction * len(bounds) - 1e-9))
    best: list = []  # max-heap (negated) of the keep best times found
    for i in sorted(bounds, key=lambda i: (bounds[i], i)):
        if len(best) >= keep and bounds[i] > -best[0]:
            cands[i][0].bound = bounds[i]
            continue
        cand = finish(cands[i][0], cands[i][1], t)
        if cand.ok:
            heapq.heappush(best, -cand.time)
            if len(best) > keep:
                heapq.heappop(best)
    return [c for c, _ in cands]


def plausible(candidates) -> int:
    """How many candidates are legal or may be (left unplanned by best_candidates)."""
    return sum(c.ok or c.bound is not None for c in candidates)

