"""The emulator reports fragment and local-buffer indices that leave their dimension, when the
compiler could not bound them (loaded data, T.alloc_var values, scalar arguments): lowered to
registers, such an index past the end of a row reads another row's register and the lowered
kernel's own memory checks see nothing (emulator/index_checks.py). The CUDA source never
carries the check. A fragment indexed by loaded data in a T.Parallel loop also compiles now
(it stopped the lowering with an AttributeError)."""
import inspect

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import emulator as E
from tilecraft.backends.cuda.emulator import EmulatorError
from tilecraft.backends.cuda.emulator.index_checks import CHECKED_INDEX
from tilecraft.ir.expr import Call
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda.runtime import has_nvcc

EMULATORS = ["emulator", "emulator:sm_90a"]


def gather_rows():
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), Idx: T.Tensor((32,), "int32"),
             B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((4, 8), "float32")
            T.copy(A, f)
            for i in T.Parallel(32):
                B[i] = f[i % 4, Idx[i]]
    return main


def line_of(fn, text) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def gather_args(bad_at=None):
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    idx = (np.arange(32) * 3 % 8).astype(np.int32)
    if bad_at is not None:
        idx[bad_at] = 9          # row i % 4, column 9: one past the row's end
    return a, idx, np.zeros(32, np.float32)


@pytest.mark.parametrize("target", EMULATORS)
def test_index_past_a_row_is_reported(target):
    kernel = tilecraft.compile(gather_rows(), target=target)
    with pytest.raises(EmulatorError) as info:
        kernel(*gather_args(bad_at=5))
    report, = [r for r in info.value.reports if r.kind == "out-of-bounds"]
    assert report.buffer == "f" and report.threads == (5,)
    assert "indexes dimension 1 at 9, outside its extent 8" in report.message
    assert report.lines == (line_of(gather_rows, "B[i] = f[i % 4, Idx[i]]"),)


@pytest.mark.parametrize("target", EMULATORS + ["interp"])
def test_indices_inside_run_clean(target):
    a, idx, b = gather_args()
    tilecraft.compile(gather_rows(), target=target)(a, idx, b)
    np.testing.assert_array_equal(b, a[np.arange(32) % 4, idx])


def test_the_interpreter_reports_it_too():
    with pytest.raises(tilecraft.TileError, match=r"out-of-bounds read of f \(shape \(4, 8\)\) "
                                                  r"at index \(1, 9\)"):
        tilecraft.compile(gather_rows(), target="interp")(*gather_args(bad_at=5))


def test_local_buffer_indexed_by_a_variable():
    @T.prim_func
    def main(A: T.Tensor((4,), "int32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            regs = T.alloc_local((2, 4), "float32")
            k = T.alloc_var("int32")
            k = A[0]
            for u in T.unroll(4):
                regs[0, u] = 1.0
                regs[1, u] = 2.0
            B[bx] = regs[0, k]
    kernel = tilecraft.compile(main, target="emulator")
    b = np.zeros(32, np.float32)
    kernel(np.array([3, 0, 0, 0], np.int32), b)
    assert b[0] == 1.0
    with pytest.raises(EmulatorError, match="regs: thread 0 indexes dimension 1 at 5, outside "
                                            "its extent 4"):
        kernel(np.array([5, 0, 0, 0], np.int32), b)


def test_fragment_indexed_by_a_scalar_argument():
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), col: T.int32, B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((4, 8), "float32")
            T.copy(A, f)
            for i in T.Parallel(4):
                B[i] = f[i, col]
    kernel = tilecraft.compile(main, target="emulator")
    a, b = np.arange(32, dtype=np.float32).reshape(4, 8), np.zeros(4, np.float32)
    kernel(a, 7, b)
    np.testing.assert_array_equal(b, a[:, 7])
    with pytest.raises(EmulatorError, match="f: thread 0 indexes dimension 1 at 8"):
        kernel(a, 8, b)


def test_bounded_indices_are_not_checked():
    @T.prim_func
    def main(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((32, 32), "float32")
            T.copy(A, f)
            for i, j in T.Parallel(32, 32):
                f[i, j] = f[i, j] * 2.0
            T.copy(f, B)
    lowered = E.lower(main)
    assert not [n for n in walk(lowered.body) if isinstance(n, Call) and n.name == CHECKED_INDEX]
    checked = E.lower(gather_rows())
    assert [n for n in walk(checked.body) if isinstance(n, Call) and n.name == CHECKED_INDEX]


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_data_indexed_fragment_compiles_without_the_check(arch):
    kernel = tilecraft.compile(gather_rows(), target=arch)
    source = kernel.get_kernel_source()
    assert "checked_index" not in source
    assert "f[tx % 4 * 8 + Idx[" in source
