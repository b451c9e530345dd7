"""The few names of TileLang's bundled TVM that its kernel scripts use (`DataType(dtype).bits`,
`tirx.const`, `tirx.reinterpret`, `tirx.Select`, `tirx.Cast`, `tirx.PrimExpr` in annotations,
`testing.requires_package`) work as tilecraft's own dtypes and expressions, in a kernel run on
the interpreter; every other TVM name stops on a TileError that names it."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft import tvm
from tilecraft.errors import TileError
from tilecraft.tvm import DataType, tirx


def test_datatype_gives_bits_of_a_dtype_and_its_string():
    assert DataType(T.float16).bits == 16 and DataType("bfloat16").bits == 16
    assert DataType("int8").bits == 8 and DataType("float") is T.float32
    assert tvm.tir is tirx


def _nibble_to_int8(val: tirx.PrimExpr, pos: tirx.PrimExpr):
    """A TileLang example's helper: the signed 4-bit field `pos` of a byte, as an int8."""
    mask = tirx.const(15, T.uint8)
    i4 = (val >> (pos.astype(T.uint8) * tirx.const(4, T.uint8))) & mask
    shifted = tirx.reinterpret(T.int8, i4 << tirx.const(4, T.uint8))
    return shifted >> tirx.const(4, T.int8)


def test_tirx_helpers_build_device_expressions():
    @tilecraft.jit(out_idx=[-1], target="interp")
    def unpack(n):
        @T.prim_func
        def main(B: T.Tensor((n,), T.uint8), C: T.Tensor((n * 2,), T.int8),
                 D: T.Tensor((n * 2,), T.float32)):
            with T.Kernel(1, threads=32):
                for j in T.Parallel(n * 2):
                    C[j] = _nibble_to_int8(B[j // 2], j % 2)
                    D[j] = tirx.Select(C[j] < tirx.const(0, T.int8), tirx.Cast(T.float32, C[j]),
                                       tirx.const(0.5, T.float32))
        return main

    rng = np.random.default_rng(3)
    b = rng.integers(0, 256, 37, dtype=np.uint8)
    c = np.zeros(74, np.int8)
    d = unpack(37)(b, c)
    nibbles = np.stack([b & 15, b >> 4], axis=1).reshape(-1).astype(np.int16)
    expect = np.where(nibbles >= 8, nibbles - 16, nibbles).astype(np.int8)
    np.testing.assert_array_equal(c, expect)
    np.testing.assert_array_equal(d, np.where(expect < 0, expect, 0.5).astype(np.float32))
    assert tirx.const(3, T.uint16).dtype is T.uint16 and tirx.const(3).dtype is T.int32


def test_other_tvm_names_are_refused_by_name():
    with pytest.raises(TileError, match="tvm.compile is not part of tilecraft"):
        tvm.compile  # noqa: B018
    with pytest.raises(TileError, match="tvm.tirx.IndexMap is not part of tilecraft"):
        tirx.IndexMap  # noqa: B018


def test_requires_package_skips_when_the_package_is_missing():
    ran = []

    @tvm.testing.requires_package("numpy")
    def present():
        ran.append(1)

    @tvm.testing.requires_package("no_such_package_here")
    def absent():
        ran.append(2)

    present()
    with pytest.raises(pytest.skip.Exception, match="no_such_package_here"):
        absent()
    assert ran == [1]
