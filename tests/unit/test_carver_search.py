"""carver.search plans only what can reach the top k: its top k (configurations, order and
every Cost number) must be exactly those of predicting the whole space, and its bound must
never exceed a prediction."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import gemm  # noqa: E402

from tilecraft.autotuner import space  # noqa: E402
from tilecraft.carver.recommend import enumerate_candidates, rank, underlying  # noqa: E402
from tilecraft.carver.search import best_candidates, lower_bound, plausible  # noqa: E402

SPACE = {"block_M": [16, 64, 128, 256], "block_N": [64, 128, 256], "block_K": [32, 64],
         "num_stages": [1, 3], "threads": [128, 256]}


def _numbers(c):
    cost = c.cost
    return (c.config, cost.time, cost.hbm_bytes, cost.l2_bytes, cost.smem_bytes,
            cost.tensor_flops, dict(cost.terms), cost.t_intrinsic, cost.waves,
            cost.resources.blocks_per_sm, cost.resources.regs_per_thread,
            cost.resources.smem_per_block)


@pytest.mark.parametrize("shape,target", [((8192, 8192, 8192), "h100"),
                                          ((512, 12288, 4096), "h100"),
                                          ((4096, 1024, 7168), "a100")])
def test_top_k_identical_to_predicting_everything(shape, target):
    configs = space.grid(SPACE)
    full = rank(enumerate_candidates(gemm.matmul, shape, SPACE, target))
    k = 5
    fast = best_candidates(gemm.matmul, shape, configs, target, keep=k)
    assert len(fast) == len(configs)
    assert [_numbers(c) for c in rank(fast)[:k]] == [_numbers(c) for c in full[:k]]
    # Something was left unplanned, and only what cannot reach the k-th prediction.
    skipped = [c for c in fast if c.bound is not None]
    assert skipped and all(c.cost is None for c in skipped)
    assert min(c.bound for c in skipped) > full[k - 1].time
    assert plausible(fast) >= len(full)


def test_bound_never_exceeds_the_prediction():
    fn = underlying(gemm.matmul)
    for c in enumerate_candidates(gemm.matmul, (2048, 2048, 2048), SPACE, "h100"):
        if c.ok:
            assert lower_bound(fn(2048, 2048, 2048, **c.config), "h100") <= c.time


def test_fraction_keeps_rounded_up_share():
    configs = space.grid(SPACE)
    fast = best_candidates(gemm.matmul, (8192, 8192, 8192), configs, "h100", fraction=0.05)
    planned = [c for c in fast if c.ok]
    assert len(planned) >= math.ceil(0.05 * plausible(fast))


def test_predict_best_ranks_bounds_after_predictions():
    fn = underlying(gemm.matmul)
    problem = space.Problem((8192, 8192, 8192), {}, {})
    configs = space.grid(SPACE)
    preds = space.predict_best(fn, problem, configs, "h100", 0.05)
    order = space.rank_legal(preds, "h100", "matmul", problem, None)
    keep = space.prune([preds[i].time for i in order], 0.05)
    direct = [space.predict_one(fn, problem.args, {}, configs[order[i]], "h100") for i in keep]
    assert [preds[order[i]] for i in keep] == direct
