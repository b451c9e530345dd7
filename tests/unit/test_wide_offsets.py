"""64-bit element offsets for tensors that may hold 2^31 elements or more, 32-bit ones where the
bounds prove them small (codegen/cuda.py wide_offsets)."""
import pathlib
import re
import sys

import pytest

import tilecraft.language as T
from tilecraft.backends.cuda.codegen.cuda import emit_cuda, wide_offsets
from tilecraft.ir import dtypes as dt
from tilecraft.ir.buffer import GLOBAL, Buffer
from tilecraft.ir.expr import Var, const
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.tileops.tma import tma_plan

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "gpu"))
from kernels import scale_rows  # noqa: E402


def flat_1d(n, block=1024):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = X[bx * block + i] + 1
    return main


def source(func, arch="sm_80"):
    return emit_cuda(pipelines.cuda(func, arch, 163 * 1024))[0]


def accesses(src, name):
    return re.findall(rf"\b{name}\[[^\]]*\]", src)


def test_a_tensor_over_two_to_the_31_elements_is_indexed_in_64_bits():
    src = source(scale_rows((1 << 23) + 64, 256))
    for name in ("X", "Y"):
        found = accesses(src, name)
        assert found and all("(long long)" in a for a in found), found


def test_a_small_tensor_keeps_32_bit_offsets():
    src = source(scale_rows(1 << 12, 256))
    assert "long long)" not in src.split("tc_floormod")[-1]


def test_symbolic_extents_are_indexed_in_64_bits():
    src = source(scale_rows(T.symbolic("M"), 256))
    assert all("(long long)" in a for a in accesses(src, "X") + accesses(src, "Y"))


def test_an_index_past_two_to_the_31_is_computed_in_64_bits():
    """A one-dimensional tensor of 2^32 + 8 elements: the index itself leaves int's range, so
    the block's start is a 64-bit product, not an int product widened after overflowing."""
    src = source(flat_1d((1 << 32) + 8))
    found = accesses(src, "X")
    assert found
    for a in found:
        assert re.search(r"\(long long\)bx\) \* 1024\b", a), a


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_wide_source_compiles(arch, tmp_path):
    from tilecraft.backends.cuda.runtime import has_nvcc
    from tilecraft.backends.cuda.runtime.toolchain import compile_cubin
    if not has_nvcc():
        pytest.skip("nvcc is not installed")
    for func in (scale_rows((1 << 23) + 64, 256), flat_1d((1 << 32) + 8),
                 scale_rows(T.symbolic("M"), 256)):
        compile_cubin(source(func, arch), arch)


def test_wide_offsets_decides_by_the_tensor_and_the_index_bounds():
    i, j = Var("i"), Var("j")
    big = Buffer("A", (1 << 20, 4096), dt.dtype("float16"), GLOBAL)
    small = Buffer("B", (1 << 10, 4096), dt.dtype("float16"), GLOBAL)
    n = Var("n")
    sym = Buffer("C", (n, 4096), dt.dtype("float16"), GLOBAL)
    rows, cols = (0, (1 << 20) - 1), (0, 4095)
    bounds = {id(i): rows, id(j): cols, id(n): (0, 2**31 - 1)}
    assert wide_offsets(big, (i, j), bounds)
    assert not wide_offsets(small, (i, j), bounds)
    assert wide_offsets(sym, (i, j), bounds)
    # The bounds of the indices prove this access of the big tensor stays below 2^31.
    assert not wide_offsets(big, (i, j), {id(i): (0, 1000), id(j): cols})
    assert not wide_offsets(big, (const(3), j), bounds)


def test_tma_is_not_planned_over_a_dimension_of_two_to_the_31():
    """TMA box coordinates are signed 32-bit: such a copy takes the element-wise path."""
    n = (1 << 31) + 64

    @T.prim_func
    def main(X: T.Tensor((n, 1), "float16"), Y: T.Tensor((64,), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 1), "float16")
            T.copy(X[n - 64, 0], s)
            for i in T.Parallel(64):
                Y[i] = s[i, 0]
    from tilecraft.ir.tileop import Copy
    from tilecraft.ir.visitor import walk
    copies = [c for c in walk(main.body) if isinstance(c, Copy)]
    assert copies and tma_plan(copies[0]) is None
    assert "(long long)" in source(main, "sm_90a")
