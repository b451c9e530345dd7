"""Masks decided once per tile (tileops/uniform_select).

The tile-wide condition must imply the mask at every element (else a masked element would be
dropped) and, for conditions linear in the loop variables, be exactly "the mask holds at every
element" (else the fast path would be missed); both are checked against brute force. The
generated CUDA of causal attention branches once per key tile; the emulator tests of the
attention examples run both branches against the float64 reference."""
import itertools
import os
import sys

import numpy as np
import pytest

from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.carver.recommend import underlying
from tilecraft.interp.values import evaluate
from tilecraft.ir import dtypes as dt
from tilecraft.ir.expr import Var, const, logical, select
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.tileops.uniform_select import unswitch_selects

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def _vars(*names):
    return [Var(n, dt.int32) for n in names]


def _brute_force(cond, i, j, outer_env, extents, starts=(0, 0)):
    ii, jj = np.meshgrid(np.arange(starts[0], starts[0] + extents[0]),
                         np.arange(starts[1], starts[1] + extents[1]), indexing="ij")
    values = evaluate(cond, {id(i): ii, id(j): jj, **outer_env})
    return bool(np.all(np.broadcast_to(values, ii.shape)))


@pytest.mark.parametrize("starts", [(0, 0), (3, -2)])
def test_tile_wide_condition_of_a_causal_mask_is_exact(starts):
    bx, k, i, j = _vars("bx", "k", "i", "j")
    extents = (64, 32)
    cond = logical("and", bx * 64 + i >= k * 32 + j, k * 32 + j < 100)
    got = unswitch_selects([i, j], [const(extents[0]), const(extents[1])],
                           [const(starts[0]), const(starts[1])],
                           select(cond, const(0.0, dt.float32), const(-1.0, dt.float32)))
    assert got is not None
    whole, fast = got
    assert isinstance(fast, type(const(0.0, dt.float32))) and fast.value == 0.0
    seen = set()
    for b, kk in itertools.product(range(4), range(6)):
        env = {id(bx): np.int64(b), id(k): np.int64(kk)}
        expected = _brute_force(cond, i, j, env, extents, starts)
        assert bool(evaluate(whole, env)) == expected, (b, kk)
        seen.add(expected)
    assert seen == {True, False}  # both paths exist over this range


@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
def test_each_comparison_direction(op):
    n, i, j = _vars("n", "i", "j")
    lhs, rhs = 2 * i - j + n, const(40)
    cond = {"<": lhs < rhs, "<=": lhs <= rhs, ">": lhs > rhs, ">=": lhs >= rhs}[op]
    whole, _ = unswitch_selects([i, j], [const(8), const(5)], [const(0), const(0)],
                                select(cond, const(1.0, dt.float32), const(0.0, dt.float32)))
    for value in range(0, 60):
        env = {id(n): np.int64(value)}
        assert bool(evaluate(whole, env)) == _brute_force(cond, i, j, env, (8, 5))


def test_or_and_nonlinear_conditions():
    k, i, j = _vars("k", "i", "j")
    body = select(i // 2 < k, const(1.0, dt.float32), const(0.0, dt.float32))
    assert unswitch_selects([i, j], [const(8), const(8)], [const(0), const(0)], body) is None
    # A disjunction with one undecidable side is still decided by the other: sufficient only.
    cond = logical("or", i // 2 < k, i + k >= 10)
    whole, _ = unswitch_selects([i, j], [const(8), const(8)], [const(0), const(0)],
                                select(cond, const(1.0, dt.float32), const(0.0, dt.float32)))
    for value in range(20):
        env = {id(k): np.int64(value)}
        if bool(evaluate(whole, env)):
            assert _brute_force(cond, i, j, env, (8, 8))
    assert bool(evaluate(whole, {id(k): np.int64(10)}))


def test_symbolic_extent_is_left_alone():
    n, i = _vars("n", "i")
    body = select(i < 5, const(1.0, dt.float32), const(0.0, dt.float32))
    assert unswitch_selects([i], [n], [const(0)], body) is None


def _cuda(func):
    source, _ = emit_cuda(pipelines.cuda_sm80(func))
    return source


@pytest.mark.parametrize("is_causal", [False, True])
def test_causal_attention_masks_once_per_tile(is_causal):
    from flash_attention import flash_attention
    src = _cuda(underlying(flash_attention)(1, 2, 200, 64, is_causal, block_M=64, block_N=32))
    masked = [line for line in src.splitlines() if "? 0.0f : __int_as_float(0xff800000)" in line]
    unmasked = [line for line in src.splitlines() if "acc_s[" in line and "] = 0.0f;" in line]
    # Causal: the diagonal / ragged tiles keep the per-element mask, the others skip it. Not
    # causal: only the ragged last key tile is masked (200 is not a multiple of 32).
    assert masked and unmasked


def test_mask_that_reads_a_tile_is_left_per_element():
    from tilecraft.ir.buffer import Buffer
    from tilecraft.ir.expr import BufferLoad
    k, i = _vars("k", "i")
    table = Buffer("table", (4,), dt.int32, "shared.dyn")
    body = select(i < BufferLoad(table, (k,)), const(1.0, dt.float32), const(0.0, dt.float32))
    assert unswitch_selects([i], [const(8)], [const(0)], body) is None


def test_pass_config_turns_it_off():
    from flash_attention import flash_attention
    func = underlying(flash_attention)(1, 2, 200, 64, True, block_M=64, block_N=32)
    src, _ = emit_cuda(pipelines.cuda(func, "sm_80", None, {"tl.disable_uniform_masks": True}))
    assert not [line for line in src.splitlines() if "acc_s[" in line and "] = 0.0f;" in line]
