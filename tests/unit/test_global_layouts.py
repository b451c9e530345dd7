"""A global tensor given a layout by T.annotate_layout (TileLang's backward-attention dQ, whose
atomic adds go to the places a warp's accumulator makes consecutive): the kernel that adds into
it and the kernel that reads it back both see logical indices, and its storage holds each
element at the row-major offset of its layout index. Checked on the interpreter and both
emulators against numpy, with element-wise and tile atomics, a global-to-global copy over a
ragged tile, and the errors for what such a tensor cannot take."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

from error_expect import expect

S, D, BM = 48, 32, 16
TARGETS = ["interp", "emulator", "emulator:sm_90a"]


def dq_layout(buf):
    return T.Layout(buf.shape, lambda l, d: [l // 8, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2])


def dq_offsets():
    l, d = np.indices((S, D))
    return (((l // 8) * (D // 8) + d // 8) * 2 + d % 2) * 32 + 4 * (l % 8) + (d % 8) // 2


def accumulate():
    @T.prim_func
    def main(X: T.Tensor((S, D), "float32"), dQ: T.Tensor((S, D), "float32")):
        with T.Kernel(S // BM, threads=64) as bx:
            T.annotate_layout({dQ: dq_layout(dQ)})
            acc = T.alloc_fragment((BM, D), "float32")
            T.copy(X[bx * BM, 0], acc)
            for i, j in T.Parallel(BM, D):
                acc[i, j] = acc[i, j] * 2
            for i, j in T.Parallel(BM, D):
                T.atomic_add(dQ[bx * BM + i, j], acc[i, j])
            T.atomic_add(dQ[bx * BM:(bx + 1) * BM, :], acc)
    return main


def read_back(rows=20):
    @T.prim_func
    def main(dQ: T.Tensor((S, D), "float32"), Out: T.Tensor((S, D), "float16")):
        with T.Kernel(T.ceildiv(S, rows), threads=64) as bx:
            T.annotate_layout({dQ: dq_layout(dQ)})
            T.copy(dQ[bx * rows:(bx + 1) * rows, :], Out[bx * rows:(bx + 1) * rows, :])
    return main


@pytest.mark.parametrize("target", TARGETS)
def test_atomics_and_read_back_through_the_layout(target):
    x = np.random.default_rng(1).uniform(-1, 1, (S, D)).astype(np.float32)
    dq = np.random.default_rng(2).uniform(-1, 1, (S, D)).astype(np.float32)
    start = dq.copy()
    tilecraft.compile(accumulate(), target=target)(x, dq)
    # the storage: logical element (l, d) at the offset the layout gives it
    np.testing.assert_allclose(dq.reshape(-1)[dq_offsets()],
                               start.reshape(-1)[dq_offsets()] + 4 * x, rtol=1e-5, atol=1e-6)
    out = tilecraft.compile(read_back(), out_idx=[1], target=target)(dq)   # 20-row tiles: ragged
    np.testing.assert_allclose(out.astype(np.float32), start.reshape(-1)[dq_offsets()] + 4 * x,
                               rtol=2e-3, atol=2e-3)


def test_the_rewritten_program_reads_no_tile_of_the_tensor():
    """The copy of a tile of dQ is an element-wise loop: a tile of it is no box of memory."""
    text = str(read_back().body)
    assert "T.copy" not in text and "T.Parallel(20, 32)" in text
    assert "T.if_then_else" not in text   # the read is under the store's own bounds guard


def test_transposing_layout_of_a_four_dim_tensor():
    """TileLang's GQA backward stores dQ (b, l, h, d) as (b, h, l, d)."""
    shape = (2, 24, 3, 16)

    @T.prim_func
    def main(X: T.Tensor(shape, "float32"), dQ: T.Tensor(shape, "float32")):
        with T.Kernel(3, 2, threads=32) as (h, b):
            T.annotate_layout({dQ: T.Layout(dQ.shape, lambda b, l, h, d: [b, h, l, d])})
            T.copy(X[b, 0:24, h, :], dQ[b, 0:24, h, :])

    x = np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)
    for target in TARGETS:
        dq = np.full(shape, np.nan, np.float32)
        tilecraft.compile(main, target=target)(x, dq)
        np.testing.assert_array_equal(dq.reshape(2, 3, 24, 16), x.transpose(0, 2, 1, 3))


def test_a_tile_of_the_tensor_in_another_tile_op_is_refused():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                T.annotate_layout({A: T.Layout(A.shape, lambda i, j: [j, i])})
                T.fill(A[0:16, 0:64], 0)  # <- here
    expect(program, "T.fill of a tile of A, a global tensor whose T.annotate_layout places its "
           "elements out of row-major order: only T.copy and T.atomic_add take its tiles",
           "T.fill(")


def test_a_tma_atomic_into_the_tensor_is_refused():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                T.annotate_layout({A: T.Layout(A.shape, lambda i, j: [j, i])})
                s = T.alloc_shared((64, 64), "float32")
                T.fill(s, 1)
                T.atomic_add(A[0:64, 0:64], s, use_tma=True)  # <- here
    expect(program, "T.atomic_add(use_tma=True) adds a box of memory, but A is a global tensor "
           "whose T.annotate_layout places its elements out of row-major order", "T.atomic_add(")


def test_a_layout_that_sends_two_elements_to_one_place_is_refused():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32, 32), "float32")):
            with T.Kernel(1, threads=128):
                T.annotate_layout({A: T.Layout(A.shape, lambda i, j: [i * j % 32, j])})  # <- here
    expect(program, "the layout of A is not one-to-one", "T.annotate_layout(")
