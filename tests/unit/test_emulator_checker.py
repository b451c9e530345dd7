"""Bugs planted in lowered kernels (a removed barrier, a wrong cp.async wait, a barrier in a
branch, a dropped bounds guard, a dropped store) are reported by the emulator's checker with
the buffer, the threads and the user's source lines; the unmodified kernels report nothing."""
import inspect

import numpy as np
import pytest

import tilecraft
import tilecraft.backends.cuda.emulator as E
import tilecraft.language as T
from tilecraft.ir import dtypes as dt
from tilecraft.ir.expr import Binary, Call, Const
from tilecraft.ir.stmt import BufferStore, Evaluate, IfThenElse, SeqStmt, Stmt
from tilecraft.ir.visitor import Mutator

from test_emulator import elementwise, softmax


class Plant(Mutator):
    """Replaces the `which`-th statement (pre-order) matching `match` by replace(stmt), or
    every match when which is None."""

    def __init__(self, match, replace, which=0):
        self.match, self.replace, self.which, self.seen = match, replace, which, 0

    def visit(self, node):
        if isinstance(node, Stmt) and self.match(node):
            index, self.seen = self.seen, self.seen + 1
            if self.which is None or index == self.which:
                return self.replace(node)
        return super().visit(node)


def plant(func, match, replace, which=0):
    p = Plant(match, replace, which)
    out = p.visit(func)
    assert p.seen > (which or 0), "nothing to plant the bug in"
    return out


def calls(name):
    return lambda s: isinstance(s, Evaluate) and isinstance(s.value, Call) and \
        s.value.name == name


def dropped(_):
    return SeqStmt(())


def line_of(module, text) -> int:
    lines, start = inspect.getsourcelines(module)
    return start + next(i for i, line in enumerate(lines) if text in line)


def gemm_setup(example, num_stages):
    gemm = example("gemm")
    func = gemm.matmul.factory(96, 80, 40, block_M=64, block_N=64, block_K=32,
                               num_stages=num_stages, threads=128)
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, (96, 40)).astype(np.float16),
            rng.uniform(-1, 1, (40, 80)).astype(np.float16), np.zeros((96, 80), np.float16)]
    return gemm, E.lower(func), args


def kinds(reports) -> set:
    return {r.kind for r in reports}


@pytest.mark.parametrize("num_stages", [0, 2, 3])
def test_unmodified_gemm_reports_nothing(example, num_stages):
    _, lowered, args = gemm_setup(example, num_stages)
    assert list(E.run(lowered, args)) == []


def test_removed_barrier_in_pipelined_loop_is_a_race(example):
    gemm, lowered, args = gemm_setup(example, 2)
    # The pipelined loop's barrier publishes the tile its wait just completed.
    bad = plant(lowered, calls("tc::syncthreads"), dropped)
    reports = [r for r in E.run(bad, args) if r.kind == "race"]
    assert reports, "no race reported"
    copy_lines = {line_of(gemm.matmul, "T.copy(A["), line_of(gemm.matmul, "T.copy(B[")}
    gemm_line = line_of(gemm.matmul, "T.gemm(")
    r = reports[0]
    assert r.buffer in ("A_shared", "B_shared")
    assert set(r.lines) & copy_lines and gemm_line in r.lines
    assert len(r.threads) == 2 and r.threads[0] != r.threads[1]
    assert r.buffer in str(r) and f"gemm.py:{gemm_line}" in str(r)


def test_wrong_cp_async_wait_reads_data_in_flight(example):
    gemm, lowered, args = gemm_setup(example, 3)
    waits = [s.value.name for s in _walk_stmts(lowered) if calls_prefix(s, "tc::cp_async_wait<")]
    # In front of the loop and before its last k step (rotate_mma_loop).
    assert waits == ["tc::cp_async_wait<1>"] * 2

    def later(s):
        return Evaluate(Call("tc::cp_async_wait<2>", (), s.value.dtype, s.value.span), s.span)
    bad = plant(lowered, lambda s: calls_prefix(s, "tc::cp_async_wait<"), later, None)
    reports = [r for r in E.run(bad, args) if r.kind == "async-before-wait"]
    assert reports
    r = reports[0]
    assert r.buffer in ("A_shared", "B_shared")
    assert line_of(gemm.matmul, "T.gemm(") in r.lines
    assert "has not been waited for" in r.message


def test_wait_all_missing_is_reported(example):
    _, lowered, args = gemm_setup(example, 2)
    bad = plant(lowered, lambda s: calls_prefix(s, "tc::cp_async_wait<"), dropped, None)
    found = kinds(E.run(bad, args))
    assert "async-before-wait" in found


def test_removed_reduction_barrier_and_arena_aliasing():
    func = softmax(32, 64, across_warps=True)
    lowered = E.lower(func)
    X = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    args = [X, np.zeros_like(X), np.zeros(32, np.float32)]
    assert list(E.run(lowered, args)) == []
    reduce_line = line_of(softmax, "T.reduce_max(")
    # First barrier: between the workspace stores and the reads of the other warp's partials.
    reports = list(E.run(plant(lowered, calls("tc::syncthreads"), dropped, 0), args))
    race = next(r for r in reports if r.kind == "race")
    assert race.buffer == "mx_ws" and race.lines == (reduce_line, reduce_line)
    # Second barrier: the sum's workspace reuses the max's bytes (planned arena), so its
    # stores race with the max's last reads.
    reports = list(E.run(plant(lowered, calls("tc::syncthreads"), dropped, 1), args))
    race = next(r for r in reports if r.kind == "race")
    assert race.buffer == "sm_ws" and "mx_ws" in race.message
    assert race.lines == (reduce_line, line_of(softmax, "T.reduce_sum("))


def test_barrier_in_a_branch_is_a_divergence():
    lowered = E.lower(softmax(32, 64, across_warps=True))
    tx = lowered.kernels()[0].thread_var
    X = np.ones((32, 64), np.float32)

    def half(s):
        return IfThenElse(Binary("<", tx, Const(64, dt.int32), dt.boolean), s, None, s.span)
    reports = list(E.run(plant(lowered, calls("tc::syncthreads"), half), [X, X * 0, X[:, 0]]))
    div = [r for r in reports if r.kind == "barrier-divergence"]
    assert div and div[0].threads[1] >= 64
    assert div[0].lines == (line_of(softmax, "T.reduce_max("),)


def test_missing_bounds_guard_is_out_of_bounds():
    func = elementwise(100, 70)
    lowered = E.lower(func)
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((100, 70)).astype(np.float32),
            rng.standard_normal((100, 70)).astype(np.float16), np.zeros((100, 70), np.float16)]
    assert list(E.run(lowered, args)) == []
    bad = plant(lowered, lambda s: isinstance(s, IfThenElse), lambda s: s.then_body, None)
    # The loads stay guarded by their if_then_else; the store is not any more.
    reports = [r for r in E.run(bad, args) if r.kind == "out-of-bounds"]
    assert {r.buffer for r in reports} == {"C"}
    assert "outside the buffer (shape (100, 70)" in reports[0].message
    assert all(r.lines == (line_of(elementwise, "C[by * block + i"),) for r in reports)


def test_reading_shared_memory_never_written():
    lowered = E.lower(softmax(32, 64, across_warps=True))
    X = np.ones((32, 64), np.float32)
    bad = plant(lowered, lambda s: isinstance(s, BufferStore) and s.buffer.name == "mx_ws",
                dropped, None)
    reports = [r for r in E.run(bad, [X, X * 0, X[:, 0]]) if r.kind == "uninitialized"]
    assert reports and reports[0].buffer == "mx_ws"


def test_jit_raises_with_the_reports(example):
    gemm = example("gemm")
    kernel = tilecraft.compile(gemm.matmul.factory(64, 64, 64, block_M=64, block_N=64,
                                                   block_K=32, num_stages=2),
                               out_idx=[-1], target="emulator")
    A = np.ones((64, 64), np.float16)
    kernel(A, A)
    assert kernel.reports == []
    kernel.lowered = plant(kernel.lowered, calls("tc::syncthreads"), dropped)
    with pytest.raises(E.EmulatorError) as info:
        kernel(A, A)
    assert info.value.reports and "race" in str(info.value)
    assert kernel.reports == info.value.reports


def calls_prefix(s, prefix):
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and \
        s.value.name.startswith(prefix)


def _walk_stmts(func):
    from tilecraft.ir.visitor import walk
    return [n for n in walk(func.body) if isinstance(n, Stmt)]


def compaction(N):
    @T.prim_func
    def main(X: T.Tensor((N,), "int32"), Y: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            found = T.alloc_shared((N,), "int32")
            count = T.alloc_var("int32", init=0)
            T.fill(found, -1)
            for n in T.serial(N):
                if X[n] != 0:
                    found[count] = n
                    count += 1
            T.copy(found, Y)
    return main


def test_stores_of_different_values_by_every_thread_are_a_race():
    """A store into shared memory outside T.Parallel runs on one thread; the same store run by
    every thread, each with a value of its own, is a race."""
    func = compaction(64)
    X = (np.arange(64) % 3 == 0).astype(np.int32)
    got = tilecraft.compile(func, out_idx=[-1], target="emulator")(X)
    want = tilecraft.compile(func, out_idx=[-1], target="interp")(X)
    np.testing.assert_array_equal(got, want)
    lowered = E.lower(func)
    tx = lowered.kernels()[0].thread_var
    one_thread_store = (lambda s: isinstance(s, IfThenElse) and
                        isinstance(s.then_body, BufferStore) and
                        s.then_body.buffer.name == "found" and
                        not any(v is tx for v in _vars(s.then_body.indices[0])))
    bad = plant(lowered, one_thread_store,
                lambda s: BufferStore(s.then_body.buffer, s.then_body.indices,
                                      s.then_body.value + tx, s.span))
    reports = [r for r in E.run(bad, [X, np.zeros(64, np.int32)]) if r.kind == "race"]
    assert reports and reports[0].buffer == "found"
    assert reports[0].lines == (line_of(compaction, "found[count] = n"),) * 2


def _vars(e):
    from tilecraft.ir.expr import Var
    from tilecraft.ir.visitor import walk
    return [n for n in walk(e) if isinstance(n, Var)]
