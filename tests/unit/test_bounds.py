"""tilecraft.arith.bounds: interval bounds of integer expressions and the div / mod / min / max
eliminations they allow. Every rewrite is also checked by evaluation: on random assignments
inside the variables' bounds the simplified expression has the value of the original."""
import random
from types import SimpleNamespace

import numpy as np
import pytest

from tilecraft.arith.bounds import bound_of, simplify, var_range
from tilecraft.ir.expr import Binary, Const, Var, const, minmax
from tilecraft.ir.visitor import walk
from tilecraft.interp.values import Evaluator


def evaluate(e, values: dict) -> int:
    """values: {var: int}."""
    machine = SimpleNamespace(env={id(v): np.int64(x) for v, x in values.items()})
    return int(Evaluator(machine).eval(e))


def ops_in(e) -> set:
    return {n.op for n in walk(e) if isinstance(n, Binary)}


def assert_same_value(before, after, bounds: dict, samples=200, seed=0):
    rng = random.Random(seed)
    for _ in range(samples):
        values = {v: rng.randint(lo, hi) for v, (lo, hi) in bounds.items()}
        assert evaluate(before, values) == evaluate(after, values), (before, after, values)


def with_bounds(**ranges):
    vars_ = {name: Var(name) for name in ranges}
    bounds = {vars_[n]: r for n, r in ranges.items()}
    return vars_, bounds, {id(v): r for v, r in bounds.items()}


# --- eliminations ----------------------------------------------------------------

def test_floordiv_drops_the_bounded_remainder():
    (v, bounds, vb) = with_bounds(a=(0, 7), b=(0, 15))
    a, b = v["a"], v["b"]
    e = (a * 16 + b) // 16
    out = simplify(e, vb)
    assert out is a
    assert_same_value(e, out, bounds)


def test_floordiv_kept_when_remainder_may_reach_the_divisor():
    (v, bounds, vb) = with_bounds(a=(0, 7), b=(0, 16))
    e = (v["a"] * 16 + v["b"]) // 16
    out = simplify(e, vb)
    assert "//" in ops_in(out)
    assert_same_value(e, out, bounds)


def test_floordiv_splits_off_the_divisible_part():
    # (a * 16 + b + 3) // 16 = a + (b + 3) // 16: only the part the divisor does not divide
    # stays under the division.
    (v, bounds, vb) = with_bounds(a=(0, 7), b=(0, 15))
    a = v["a"]
    e = (a * 16 + v["b"] + 3) // 16
    out = simplify(e, vb)
    divisions = [n for n in walk(out) if isinstance(n, Binary) and n.op == "//"]
    assert len(divisions) == 1
    assert all(n is not a for n in walk(divisions[0].a))
    assert_same_value(e, out, bounds)


def test_floormod_by_multiple_of_coefficient():
    (v, bounds, vb) = with_bounds(a=(0, 7), b=(0, 15))
    e = (v["a"] * 16 + v["b"]) % 16
    out = simplify(e, vb)
    assert out is v["b"]
    assert_same_value(e, out, bounds)


@pytest.mark.parametrize("hi,eliminated", [(63, True), (64, False)])
def test_mod_64_eliminated_only_inside_its_range(hi, eliminated):
    (v, bounds, vb) = with_bounds(x=(0, hi))
    e = v["x"] % 64
    out = simplify(e, vb)
    assert ("%" not in ops_in(out)) == eliminated
    if eliminated:
        assert out is v["x"]
    assert_same_value(e, out, bounds)


def test_mod_64_of_a_lane_expression():
    # warp-local offsets: lane // 4 * 8 + lane % 4 * 2 < 64 for a lane in [0, 32)
    (v, bounds, vb) = with_bounds(lane=(0, 31))
    lane = v["lane"]
    e = (lane // 4 * 8 + lane % 4 * 2) % 64
    out = simplify(e, vb)
    assert ops_in(out) & {"%"} == {"%"}  # lane % 4 itself stays
    assert len([n for n in walk(out) if isinstance(n, Binary) and n.op == "%"]) == 1
    assert_same_value(e, out, bounds)


def test_mod_with_negative_range_is_kept():
    (v, bounds, vb) = with_bounds(x=(-8, 8))
    e = v["x"] % 64
    out = simplify(e, vb)
    assert "%" in ops_in(out)
    assert_same_value(e, out, bounds)


@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_eliminated_when_ranges_do_not_overlap(op):
    (v, bounds, vb) = with_bounds(i=(0, 15), j=(16, 40))
    i, j = v["i"], v["j"]
    e = minmax(op, i, j)
    out = simplify(e, vb)
    assert out is (i if op == "min" else j)
    assert_same_value(e, out, bounds)
    # Against a constant: min(i, 15) is i, max(i, 0) is i.
    e2 = minmax(op, i, 15 if op == "min" else 0)
    assert simplify(e2, vb) is i


@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_kept_when_ranges_overlap(op):
    (v, bounds, vb) = with_bounds(i=(0, 15), j=(10, 40))
    e = minmax(op, v["i"], v["j"])
    out = simplify(e, vb)
    assert op in ops_in(out)
    assert_same_value(e, out, bounds)


def test_unknown_variables_are_not_assumed_bounded():
    x = Var("x")
    e = (x * 16 + 3) // 16
    out = simplify(e)
    assert_same_value(e, out, {x: (-100, 100)})
    assert simplify(x % 64) is not x


def test_bound_of_basic_shapes():
    (v, _, vb) = with_bounds(a=(0, 7), b=(-3, 5))
    a, b = v["a"], v["b"]
    assert bound_of(a * 16 + b, vb) == (-3, 117)
    assert bound_of(a - b, vb) == (-5, 10)
    assert bound_of(a * b, vb) == (-21, 35)
    assert bound_of((a * 16 + 5) // 16, vb) == (0, 7)
    assert bound_of(b % 4, vb) == (0, 3)
    assert bound_of(minmax("min", a, b), vb) == (-3, 5)
    assert bound_of(Var("free"), vb) == (-float("inf"), float("inf"))
    assert var_range(a, 8) == {id(a): (0, 7)}


def test_non_integer_expressions_pass_through():
    f = Var("f", const(1.0, "float32").dtype)
    e = f * 2.0
    assert simplify(e, {}) is e


# --- random expressions ----------------------------------------------------------

RANGES = [(0, 0), (0, 1), (0, 3), (0, 15), (0, 31), (0, 127), (1, 8), (-4, 4), (-20, -1),
          (5, 70)]


def random_expr(rng, leaves, depth):
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.75:
            return rng.choice(leaves)
        return const(rng.randint(-10, 40))
    op = rng.choice(["+", "+", "-", "*", "//", "//", "%", "%", "min", "max"])
    a = random_expr(rng, leaves, depth - 1)
    if op in ("//", "%"):
        return Binary_op(op, a, const(rng.choice([1, 2, 3, 4, 8, 16, 32, 64, 7, -4])))
    if op == "*":
        return a * const(rng.choice([-3, 0, 1, 2, 4, 8, 16, 32]))
    b = random_expr(rng, leaves, depth - 1)
    if op in ("min", "max"):
        return minmax(op, a, b)
    return a + b if op == "+" else a - b


def Binary_op(op, a, b):
    return a // b if op == "//" else a % b


@pytest.mark.parametrize("seed", range(8))
def test_simplify_never_changes_the_value(seed):
    rng = random.Random(seed)
    leaves = [Var(f"v{i}") for i in range(4)]
    bounds = {v: rng.choice(RANGES) for v in leaves}
    vb = {id(v): r for v, r in bounds.items()}
    changed = 0
    for n in range(60):
        e = random_expr(rng, leaves, rng.randint(1, 4))
        out = simplify(e, vb)
        assert out.dtype.is_int
        changed += out is not e
        assert_same_value(e, out, bounds, samples=30, seed=seed * 1000 + n)
    assert changed > 0


@pytest.mark.parametrize("seed", range(8))
def test_bound_of_contains_every_value(seed):
    rng = random.Random(100 + seed)
    leaves = [Var(f"v{i}") for i in range(3)]
    bounds = {v: rng.choice(RANGES) for v in leaves}
    vb = {id(v): r for v, r in bounds.items()}
    for n in range(60):
        e = random_expr(rng, leaves, rng.randint(1, 4))
        lo, hi = bound_of(e, vb)
        assert lo <= hi
        for _ in range(30):
            values = {v: rng.randint(a, b) for v, (a, b) in bounds.items()}
            value = evaluate(e, values)
            assert lo <= value <= hi, (e, values, value, (lo, hi))
        if isinstance(e, Const):
            assert (lo, hi) == (e.value, e.value)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
@pytest.mark.parametrize("a, c", [(1, 2), (3, -10), (-2, 7), (64, 0)])
def test_bounds_under_a_guard_are_exactly_the_values_that_pass_it(op, a, c):
    # The narrowed range holds every k in [0, 127] for which `a k + c OP 50` is true, and no
    # other (checked against evaluating the guard).
    from tilecraft.arith.bounds import bounds_under
    from tilecraft.ir.expr import binary, compare
    k = Var("k")
    guard = compare(op, binary("+", binary("*", k, a), c), 50)
    narrowed = bounds_under(guard, {id(k): (0, 127)})
    passing = [x for x in range(128) if evaluate(guard, {k: x})]
    lo, hi = narrowed[id(k)]
    assert [x for x in range(128) if lo <= x <= hi] == passing


def test_bounds_under_takes_each_conjunct_and_ignores_other_shapes():
    from tilecraft.arith.bounds import bounds_under
    from tilecraft.ir.expr import binary, compare, logical
    k, j = Var("k"), Var("j")
    bounds = {id(k): (0, 127), id(j): (0, 15)}
    both = logical("and", compare("<", binary("+", k, 2), 128), compare(">=", j, 3))
    assert bounds_under(both, bounds) == {id(k): (0, 125), id(j): (3, 15)}
    # Two variables in one comparison, or a variable without known bounds: nothing assumed.
    assert bounds_under(compare("<", binary("+", k, j), 10), bounds) == {}
    free = Var("n")
    assert bounds_under(compare("<", free, 10), bounds) == {}


def test_known_multiples_leave_div_and_mod():
    """Terms that are multiples of the divisor (or of a g dividing it, beside a rest in
    [0, g)) keep the division to themselves, and a multiple of g modulo d is at most d - g."""
    tx = Var("tx")
    vb = var_range(tx, 128)
    x = tx * 16 % 512
    assert str(simplify((x * 2 + 1) // 32, vb)) == str(simplify(x * 2 // 32, vb))
    assert str(simplify((tx * 16 + 3) % 512, vb)) == str(simplify(tx * 16 % 512 + 3, vb))
    assert str(simplify((tx * 16 + 3) // 512, vb)) == str(simplify(tx * 16 // 512, vb))
    assert bound_of((tx * 4) % 48, vb) == (0, 44)
    assert bound_of(Binary("&", tx - 200, const(15), tx.dtype), vb) == (0, 15)
    for e in [(x * 2 + 1) // 32, (tx * 16 + 3) % 512, (tx * 16 + 3) // 512, (x * 2 + 5) % 32]:
        s = simplify(e, vb)
        for t in range(128):
            assert evaluate(s, {tx: t}) == evaluate(e, {tx: t})
