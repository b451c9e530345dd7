"""Statements outside T.Parallel: fragment elements written by their holders and broadcast when
read, stores into memory and atomics run once (tileops/fragment_elements, lower_tile_ops)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.ir.expr import Var
from tilecraft.interp.values import evaluate
from tilecraft.backends.cuda.tileops.fragment_elements import threads_condition

TARGETS = ["interp", "emulator", "emulator:sm_90a"]


def run(func, target, *arrays):
    kernel = tilecraft.compile(func, target=target)
    kernel(*arrays)
    assert not getattr(kernel, "reports", []), kernel.reports
    return arrays


def one_element_program(threads):
    @T.prim_func
    def main(X: T.Tensor((8, 32), "float32"), Y: T.Tensor((8, 32), "float32"),
             P: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            f = T.alloc_fragment((8, 32), "float32")
            T.copy(X, f)
            f[6, 29] = 2.0
            P[0] = f[1, 3]
            P[1] = f[6, 29] + f[7, 31]
            T.copy(f, Y)
    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("threads", [32, 128])
def test_one_element_is_written_by_its_holder_and_read_from_it(target, threads):
    X = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    Y = np.full_like(X, np.nan)
    P = np.full(2, np.nan, np.float32)
    run(one_element_program(threads), target, X, Y, P)
    want = X.copy()
    want[6, 29] = 2.0
    np.testing.assert_array_equal(Y, want)
    np.testing.assert_allclose(P, [X[1, 3], 2.0 + X[7, 31]], rtol=1e-6)


def replicated_program():
    """A row maximum is held by every thread of its row's lanes: a write reaches each replica
    (the T.Parallel loop after it reads the replica of its own thread)."""
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32"),
             P: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            T.copy(X, f)
            T.reduce_max(f, m, dim=1)
            m[5] = -100.0
            P[0] = m[7]
            P[1] = m[5]
            for i, j in T.Parallel(64, 64):
                f[i, j] = f[i, j] - m[i]
            T.copy(f, Y)
    return main


@pytest.mark.parametrize("target", TARGETS)
def test_an_element_of_a_replicated_fragment(target):
    X = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    Y = np.full_like(X, np.nan)
    P = np.full(4, np.nan, np.float32)
    run(replicated_program(), target, X, Y, P)
    m = X.max(axis=1)
    m[5] = -100.0
    np.testing.assert_allclose(Y, X - m[:, None], rtol=1e-6)
    np.testing.assert_allclose(P[:2], [m[7], -100.0], rtol=1e-6)


def dynamic_index_program():
    @T.prim_func
    def main(X: T.Tensor((16, 16), "float32"), Y: T.Tensor((16, 16), "float32"),
             P: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            f = T.alloc_fragment((16, 16), "float32")
            g = T.alloc_fragment((16, 16), "float32")
            T.copy(X, f)
            for k in T.serial(16):
                P[k] = f[k, 15 - k]
            for k in T.serial(8):
                f[k, 2 * k] = f[k, 2 * k] * 3.0
            if f[0, 0] > 0:
                T.fill(g, f[2, 4])
            else:
                T.fill(g, f[3, 6])
            T.copy(f, Y)
            for i, j in T.Parallel(16, 16):
                Y[i, j] = Y[i, j] + g[i, j]
    return main


@pytest.mark.parametrize("target", TARGETS)
def test_elements_at_indices_known_at_run_time(target):
    rng = np.random.default_rng(3)
    for sign in (1, -1):
        X = rng.standard_normal((16, 16)).astype(np.float32)
        X[0, 0] = sign * abs(X[0, 0])
        Y = np.full_like(X, np.nan)
        P = np.full(16, np.nan, np.float32)
        run(dynamic_index_program(), target, X, Y, P)
        np.testing.assert_allclose(P, X[np.arange(16), 15 - np.arange(16)], rtol=1e-6)
        f = X.copy()
        for k in range(8):
            f[k, 2 * k] *= 3
        fill = f[2, 4] if f[0, 0] > 0 else f[3, 6]
        np.testing.assert_allclose(Y, f + fill, rtol=1e-6)


def once_program():
    """Atomics and read-modify-write stores outside T.Parallel happen once, not once a thread
    (nor once a warp)."""
    @T.prim_func
    def main(X: T.Tensor((4,), "float32"), P: T.Tensor((3,), "float32")):
        with T.Kernel(2, threads=256) as bx:
            S = T.alloc_shared((1,), "float32")
            S[0] = 0.0
            for k in T.serial(5):
                S[0] = S[0] + X[k % 4]
            T.atomic_add(P[0], X[1])
            P[1] = S[0]
            P[2] = P[2] + 1.0
    return main


@pytest.mark.parametrize("target", TARGETS)
def test_stores_and_atomics_outside_parallel_run_once(target):
    X = np.array([1.5, 2.0, -3.0, 0.25], np.float32)
    P = np.zeros(3, np.float32)
    run(once_program(), target, X, P)
    assert P[0] == 4.0                       # two blocks, one add each
    assert P[1] == 1.5 + 2.0 - 3.0 + 0.25 + 1.5
    assert P[2] in (1.0, 2.0)                # the blocks race on P[2]; one thread a block


def test_the_holders_condition_is_a_mask_or_ranges():
    tx = Var("tx")
    threads = np.arange(128)

    def holds(cond):
        return set(threads[np.broadcast_to(evaluate(cond, {id(tx): threads}), 128)
                           .astype(bool)])

    assert threads_condition(tx, frozenset(range(128)), 128) is None
    for owners in ({5}, {4, 5, 6, 7}, set(range(3, 128, 32)), set(range(0, 128, 4)),
                   {0, 1, 2, 9, 10, 100}, set(range(64, 128))):
        assert holds(threads_condition(tx, frozenset(owners), 128)) == owners
