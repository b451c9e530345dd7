"""T.reshape / T.view check their arguments as TileLang does (the view must cover exactly the
buffer's bits); a view in the same dtype reads and writes the buffer it views (a gemm
accumulator, a shared tile, a global tensor), one in another dtype is refused at its line; and
make_swizzled_layout takes the buffer alone, as TileLang's scripts call it, in a GEMM checked
on the interpreter and both emulators against numpy."""
import warnings

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError
from tilecraft.layout import make_swizzled_layout, swizzled_layout

from error_expect import expect, where


BN, BQ, H, D = 32, 4, 8, 64


@T.prim_func
def indexer_scores(Q: T.Tensor((BQ * H, D), "float16"), K: T.Tensor((BN, D), "float16"),
                   W: T.Tensor((BQ, H), "float32"), O: T.Tensor((BN, BQ), "float32")):
    """TileLang's DeepSeek indexer form: a gemm accumulator seen per (query, head) through
    T.reshape, weighted in place and reduced over the heads."""
    with T.Kernel(1, threads=128):
        q = T.alloc_shared((BQ * H, D), "float16")
        k = T.alloc_shared((BN, D), "float16")
        s = T.alloc_fragment((BN, BQ * H), "float32")
        s_r = T.reshape(s, (BN, BQ, H))
        w = T.alloc_fragment((BQ, H), "float32")
        logits = T.alloc_fragment((BN, BQ), "float32")
        T.copy(Q, q)
        T.copy(K, k)
        T.copy(W, w)
        T.gemm(k, q, s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
        for a, b, c in T.Parallel(BN, BQ, H):
            s_r[a, b, c] = T.max(s_r[a, b, c], 0) * w[b, c]
        T.reduce_sum(s_r, logits, dim=-1)
        T.copy(logits, O)


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_reshape_of_a_gemm_accumulator_is_the_accumulator(target):
    rng = np.random.default_rng(0)
    q = rng.uniform(-1, 1, (BQ * H, D)).astype(np.float16)
    k = rng.uniform(-1, 1, (BN, D)).astype(np.float16)
    w = rng.uniform(-1, 1, (BQ, H)).astype(np.float32)
    scores = np.maximum(k.astype(np.float32) @ q.astype(np.float32).T, 0)
    want = (scores.reshape(BN, BQ, H) * w).sum(-1)
    got = tilecraft.compile(indexer_scores, out_idx=[3], target=target)(q, k, w)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", ["interp", "emulator"])
def test_views_of_shared_and_global_buffers(target):
    """A shared tile filled through a (rows, 2, 16) view and a global tensor read through a
    flat one; T.view in the same dtype is a reshape."""
    @T.prim_func
    def main(A: T.Tensor((16, 32), "float32"), B: T.Tensor((16, 32), "float32")):
        with T.Kernel(1, threads=64):
            flat = T.view(A, shape=(512,))
            s = T.alloc_shared((16, 32), "float32")
            s3 = T.reshape(s, (16, 2, 16))
            for i, h, j in T.Parallel(16, 2, 16):
                s3[i, h, j] = flat[i * 32 + h * 16 + j] * (h + 1)
            T.copy(s, B)

    a = np.random.default_rng(1).uniform(-1, 1, (16, 32)).astype(np.float32)
    got = tilecraft.compile(main, out_idx=[1], target=target)(a)
    np.testing.assert_allclose(got, a * np.repeat([1.0, 2.0], 16)[None, :], rtol=1e-6)


def test_a_tile_op_writing_a_view_is_refused_at_its_line():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32")):
            with T.Kernel(1, threads=128):
                r = T.alloc_fragment((64, 32), "float32")
                r3 = T.reshape(r, (64, 4, 8))
                T.fill(r3, 0)  # <- here
                T.copy(r, A)
        return main
    expect(program, "T.fill of a tile of r3, a view of r in another shape: only T.copy and "
           "T.atomic_add write its tiles", "T.fill")


def test_view_in_another_dtype_is_refused_at_its_line():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 32), "float16")
                T.copy(A, S)
                T.view(S, (64, 16), "float32")  # <- here
        return main
    expect(program, "T.view(S) in another dtype (float32 over float16) is not supported yet",
           "T.view")


def test_a_view_must_cover_the_buffers_bits():
    def as_int8():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128):
                T.view(A, (64, 32), "int8")  # <- here
        return main
    expect(as_int8, "T.view(A): the view (64, 32) of int8 does not cover the buffer's bits: "
                    "A is (64, 32) of float16", "T.view")

    def short():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 32), "float16")
                T.reshape(S, (64, 31))  # <- here
        return main
    expect(short, "T.reshape(S): the view (64, 31) of float16 does not cover", "T.reshape")

    def bad_dtype():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128):
                T.view(A, dtype="float7")  # <- here
        return main
    expect(bad_dtype, "T.view: unknown dtype 'float7'", "T.view")


@tilecraft.jit(out_idx=[-1])
def annotated_gemm(M, N, K, bm=64, bn=64, bk=32):
    """C = A B^T with B stored (N, K), both operand tiles given TileLang's swizzled layout."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a_tile = T.alloc_shared((bm, bk), "float16")
            b_tile = T.alloc_shared((bn, bk), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.annotate_layout({a_tile: make_swizzled_layout(a_tile),
                               b_tile: make_swizzled_layout(b_tile)})
            T.fill(acc, 0)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, ko * bk], a_tile)
                T.copy(B[bx * bn, ko * bk], b_tile)
                T.gemm(a_tile, b_tile, acc, transpose_B=True)
            T.copy(acc, C[by * bm, bx * bn])
    return main


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_swizzled_layout_of_a_buffer_in_a_gemm(target):
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
    B = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
    kernel = tilecraft.compile(annotated_gemm.get_tir(128, 128, 64), out_idx=[-1], target=target)
    np.testing.assert_allclose(kernel(A, B).astype(np.float32),
                               A.astype(np.float32) @ B.astype(np.float32).T, atol=2e-2,
                               rtol=2e-2)


def test_swizzled_layout_of_a_buffer_is_that_of_its_shape():
    from tilecraft.ir import dtypes as dt
    from tilecraft.ir.buffer import Buffer
    two = Buffer("S", (64, 32), dt.dtype("float16"), "shared.dyn")
    lay = make_swizzled_layout(two)
    assert lay.mode == "64B" and (lay.table() == swizzled_layout(64, 32, 16).table()).all()
    assert make_swizzled_layout(64, 32, 16).mode == "64B"       # the numeric form remains
    three = Buffer("S3", (2, 64, 32), dt.dtype("float16"), "shared.dyn")
    stacked = make_swizzled_layout(three)
    assert stacked.shape == (2, 64, 32) and stacked.alignment == 512
    assert (stacked.table().reshape(128, 32, -1) == swizzled_layout(128, 32, 16).table()).all()
    with pytest.raises(TileError, match="k_major=False\\) is not supported yet"):
        make_swizzled_layout(two, k_major=False)
    with pytest.raises(TileError, match="2 or more static dimensions"):
        make_swizzled_layout(Buffer("V", (64,), dt.dtype("float16"), "shared.dyn"))
    with pytest.raises(TileError, match="takes a shared buffer"):
        make_swizzled_layout("S")


@pytest.mark.skipif(not __import__("tilecraft.backends.cuda.runtime",
                                   fromlist=["has_nvcc"]).has_nvcc(), reason="nvcc not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_annotated_gemm_compiles(arch):
    kernel = tilecraft.compile(annotated_gemm.get_tir(256, 256, 128), out_idx=[-1], target=arch)
    assert kernel.n_regs > 0 and kernel.n_spills == 0


@pytest.mark.parametrize("form", ["forward_fn", "two functions"])
@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_user_fragment_in_tilelangs_constructor_forms(form, target):
    """T.Fragment(shape, forward_fn=...) returning (thread, index), or forward_thread_fn with
    forward_index_fn returning a multi-part register index (flattened over its ranges)."""
    def thread(i, j):
        return (i % 8) * 4 + (j // 2) % 4

    def index(i, j):
        return [i // 8, j // 8, j % 2]

    frag = (T.Fragment((16, 16), forward_fn=lambda i, j: (thread(i, j), index(i, j)))
            if form == "forward_fn" else
            T.Fragment((16, 16), forward_thread_fn=thread, forward_index_fn=index))
    assert frag.num_threads == 32

    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            r = T.alloc_fragment((16, 16), "float32")
            T.annotate_layout({r: frag})
            T.copy(A, r)
            for i, j in T.Parallel(16, 16):
                r[i, j] = r[i, j] * 3 + 1
            T.copy(r, B)

    a = np.random.default_rng(5).uniform(-1, 1, (16, 16)).astype(np.float32)
    got = tilecraft.compile(main, out_idx=[1], target=target)(a)
    np.testing.assert_allclose(got, a * 3 + 1, rtol=1e-6)


def test_layout_takes_a_buffers_shape_and_refuses_a_symbolic_one():
    assert T.Layout((4, 8), lambda i, j: [j, i]).output_shape == (8, 4)
    n = T.dynamic("n")
    with pytest.raises(TileError, match="T.Layout: the shape must be positive sizes known when "
                                        "compiling"):
        T.Layout((n, 8), lambda i, j: [j, i])


def _macro_program(annotation):
    @T.macro
    def scale(buf: annotation, factor):
        for i, j in T.Parallel(16, 32):
            buf[i, j] = buf[i, j] * factor

    @T.prim_func
    def main(A: T.Tensor((16, 32), "float32"), B: T.Tensor((16, 32), "float32")):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((16, 32), "float32")
            T.copy(A, s)
            scale(s, 2.0)  # <- here
            T.copy(s, B)
    return main


def test_macro_parameters_annotated_with_tilelangs_buffer_kinds():
    a = np.random.default_rng(4).uniform(-1, 1, (16, 32)).astype(np.float32)
    got = tilecraft.compile(_macro_program(T.SharedBuffer([16, 32], "float32")), out_idx=[1],
                            target="emulator")(a)
    np.testing.assert_allclose(got, 2 * a)
    call_line = where(_macro_program, "scale(")
    for annotation, message in [
            (T.FragmentBuffer([16, 32], "float32"), "macro scale: parameter buf is annotated as "
             "a local.fragment buffer, but s is shared.dyn"),
            (T.SharedBuffer([16, 16], "float32"), "macro scale: parameter buf is annotated "
             "with shape (16, 16), but s has shape (16, 32)")]:
        with pytest.raises(TileError) as info:
            _macro_program(annotation)
        assert message in info.value.message
        assert (info.value.span.line, info.value.span.col) == call_line


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_reduction_read_transposed_keeps_its_partition(target):
    """A reduction's result read by a loop in the other order (out[b, a] = r[a, b]) keeps the
    layout the reduction gives it: each element in the threads that reduced it, not every
    element in every thread."""
    @T.prim_func
    def main(A: T.Tensor((64, 4, 32), "float32"), O: T.Tensor((4, 64), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((64, 4, 32), "float32")
            r = T.alloc_fragment((64, 4), "float32")
            T.copy(A, a)
            T.reduce_sum(a, r, dim=-1)
            for j, i in T.Parallel(4, 64):
                O[j, i] = r[i, j]

    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no "no partition over the threads exists for r"
        kernel = tilecraft.compile(main, out_idx=[1], target=target)
    x = np.random.default_rng(7).uniform(-1, 1, (64, 4, 32)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), x.sum(-1).T, rtol=1e-5, atol=1e-5)


def tilelang_convolution(N, C, H, W, F, K, S, D, P, block_M=32, block_N=16, block_K=16):
    """TileLang's convolution example as written there: the weight and output tensors seen
    flat through T.Tensor(shape, dtype, X.data), the input tile by T.im2col."""
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    @T.prim_func
    def main(data: T.Tensor((N, H, W, C), "float16"), kernel: T.Tensor((K, K, C, F), "float16"),
             out: T.Tensor((N, OH, OW, F), "float16")):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M),
                      threads=64) as (bx, by):
            data_shared = T.alloc_shared((block_M, block_K), "float16")
            kernel_shared = T.alloc_shared((block_K, block_N), "float16")
            out_local = T.alloc_fragment((block_M, block_N), "float32")
            kernel_flat = T.Tensor((K * K * C, F), "float16", kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), "float16", out.data)
            T.clear(out_local)
            for k_iter in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=2):
                T.im2col(data, data_shared, by, k_iter, K, S, D, P)
                T.copy(kernel_flat[k_iter * block_K, bx * block_N], kernel_shared)
                T.gemm(data_shared, kernel_shared, out_local)
            T.copy(out_local, out_flat[by * block_M, bx * block_N])
    return main, OH, OW


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_tilelangs_convolution_with_views_of_its_tensors(target):
    N, C, H, W, F, K, S, D, P = 2, 16, 7, 9, 32, 3, 1, 1, 1
    func, OH, OW = tilelang_convolution(N, C, H, W, F, K, S, D, P)
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, (N, H, W, C)).astype(np.float16)
    w = rng.uniform(-1, 1, (K, K, C, F)).astype(np.float16)
    got = tilecraft.compile(func, out_idx=[2], target=target)(x, w)
    padded = np.pad(x.astype(np.float32), ((0, 0), (P, P), (P, P), (0, 0)))
    want = np.zeros((N, OH, OW, F), np.float32)
    for kh in range(K):
        for kw in range(K):
            want += padded[:, kh:kh + OH, kw:kw + OW, :] @ w[kh, kw].astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)
