"""TileLang scripts use dtypes as strings (`T.float16 == "float16"`, `getattr(torch, dtype)`,
f-strings, dict keys) and call `dtype.as_torch()`; they size grids with `tilelang.cdiv`,
`tilelang.next_power_of_2` and `tilelang.math.next_power_of_2`. The same lines must work with
tilecraft in place of tilelang."""
import json
import pickle

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError


def test_dtypes_are_strings_of_their_canonical_name():
    assert isinstance(T.float16, str)
    assert T.float16 == "float16" and "float16" == T.float16
    assert T.float32 == "float" and not (T.float32 != "float")   # aliases still compare equal
    assert T.float16 != "float32" and T.float16 != T.bfloat16
    assert f"{T.bfloat16}" == "bfloat16" and "%s" % T.int8 == "int8"
    assert {"float16": 1}[T.float16] == 1 and T.float16 in {"float16"}
    assert T.float16 in ("bfloat16", "float16") and T.int32 not in ("int64",)
    assert json.dumps({"dtype": T.float16}) == '{"dtype": "float16"}'
    assert pickle.loads(pickle.dumps(T.uint8)) is T.uint8   # still interned
    assert T.dtype("half") is T.float16


def test_dtypes_keep_their_identity_in_kernels():
    @tilecraft.jit(out_idx=[-1], target="interp")
    def double(n, dtype=T.float16):
        @T.prim_func
        def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(n):
                    B[i] = A[i] * 2
        return main

    a = np.arange(8, dtype=np.float16)
    np.testing.assert_array_equal(double(8)(a), a * 2)
    # a dtype given as text and as a T name specialize the same kernel source
    assert double(8, "float16").get_kernel_source() == double(8).get_kernel_source()


def test_dtypes_name_torch_types():
    torch = pytest.importorskip("torch")
    assert getattr(torch, T.float16) is torch.float16
    assert getattr(torch, T.bfloat16) is torch.bfloat16
    assert T.float32.as_torch() is torch.float32
    assert T.int8.as_torch() is torch.int8 and T.bool.as_torch() is torch.bool
    assert T.float8_e4m3.as_torch() is torch.float8_e4m3fn   # torch's name for e4m3
    assert T.float8_e4m3fn.as_torch() is torch.float8_e4m3fn
    with pytest.raises(TileError, match="handle has no torch equivalent"):
        T.dtype("handle").as_torch()


def test_next_power_of_2():
    assert [tilecraft.math.next_power_of_2(x) for x in (0, 1, 2, 3, 48, 64, 65)] == \
        [1, 1, 2, 4, 64, 64, 128]
    assert tilecraft.next_power_of_2(np.int64(33)) == 64
    from tilecraft.math import next_power_of_2
    assert next_power_of_2(1000) == 1024
    with pytest.raises(TileError, match="takes an integer, got float"):
        next_power_of_2(3.5)


def test_cdiv():
    assert tilecraft.cdiv(10, 3) == 4 and tilecraft.cdiv(9, 3) == 3 and tilecraft.cdiv(0, 8) == 0
    assert tilecraft.math.cdiv(1025, 128) == 9
    n = T.symbolic("n")
    assert str(tilecraft.cdiv(n, 32)) == str(T.ceildiv(n, 32))
    with pytest.raises(TileError, match="division by zero"):
        tilecraft.cdiv(4, 0)
    with pytest.raises(TileError, match="takes integers"):
        tilecraft.cdiv(3.5, 2)


def test_int_and_uint_are_tvms_32_bit_names():
    assert T.int is T.int32 and T.uint is T.uint32
    assert T.dtype(T.uint) == T.uint and T.uint in [T.int, T.uint]


def test_4_bit_integers_are_known_by_name_and_refused_as_buffers():
    assert T.int4 == "int4" and T.uint4 == "uint4" and T.int4 != T.int8
    assert T.int4 in [T.float16, T.int8, T.int4]        # TileLang's Literal[...] annotations
    with pytest.raises(TileError, match="dtype int4 .* is not supported yet: store such values "
                                        "packed in uint8"):
        @T.prim_func
        def main(A: T.Tensor((8,), T.int4)):
            with T.Kernel(1, threads=32):
                T.clear(A)
