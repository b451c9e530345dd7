"""The code generator computes 16-bit float element-wise loops two elements at a time
(codegen/pairs.py): f16x2 / bf16x2 operations, two registers loaded as one word, nibble pairs
converted through their bits; loops that do not qualify keep the scalar form. The numbers
are checked on the GPU (tests/gpu/test_cuda_paired_halves.py)."""
import re
import sys
from pathlib import Path

import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda.runtime import has_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402


def source(func):
    return emit_cuda(pipelines.cuda_sm80(func))[0]


def test_float16_loop_is_computed_in_pairs():
    text = source(kernels.paired_elementwise(64, 128, "float16"))
    loop = text[text.index("tc::st_pair"):]
    # y = x * s + z - x * x: one fma and one multiply, two elements each
    assert re.search(r"__hsub2\(__hfma2\(tc::ld_pair\(&x\[\w+ \* 2\]\), tc::splat\(s\[", loop)
    assert "__hmul2(tc::ld_pair(&x[" in loop
    # the two nibbles of a byte become a half pair with one PRMT (the byte in both halves)
    # and one mask: the high nibble stays at bit 20 and is read with the exponent of 64
    assert re.search(r"tc::int_fields_to_half2\(\(\(tc::byte_twice\(p, [^)]+\)\) & "
                     r"0x00f0000fu\), 0x54006400u, 0x54806408u\)", loop)
    assert "for (int l = 0" not in text[text.index("tc::st_pair") - 200:text.index("tc::st_pair")]


@pytest.mark.parametrize("src, twice", [("uint8", "tc::byte_twice(p, "),
                                         ("int8", "tc::byte_twice(p, "),
                                         ("uint16", "tc::halfword_twice(")])
def test_nibble_pairs_copy_their_word_once(src, twice):
    """Two nibbles of one byte or 16-bit word: the value copied into both halves (one PRMT),
    masked, the high nibble read where it lies (the exponent of 64 in the high half)."""
    text = source(kernels.nibble_fields(40, 120, src))
    loop = text[text.index("tc::st_pair"):]
    assert "tc::int_fields_to_half2(((" + twice in loop
    assert "& 0x00f0000fu), 0x54006400u, 0x54806408u)" in loop


def test_nibbles_of_wide_words_take_the_general_pairing():
    """int32 words may be negative: the two fields are shifted and masked one by one."""
    text = source(kernels.nibble_fields(40, 120, "int32"))
    assert "0x64006400u, 0x64086408u)" in text and "_twice" not in text


def test_bfloat16_pairs_without_the_float16_bit_trick():
    text = source(kernels.paired_elementwise(64, 128, "bfloat16"))
    assert "__hfma2(tc::ld_pair(&x[" in text
    assert "int_fields_to_half2" not in text and "tc::make_pair(" in text


def test_loops_that_do_not_qualify_stay_scalar():
    @T.prim_func
    def shifted(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float16"),
                Z: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 64), "float16")
            z = T.alloc_fragment((64, 64), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(64, 64):
                z[i, j] = T.cast(x[i, j], "float32") * 2   # a float32 result: nothing to pair
            for i, j in T.Parallel(64, 64):
                x[i, j] = T.cast(z[i, j], "float16")       # a conversion only
            T.copy(x, Y)
            T.copy(z, Z)
    text = source(shifted)
    assert "tc::st_pair" not in text and "__h" not in text


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_paired_code_compiles(target, dtype):
    kernel = tilecraft.compile(kernels.paired_elementwise(50, 100, dtype), target=target)
    assert "tc::st_pair" in kernel.get_kernel_source()
