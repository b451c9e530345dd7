"""Per-thread code: T.get_thread_binding / T.get_block_binding and their extents, T.thread_binding
loops, per-thread locals and loops, checked on the interpreter and the sm_80 emulator against
numpy, and compiled for sm_80 and sm_90a; with the errors of its misuse (each at the user's
line and column)."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect

# The interpreter, then the emulator running the sm_80 and the sm_90a pipelines.
TARGETS = ("interp", "emulator", "emulator:sm_90a")


def rng(seed=0):
    return np.random.default_rng(seed)


def on_all(func, *args, out_idx=-1):
    """The results on TARGETS, the interpreter's first; the emulator must report nothing."""
    got = []
    for target in TARGETS:
        kernel = tilecraft.compile(func, out_idx=out_idx, target=target)
        got.append(kernel(*args))
        assert getattr(kernel, "reports", []) == [], kernel.reports
    return got


def indices(bx_n=2, by_n=3, threads=(8, 4, 2)):
    """Every thread writes its threadIdx, blockIdx and the extents into its own row."""
    X, Y, Z = threads

    @T.prim_func
    def main(Out: T.Tensor((by_n, bx_n, X * Y * Z, 8), "int32")):
        with T.Kernel(bx_n, by_n, threads=threads) as (bx, by):
            tx, ty, tz = T.get_thread_bindings()
            ex, ey, ez = T.get_thread_extents()
            gx, gy = T.get_block_extents()
            row = tx + ex * (ty + ey * tz)
            Out[by, bx, row, 0] = tx
            Out[by, bx, row, 1] = T.get_thread_binding(1)
            Out[by, bx, row, 2] = tz
            Out[by, bx, row, 3] = T.get_block_binding(0) * 10 + T.get_block_binding(1)
            Out[by, bx, row, 4] = ex * 100 + ey * 10 + ez
            Out[by, bx, row, 5] = gx * 10 + gy
            Out[by, bx, row, 6] = T.get_thread_extent(0) + T.get_block_extent(1)
            Out[by, bx, row, 7] = T.get_lane_idx() * 100 + T.get_warp_idx()
    return main


def test_thread_and_block_bindings_and_extents():
    interp, *emulated = on_all(indices())
    t = np.arange(64)
    x, y, z = t % 8, t // 8 % 4, t // 32
    for by in range(3):
        for bx in range(2):
            want = np.stack([x, y, z, np.full(64, bx * 10 + by), np.full(64, 842),
                             np.full(64, 23), np.full(64, 11), (t % 32) * 100 + t // 32], 1)
            np.testing.assert_array_equal(interp[by, bx], want)
    for emu in emulated:
        for emu in emulated:
            np.testing.assert_array_equal(emu, interp)


def test_one_dimensional_threads_give_index_zero_and_extent_one_elsewhere():
    @T.prim_func
    def main(Out: T.Tensor((64, 3), "int32")):
        with T.Kernel(1, threads=64) as bx:
            tx, ty, tz = T.get_thread_bindings()
            Out[tx, 0] = ty * 1000 + tz
            Out[tx, 1] = T.get_thread_extent(1) + T.get_thread_extent(2)
            Out[tx, 2] = T.get_block_binding() + T.get_block_bindings()[0]
    interp, *emulated = on_all(main)
    np.testing.assert_array_equal(interp, np.tile([0, 2, 0], (64, 1)))
    for emu in emulated:
        np.testing.assert_array_equal(emu, interp)


def gemv(N, K, block_n=4, reduce_threads=32, dtype="float16", accum="float32"):
    """TileLang's split-K GEMV: threadIdx.x splits K, threadIdx.y picks the row; each thread
    loads a vector of A and B into locals, accumulates, and the lanes that share a row meet
    in a shuffle butterfly."""
    tile_k = 8
    block_k = reduce_threads * tile_k

    @T.prim_func
    def main(A: T.Tensor((K,), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_n), threads=(reduce_threads, block_n)) as bn:
            tk = T.get_thread_binding(0)
            tn = T.get_thread_binding(1)
            A_local = T.alloc_local((tile_k,), dtype)
            B_local = T.alloc_local((tile_k,), dtype)
            C_accum = T.alloc_local((1,), accum)
            T.clear(C_accum)
            for bk in T.serial(T.ceildiv(K, block_k)):
                for k in T.vectorized(tile_k):
                    A_local[k] = A[bk * block_k + tk * tile_k + k]
                    B_local[k] = B[bn * block_n + tn, bk * block_k + tk * tile_k + k]
                for k in T.serial(tile_k):
                    C_accum[0] += A_local[k].astype(accum) * B_local[k].astype(accum)
            total = T.alloc_var(accum)
            total = C_accum[0]
            for offset in [reduce_threads >> s for s in range(1, reduce_threads.bit_length())]:
                total += T.shfl_xor(total, offset, width=reduce_threads)
            if tk == 0:
                C[bn * block_n + tn] = total
    return main


@pytest.mark.parametrize("reduce_threads", [32, 8])
def test_gemv_with_explicit_thread_bindings(reduce_threads):
    N, K = 12, 512
    a = rng(1).standard_normal(K).astype(np.float16)
    b = rng(2).standard_normal((N, K)).astype(np.float16)
    interp, *emulated = on_all(gemv(N, K, reduce_threads=reduce_threads), a, b)
    want = b.astype(np.float64) @ a.astype(np.float64)
    np.testing.assert_allclose(interp.astype(np.float64), want, rtol=2e-3, atol=2e-2)
    for emu in emulated:
        np.testing.assert_array_equal(emu, interp)


def splitk_gemv_atomic(N, K, block_n=8, block_k=16):
    """TileLang's split-K gemv: each thread adds its partial product into a shared slot with a
    scalar atomic whose value and address differ between threads, one thread of a row having
    cleared it under `if tk == 0`."""
    @T.prim_func
    def main(A: T.Tensor((K,), "float16"), B: T.Tensor((N, K), "float16"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_n), threads=(block_n, block_k)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            C_shared = T.alloc_shared((block_n,), "float32")
            if tk == 0:
                C_shared[tn] = 0
            T.clear(acc)
            for bk in T.serial(T.ceildiv(K, block_k)):
                acc[0] += A[bk * block_k + tk].astype("float32") * \
                    B[bn * block_n + tn, bk * block_k + tk].astype("float32")
            T.atomic_add(C_shared[tn], acc[0])
            if bn * block_n + tn < N:
                C[bn * block_n + tn] = C_shared[tn]
    return main


def test_a_scalar_atomic_with_per_thread_values_runs_on_every_thread():
    N, K = 21, 64   # the last block's rows past N are computed, not stored
    a = rng(3).standard_normal(K).astype(np.float16)
    b = rng(4).standard_normal((N, K)).astype(np.float16)
    want = b.astype(np.float64) @ a.astype(np.float64)
    for got in on_all(splitk_gemv_atomic(N, K), a, b):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def thread_binding_loops(n=256, threads=128):
    """TVMScript's thread loops: `for tx in T.thread_binding(...)` and `tx = T.thread_binding
    (...)`; a grid-stride loop whose start differs per thread."""
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(2, threads=threads) as bx:
            for tx in T.thread_binding(0, threads, thread="threadIdx.x"):
                B[bx * threads + tx] = A[bx * threads + tx] * 2.0
            t = T.thread_binding(threads, thread="threadIdx.x")
            for i in T.serial(bx * threads + t, n, 2 * threads):
                C[i] = A[i] + 1.0
    return main


def test_thread_binding_loops_and_a_loop_whose_start_differs_per_thread():
    a = rng(3).standard_normal(256).astype(np.float32)
    for got in on_all(thread_binding_loops(), a, out_idx=[1, 2]):
        np.testing.assert_array_equal(got[0], a * 2)
        np.testing.assert_array_equal(got[1], a + 1)


def per_thread_copies(n=64, vec=4):
    """Each thread copies its own vector in and out of a local, scales it, and counts the
    elements above zero with a loop whose trip count differs between threads."""
    @T.prim_func
    def main(A: T.Tensor((n * vec,), "float32"), B: T.Tensor((n * vec,), "float32"),
             Cnt: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=n) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_local((vec,), "float32")
            c = T.alloc_var("int32", init=0)
            T.copy(A[tx * vec:(tx + 1) * vec], v)
            for i in T.serial(vec):
                v[i] = v[i] * 3.0
            T.copy(v, B[tx * vec:(tx + 1) * vec])
            for i in T.serial(tx % vec):
                if v[i] > 0:
                    c += 1
            Cnt[tx] = c
    return main


def test_per_thread_local_copies_and_divergent_trip_counts():
    a = rng(4).standard_normal(256).astype(np.float32)
    rows = a.reshape(64, 4)
    want_cnt = np.array([(rows[t, :t % 4] > 0).sum() for t in range(64)], np.int32)
    for b, cnt in on_all(per_thread_copies(), a, out_idx=[1, 2]):
        np.testing.assert_array_equal(b, a * 3)
        np.testing.assert_array_equal(cnt, want_cnt)


def test_uniform_local_fill_is_every_threads_own():
    """T.fill of a local runs on every thread in full: its elements are then the same in
    every thread (a store of one of them by one thread is the value)."""
    @T.prim_func
    def main(B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            loc = T.alloc_local((4,), "float32")
            T.fill(loc, 2.5)
            B[0] = loc[0] + loc[3]
            B[1] = loc[1]
            T.copy(loc[2:4], B[2:4])
    for got in on_all(main):
        np.testing.assert_array_equal(got, [5.0, 2.5, 2.5, 2.5])


def test_printed_program_shows_the_bindings():
    text = gemv(8, 256).script()
    assert "tx = T.get_thread_binding(0)" in text and "ty = T.get_thread_binding(1)" in text
    assert "T.shfl_xor(total, 16, 32)" in text


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_per_thread_kernels_compile(arch):
    for func in (gemv(16, 512), thread_binding_loops(), per_thread_copies(), indices(),
                 splitk_gemv_atomic(21, 64)):
        assert tilecraft.compile(func, target=arch).n_regs > 0


def test_cuda_reads_the_thread_index():
    from tilecraft.backends.cuda import pipeline as pipelines
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    text = emit_cuda(pipelines.cuda_sm80(gemv(16, 512, block_n=4)))[0]
    assert "const int tx = threadIdx.x + 32 * threadIdx.y;" in text
    assert "B[((bn * 4 + tx / 32)) * 512 + bk * 256 + tx % 32 * 8 + k]" in text
    assert "if (tx % 32 == 0) {" in text and "tc::shfl_xor_group<32>(total[0], 16)" in text


# --- errors ------------------------------------------------------------------------------

def test_binding_outside_a_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            tx = T.get_thread_binding()  # <- here  # noqa: F841
    expect(program, "T.get_thread_binding must be called inside a `with T.Kernel(...)` block",
           "T.get_thread_binding(")


def test_binding_outside_a_prim_func():
    def program():
        T.get_block_binding(0)  # <- here
    expect(program, "T.get_block_binding can only be used inside a @T.prim_func",
           "T.get_block_binding(")


def test_thread_dim_out_of_range():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                tw = T.get_thread_binding(3)  # <- here  # noqa: F841
    expect(program, "T.get_thread_binding: dim must be 0, 1 or 2", "T.get_thread_binding(")


def test_block_dim_beyond_the_grid():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(4, threads=32) as bx:
                A[0] = T.get_block_extent(1)  # <- here
    expect(program, "T.get_block_extent(1): the T.Kernel's grid has 1 dimension(s), so there is "
           "no blockIdx.y", "T.get_block_extent(")


def test_thread_binding_loop_must_cover_the_launch():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for tx in T.thread_binding(0, 32, thread="threadIdx.x"):  # <- here
                    A[tx] = 0.0
    expect(program, "must cover the launch's extent along that axis, 0 to 64; got 0 to 32",
           "T.thread_binding(")


def test_thread_binding_needs_a_launch_index():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for tx in T.thread_binding(0, 64, thread="vthread"):  # <- here
                    A[tx] = 0.0
    expect(program, "thread= must name a launch index", "T.thread_binding(")


def test_thread_index_inside_parallel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                tx = T.get_thread_binding()
                for i in T.Parallel(64):
                    A[i] = tx * 1.0  # <- here
    expect(program, "T.Parallel uses `T.Cast(\"float32\", tx) * 1.0`, which differs between "
           "threads", "A[i]")


def test_binding_called_inside_parallel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(64):
                    A[i] = T.get_thread_binding() * 1.0  # <- here
    expect(program, "T.get_thread_binding cannot be used inside T.Parallel",
           "T.get_thread_binding(")


def test_block_wide_copy_under_a_thread_condition():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((64, 64), "float16")
                tx = T.get_thread_binding()
                if tx < 64:
                    T.copy(A, s)  # <- here
                T.copy(s, B)
    expect(program, "T.copy is a block-wide operation (the compiler shares it out over all the "
           "threads) and cannot run under `if tx < 64`", "T.copy(")


def test_parallel_in_a_divergent_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                tx = T.get_thread_binding()
                for k in T.serial(tx):
                    for i in T.Parallel(64):  # <- here
                        A[i] = 1.0
    expect(program, "T.Parallel runs in a loop whose bounds differ between threads",
           "T.Parallel(")


def test_fragment_written_with_a_per_thread_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                f = T.alloc_fragment((64,), "float32")
                T.clear(f)
                tx = T.get_thread_binding()
                f[0] = A[tx]  # <- here
                T.copy(f, A)
    expect(program, "fragment f is written with values that differ between threads", "f[0]")


def test_fragment_read_under_a_thread_condition():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                f = T.alloc_fragment((64,), "float32")
                T.copy(A, f)
                tx = T.get_thread_binding()
                if tx == 3:
                    A[tx] = f[5]  # <- here
    expect(program, "fragment f is read one element at a time under `if tx == 3`", "f[5]")
