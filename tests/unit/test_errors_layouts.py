"""Malformed layouts: T.annotate_layout given an index function of the wrong arity, a layout
(make_partition, make_swizzled_layout, Fragment, Layout) whose shape, kind, element width or
thread count does not fit the buffer, or one that puts two elements in one place; and gemm
register operands that are parts of a fragment. Each is an error at the line that wrote it."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft import layout as lay
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect


def annotated(layout_of, shape=(32, 32), dtype="float16", scope="shared", threads=128):
    """A program annotating its one tile (shared or fragment) with layout_of(tile)."""
    def program():
        @T.prim_func
        def main(A: T.Tensor(shape, dtype), B: T.Tensor(shape, dtype)):
            with T.Kernel(1, threads=threads) as bx:
                if scope == "shared":
                    tile = T.alloc_shared(shape, dtype)
                else:
                    tile = T.alloc_fragment(shape, dtype)
                T.annotate_layout({tile: layout_of(tile)})  # <- here
                T.copy(A, tile)
                T.copy(tile, B)
        return main
    return program


# --- index functions -------------------------------------------------------------------------

def test_layout_function_with_too_few_indices():
    expect(annotated(lambda t: lambda i: i),
           "the layout of tile: the function takes 1 index(es) but tile has 2 dimension(s) "
           "(32, 32)", "T.annotate_layout(")


def test_layout_function_with_too_many_indices():
    expect(annotated(lambda t: lambda i, j, k: i * 32 + j),
           "the function takes 3 index(es) but tile has 2 dimension(s)", "T.annotate_layout(")


def test_layout_function_that_raises():
    expect(annotated(lambda t: lambda i, j: i.row_major(j)),
           "the layout of tile: the function raised AttributeError", "T.annotate_layout(")


def test_layout_that_is_not_a_layout():
    expect(annotated(lambda t: 128), "the layout of tile is a int, not a Layout, a Fragment nor "
           "a function of the indices", "T.annotate_layout(")


def test_layout_function_mapping_two_elements_to_one_offset():
    err = expect(annotated(lambda t: lambda i, j: i),
                 "the layout of tile is not one-to-one: elements (0, 0) and (0, 1) share the "
                 "offset [0]", "T.annotate_layout(")
    assert "internal" not in err.message


def test_layout_function_with_a_negative_offset():
    expect(annotated(lambda t: lambda i, j: i * 32 + j - 1),
           "the layout of tile maps an element to a negative offset", "T.annotate_layout(")


def test_layout_object_mapping_rows_onto_each_other():
    expect(annotated(lambda t: lay.Layout((32, 32), lambda i, j: [i % 16 * 32 + j])),
           "is not one-to-one: elements (0, 0) and (16, 0) share the offset [0]",
           "T.annotate_layout(")


# --- shapes ----------------------------------------------------------------------------------

def test_swizzled_layout_of_another_shape():
    expect(annotated(lambda t: lay.make_swizzled_layout(32, 64, 16), shape=(64, 64)),
           "the layout of tile has shape (32, 64) but tile has shape (64, 64)",
           "T.annotate_layout(")


def test_linear_layout_of_transposed_shape():
    expect(annotated(lambda t: lay.make_linear_layout(64, 32, 16), shape=(32, 64)),
           "has shape (64, 32) but tile has shape (32, 64)", "T.annotate_layout(")


def test_partition_of_another_shape():
    expect(annotated(lambda t: lay.make_partition((64, 32), 128), shape=(64, 64),
                     dtype="float32", scope="fragment"),
           "the layout of tile has shape (64, 32) but tile has shape (64, 64)",
           "T.annotate_layout(")


def test_partition_of_another_rank():
    expect(annotated(lambda t: lay.make_partition((64 * 64,), 128), shape=(64, 64),
                     dtype="float32", scope="fragment"),
           "has shape (4096,) but tile has shape (64, 64)", "T.annotate_layout(")


def test_fragment_of_another_shape():
    expect(annotated(lambda t: lay.Fragment((16, 32), lambda i, j: (j, i)), shape=(32, 16),
                     dtype="float32", scope="fragment", threads=32),
           "has shape (16, 32) but tile has shape (32, 16)", "T.annotate_layout(")


def test_layout_object_of_another_shape():
    expect(annotated(lambda t: lay.Layout((32, 16), lambda i, j: [i * 16 + j])),
           "has shape (32, 16) but tile has shape (32, 32)", "T.annotate_layout(")


# --- kinds, element widths, threads ---------------------------------------------------------

def test_fragment_layout_given_to_a_shared_tile():
    expect(annotated(lambda t: lay.make_partition((32, 32), 128)),
           "the layout of tile is a Fragment (registers of threads), but tile is a shared tile",
           "T.annotate_layout(")


def test_offset_layout_given_to_a_fragment():
    expect(annotated(lambda t: lay.make_linear_layout(32, 32, 32), dtype="float32",
                     scope="fragment"),
           "but tile is a fragment: give it a Fragment", "T.annotate_layout(")


def test_offset_function_given_to_a_fragment():
    expect(annotated(lambda t: lambda i, j: i * 32 + j, dtype="float32", scope="fragment"),
           "the layout of tile is a Layout of offsets, but tile is a fragment",
           "T.annotate_layout(")


def test_swizzle_made_for_another_element_width():
    expect(annotated(lambda t: lay.make_swizzled_layout(32, 64, 16), shape=(32, 64),
                     dtype="float32"),
           "the layout of tile is made for 16-bit elements, but tile holds float32 (32-bit)",
           "T.annotate_layout(")


def test_partition_over_more_threads_than_the_block():
    expect(annotated(lambda t: lay.make_partition((32, 32), 256), dtype="float32",
                     scope="fragment"),
           "the layout of tile spreads it over 256 threads, but the block has 128",
           "T.annotate_layout(")


def test_fragment_putting_two_elements_in_one_register():
    expect(annotated(lambda t: lay.Fragment((32, 32), lambda i, j: (j, i % 16)),
                     dtype="float32", scope="fragment", threads=32),
           "the layout of tile is not a valid register layout: (thread, local) slot used twice",
           "T.annotate_layout(")


def test_global_layout_that_is_not_a_permutation():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32, 32), "float16")):
            with T.Kernel(1, threads=128) as bx:
                T.annotate_layout({A: lay.Layout((32, 32), lambda i, j: [i, j * 2])})  # <- here
    expect(program, "the layout of A maps its 1024 elements into a box of 2016 (32, 63); a "
           "global tensor's layout must be a permutation of its elements", "T.annotate_layout(")


def test_layout_for_a_local_buffer():
    def program():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                regs = T.alloc_local((4,), "float32")
                T.annotate_layout({regs: lambda i: i})  # <- here
                T.copy(A, regs)
    expect(program, "regs is a local buffer; only global, shared and fragment buffers take layouts",
           "T.annotate_layout(")


# --- gemm register operands that are parts of a fragment -------------------------------------

def test_gemm_into_a_slice_of_a_fragment():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
                 C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_shared((64, 32), "float16")
                b = T.alloc_shared((32, 64), "float16")
                c = T.alloc_fragment((64, 128), "float32")
                T.copy(A, a)
                T.copy(B, b)
                T.clear(c)
                T.gemm(a, b, c[:, 0:64])  # <- here
                T.copy(c[:, 0:64], C)
    err = expect(program, "T.gemm: operand C is a part (64, 64) of the fragment c (64, 128); a "
                 "register operand must be a whole fragment", "T.gemm(")
    assert "T.Parallel" not in err.message


def test_gemm_from_a_slice_of_a_register_a():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((32, 64), "float16"),
                 C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_fragment((64, 64), "float16")
                b = T.alloc_shared((32, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.copy(A, a)
                T.copy(B, b)
                T.gemm(a[:, 32:64], b, c, clear_accum=True)  # <- here
                T.copy(c, C)
    expect(program, "T.gemm: operand A is a part (64, 32) of the fragment a (64, 64)", "T.gemm(")


# --- layouts that fit ------------------------------------------------------------------------

def fitting_layouts():
    @T.prim_func
    def main(A: T.Tensor((32, 64), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((32, 64), "float16")
            f = T.alloc_fragment((32, 64), "float16")
            T.annotate_layout({s: lay.make_swizzled_layout(32, 64, 16),
                               f: lay.make_partition((32, 64), 128, vector=2)})
            T.copy(A, s)
            T.copy(s, f)
            T.copy(f, B)
    return main


def test_layouts_that_fit_run():
    a = np.arange(32 * 64, dtype=np.float16).reshape(32, 64)
    b = np.zeros_like(a)
    tilecraft.compile(fitting_layouts(), target="interp")(a, b)
    np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_layouts_that_fit_compile(arch):
    assert tilecraft.compile(fitting_layouts(), target=arch).n_regs > 0
