"""The eager @tilecraft.jit form: the function's body is the kernel program, its T.const sizes
are bound from the tensors of each call, T.empty outputs are allocated and returned. Checked on
the interpreter and the sm_80 emulator against numpy (and torch CPU tensors where torch is
installed), compiled for sm_90a where nvcc is."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft import PassConfigKey, TileError
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect

TARGETS = ["interp", "emulator"]
needs_nvcc = pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")


def rng(seed=0):
    return np.random.default_rng(seed)


def vector_add(target):
    @tilecraft.jit(target=target)
    def add(A, B, block: int = 32):
        N = T.const("N")
        A: T.Tensor[[N], T.float32]
        B: T.Tensor[[N], T.float32]
        C = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
        return C

    return add


def matmul(target):
    """C = A @ B.T, B given as (N, K) (TileLang's GEMM example)."""
    @tilecraft.jit(target=target)
    def gemm(A, B, block_M: int = 32, block_N: int = 32, block_K: int = 16, dtype=T.float16):
        M, N, K = T.const("M N K")
        A: T.Tensor[[M, K], dtype]
        B: T.Tensor[[N, K], dtype]
        C = T.empty((M, N), T.float32)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_tile = T.alloc_shared((block_M, block_K), dtype)
            B_tile = T.alloc_shared((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_M, block_N), T.float32)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_tile)
                T.copy(B[bx * block_N, k * block_K], B_tile)
                T.gemm(A_tile, B_tile, acc, transpose_B=True)
            T.copy(acc, C[by * block_M, bx * block_N])
        return C

    return gemm


@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_binds_its_size_and_compiles_once_per_size(target):
    add = vector_add(target)
    a, b = rng(1).standard_normal(70).astype(np.float32), rng(2).standard_normal(70)
    b = b.astype(np.float32)
    np.testing.assert_allclose(add(a, b), a + b, rtol=1e-6)
    add(a, b)
    assert len(add._kernels) == 1             # the same size: the same kernel
    np.testing.assert_allclose(add(a[:33].copy(), b[:33].copy()), a[:33] + b[:33], rtol=1e-6)
    assert len(add._kernels) == 2             # another size: compiled for it
    assert add.compile(a, b).func.params[0].shape == (70,)   # specialized: a fixed size


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M, N, K", [(64, 64, 32), (40, 48, 40)])
def test_gemm_on_ragged_shapes(target, M, N, K):
    gemm = matmul(target)
    a = rng(M).standard_normal((M, K)).astype(np.float16)
    b = rng(N).standard_normal((N, K)).astype(np.float16)
    c = gemm(a, b)
    assert c.shape == (M, N) and c.dtype == np.float32
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32).T, rtol=1e-2,
                               atol=1e-2)


def test_compile_time_parameters_pick_the_program():
    gemm = matmul("interp")
    a = rng(3).standard_normal((32, 32)).astype(np.float16)
    wide = gemm.compile(a, a, block_N=16)
    assert wide is not gemm.compile(a, a)
    assert "T.Kernel(2, 1" in wide.get_kernel_source()
    assert gemm.compile(a, a, block_N=16) is wide


def test_sizes_by_keyword_compile_without_tensors():
    gemm = matmul("interp")
    kernel = gemm.compile(M=64, N=32, K=16)
    assert [p.shape for p in kernel.func.params] == [(64, 16), (32, 16), (64, 32)]
    a = np.ones((64, 16), np.float16)
    np.testing.assert_allclose(kernel(a, np.ones((32, 16), np.float16)), np.full((64, 32), 16))


@pytest.mark.parametrize("target", TARGETS)
def test_two_outputs_come_back_in_the_order_returned(target):
    @tilecraft.jit(target=target)
    def stats(X):
        M, N = T.const("M, N")
        X: T.Tensor[[M, N], T.float32]
        row_max = T.empty((M,), T.float32)
        row_sum = T.empty(M, dtype=T.float32)
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((M, N), T.float32)
            s = T.alloc_fragment((M,), T.float32)
            m = T.alloc_fragment((M,), T.float32)
            T.copy(X, x)
            T.reduce_sum(x, s, dim=1)
            T.reduce_max(x, m, dim=1)
            T.copy(s, row_sum)
            T.copy(m, row_max)
        return row_sum, row_max

    x = rng(4).standard_normal((16, 32)).astype(np.float32)
    total, largest = stats(x)
    np.testing.assert_allclose(total, x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(largest, x.max(1))


def test_a_function_without_outputs_writes_its_arguments_and_returns_none():
    @tilecraft.jit(target="interp")
    def scale(X, Y, factor: float = 2.0):
        N = T.const("N")
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = X[i] * factor

    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    assert scale(x, y, factor=3.0) is None
    np.testing.assert_array_equal(y, x * 3)


def test_dynamic_sizes_stay_symbolic_in_one_kernel():
    @tilecraft.jit(target="interp")
    def rows(X, scale: T.float32):
        R = T.dynamic("R")
        C = T.const("C")
        X: T.Tensor[[R, C], T.float32]
        Y = T.empty((R, C), T.float32)
        with T.Kernel(R, threads=32) as r:
            for j in T.Parallel(C):
                Y[r, j] = X[r, j] * scale
        return Y

    for n in (3, 9):
        x = rng(n).standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(rows(x, 0.5), x * 0.5, rtol=1e-6)
    assert len(rows._kernels) == 1           # R is bound at launch, not compiled in


def test_signature_declarations_and_outputs_made_in_a_macro():
    @T.macro
    def copy_of(A):
        M, N = A.shape
        B = T.empty(M, N, dtype=A.dtype)
        with T.Kernel(1, threads=32):
            T.copy(A, B)
        return B

    @tilecraft.jit(target="interp")
    def copy(A: T.Tensor[[16, 8], T.float32]):
        return copy_of(A)

    a = rng(5).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(copy(a), a)


def test_a_macro_asserts_shapes_that_are_the_same_size():
    @T.macro
    def copy_into(A, B):
        rows, cols = A.shape
        assert rows == B.shape[0] and cols == B.shape[1], "shapes differ"
        with T.Kernel(1, threads=32):
            T.copy(A, B)

    @tilecraft.jit(target="interp")
    def copy(A, B):
        R = T.dynamic("R")      # the same symbolic size on both sides: R == R holds
        C = T.const("C")
        A: T.Tensor[[R, C], T.float32]
        B: T.Tensor[[R, C], T.float32]
        copy_into(A, B)

    a, b = rng(6).standard_normal((8, 4)).astype(np.float32), np.zeros((8, 4), np.float32)
    copy(a, b)
    np.testing.assert_array_equal(b, a)


def test_torch_cpu_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    add = vector_add("interp")
    a, b = torch.arange(40, dtype=torch.float32), torch.ones(40, dtype=torch.float32)
    c = add(a, b)
    assert isinstance(c, torch.Tensor)
    assert torch.equal(c, a + b)


def test_workspace_and_pass_configs_of_the_program():
    @tilecraft.jit(target="interp", pass_configs={PassConfigKey.TL_DISABLE_TMA_LOWER: False})
    def twice(X):
        N = T.const("N")
        X: T.Tensor[[N], T.float32]
        T.annotate_pass_configs({PassConfigKey.TL_ENABLE_FAST_MATH: True,
                                 PassConfigKey.TL_DISABLE_TMA_LOWER: True})
        W = T.alloc_global((N,), T.float32)
        Y = T.empty((N,), T.float32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                W[i] = X[i] * 2.0
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = W[i] + 1.0
        return Y

    x = np.arange(12, dtype=np.float32)
    np.testing.assert_array_equal(twice(x), x * 2 + 1)
    configs = twice.compile(x).pass_configs
    assert configs[PassConfigKey.TL_ENABLE_FAST_MATH] is True
    assert configs[PassConfigKey.TL_DISABLE_TMA_LOWER] is False   # jit's own wins


def test_the_classic_form_is_still_a_factory():
    @tilecraft.jit(out_idx=-1, target="interp")
    def scale_by_table(n: int = 8):
        table = np.empty(n, np.float32)      # numpy's empty, not T.empty: still a factory
        table[:] = 3.0

        @T.prim_func
        def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
            T.annotate_pass_configs({PassConfigKey.TL_ENABLE_FAST_MATH: True})
            with T.Kernel(1, threads=32):
                for i in T.Parallel(n):
                    Y[i] = X[i] * float(table[0])
        return main

    kernel = scale_by_table()
    assert isinstance(kernel, tilecraft.JITKernel)
    assert kernel.pass_configs == {PassConfigKey.TL_ENABLE_FAST_MATH: True}
    np.testing.assert_array_equal(kernel(np.ones(8, np.float32)), np.full(8, 3.0))


@needs_nvcc
def test_compiled_for_sm90a():
    gemm = matmul("sm_90a")
    a, b = np.zeros((128, 64), np.float16), np.zeros((128, 64), np.float16)
    kernel = gemm.compile(a, b, block_M=64, block_N=64)
    assert kernel.n_regs > 0 and kernel.arch == "sm_90a"
    assert "wgmma" in gemm.get_kernel_source(a, b, block_M=64, block_N=64)


@needs_nvcc
def test_compile_flags_reach_nvcc():
    @tilecraft.jit(target="sm_80", compile_flags="-lineinfo")
    def flagged(X):
        N = T.const("N")
        X: T.Tensor[[N], T.float32]
        T.annotate_compile_flags(["--no-such-nvcc-flag"])
        Y = T.empty((N,), T.float32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = X[i]
        return Y

    with pytest.raises(TileError, match="no-such-nvcc-flag"):
        flagged.compile(np.zeros(32, np.float32))


# --- errors --------------------------------------------------------------------------------
def test_contradicting_sizes_are_reported_at_the_call():
    add = vector_add("interp")

    def program():
        add(np.zeros(8, np.float32), np.zeros(6, np.float32))  # <- here

    err = expect(program, "argument B: dimension 0 is 6, but N is 8 (A's dimension 0)", "add(")
    assert err.notes and err.notes[0][0] == "B is declared here"
    assert err.notes[0][1].source_line.strip() == "B: T.Tensor[[N], T.float32]"


def test_a_wrong_rank_and_a_wrong_dtype_are_reported_at_the_call():
    add = vector_add("interp")

    def rank():
        add(np.zeros((2, 4), np.float32), np.zeros(8, np.float32))  # <- here

    def dtype():
        add(np.zeros(8, np.float32), np.zeros(8, np.float16))  # <- here

    expect(rank, "argument A: declared with 1 dimension(s) [N], got a tensor of shape (2, 4)",
           "add(")
    expect(dtype, "argument B: declared float32, got a float16 tensor", "add(")


def test_a_keyword_size_contradicting_a_tensor():
    gemm = matmul("interp")

    def program():
        gemm(np.zeros((8, 4), np.float16), np.zeros((8, 4), np.float16), M=16)  # <- here

    expect(program, "argument A: dimension 0 is 8, but M is 16 (M=16 was passed)", "gemm(")


def test_arguments_of_the_wrong_kind():
    add = vector_add("interp")

    def not_a_tensor():
        add(np.zeros(8, np.float32), 3.0)  # <- here

    def tensor_for_a_value():
        add(np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(2))  # <- here

    def unknown_keyword():
        add(np.zeros(8, np.float32), np.zeros(8, np.float32), L=3)  # <- here

    expect(not_a_tensor, "argument B is a tensor argument of add; pass a numpy array", "add(")
    expect(tensor_for_a_value, "argument block is a tensor, but add does not declare it",
           "add(")
    expect(unknown_keyword, "add got an unexpected keyword argument 'L'", "add(")


def test_a_size_no_tensor_has():
    def program():
        @tilecraft.jit(target="interp")
        def f(A):
            N, P = T.const("N, P")  # <- here
            A: T.Tensor[[N * P], T.float32]
            with T.Kernel(1, threads=32):
                A[0] = 1.0
        f(np.zeros(4, np.float32))

    expect(program, "T.const N is a dimension of no declared tensor argument", "T.const")


def test_out_idx_with_the_eager_form():
    def program():
        @tilecraft.jit(out_idx=-1)  # <- here
        def f(A):
            A: T.Tensor[[4], T.float32]
            with T.Kernel(1, threads=32):
                A[0] = 1.0

    expect(program, "f is an eager @tilecraft.jit function, whose outputs are the T.empty",
           "tilecraft.jit")


def test_mistakes_in_the_body():
    x = np.zeros(4, np.float32)

    def not_returned():
        @tilecraft.jit(target="interp")
        def f(A):
            A: T.Tensor[[4], T.float32]
            B = T.empty((4,), T.float32)  # <- here
            with T.Kernel(1, threads=32):
                B[0] = A[0]
        f(x)

    def returns_an_input():
        @tilecraft.jit(target="interp")
        def f(A):
            A: T.Tensor[[4], T.float32]
            with T.Kernel(1, threads=32):
                A[0] = 1.0
            return A  # <- here
        f(x)

    def empty_in_a_kernel():
        @tilecraft.jit(target="interp")
        def f(A):
            A: T.Tensor[[4], T.float32]
            with T.Kernel(1, threads=32):
                B = T.empty((4,), T.float32)  # <- here
                B[0] = A[0]
        f(x)

    def used_before_declared():
        @tilecraft.jit(target="interp")
        def f(A):
            n = A.shape[0]  # <- here
            A: T.Tensor[[4], T.float32]
            with T.Kernel(1, threads=32):
                A[0] = n
        f(x)

    def return_in_a_kernel():
        @tilecraft.jit(target="interp")
        def f(A):
            A: T.Tensor[[4], T.float32]
            B = T.empty((4,), T.float32)
            with T.Kernel(1, threads=32):
                B[0] = A[0]
                return B  # <- here
        f(x)

    def declared_in_a_kernel():
        @tilecraft.jit(target="interp")
        def f(A, B):
            A: T.Tensor[[4], T.float32]
            with T.Kernel(1, threads=32):
                B: T.Tensor[[4], T.float32]  # <- here
                B[0] = A[0]
        f(x, x)

    expect(not_returned, "output B (T.empty) is never returned", "T.empty")
    expect(returns_an_input, "returns the tensors it made with T.empty; A is not one", "return")
    expect(empty_in_a_kernel, "T.empty declares an output of the whole function: call it "
           "before the T.Kernel blocks", "T.empty")
    expect(used_before_declared, "tensor argument A is used before its declaration", "A")
    expect(return_in_a_kernel, "the `return` of an eager @tilecraft.jit function comes after "
           "its T.Kernel blocks", "return")
    expect(declared_in_a_kernel, "the declaration of B belongs in the function's own body, "
           "before the T.Kernel blocks", "B:")


def test_eager_builtins_in_the_classic_form():
    def const_in_prim_func():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            N = T.const("N")  # <- here
            with T.Kernel(1, threads=32):
                A[0] = N

    def empty_in_prim_func():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            B = T.empty((4,), "float32")  # <- here
            with T.Kernel(1, threads=32):
                B[0] = A[0]

    def const_in_a_factory():
        @tilecraft.jit(out_idx=-1, target="interp")
        def factory(block=4):
            N = T.const("N")  # <- here

            @T.prim_func
            def main(A: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32):
                    A[0] = 1.0
            return main
        factory()

    def declaration_in_prim_func():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            B: T.Tensor[[4], T.float32]  # <- here
            with T.Kernel(1, threads=32):
                A[0] = 1.0

    expect(const_in_prim_func, "T.const belongs to the eager @tilecraft.jit form", "T.const")
    expect(empty_in_prim_func, "T.empty belongs to the eager @tilecraft.jit form", "T.empty")
    expect(const_in_a_factory, "T.const belongs to the eager @tilecraft.jit form", "T.const")
    expect(declaration_in_prim_func, "declares a tensor argument in the body of an eager",
           "B: T.Tensor")


def test_bad_options():
    def unknown_config():
        @tilecraft.jit(target="interp")
        def f(A):
            A: T.Tensor[[4], T.float32]
            T.annotate_pass_configs({"tl.no_such_option": True})  # <- here
            with T.Kernel(1, threads=32):
                A[0] = 1.0
        f(np.zeros(4, np.float32))

    def arch_flag():
        @tilecraft.jit(target="interp")
        def f(A):
            A: T.Tensor[[4], T.float32]
            T.annotate_compile_flags("-arch=sm_80")  # <- here
            with T.Kernel(1, threads=32):
                A[0] = 1.0
        f(np.zeros(4, np.float32))

    expect(unknown_config, "T.annotate_pass_configs: unknown pass config 'tl.no_such_option'",
           "T.annotate_pass_configs")
    expect(arch_flag, "T.annotate_compile_flags: compile_flags: -arch=sm_80 sets what",
           "T.annotate_compile_flags")


def test_autotune_over_the_eager_form_checks_its_configs_where_written():
    def program():
        @tilecraft.autotune(configs=[{"blocks": 32}])  # <- here
        @tilecraft.jit(target="interp")
        def add(A, block: int = 32):
            A: T.Tensor[[64], T.float32]
            with T.Kernel(1, threads=32):
                A[0] = 1.0

    expect(program, "blocks", "tilecraft.autotune")


def _tuned_scale(configs):
    @tilecraft.autotune(configs=configs, warmup=1, rep=2, cache=False, verbose=False)
    @tilecraft.jit(target="interp")
    def scale_rows(x, factor, blk_m=64, threads=128):
        M, N = T.const("M, N")
        x: T.Tensor([M, N], T.float32)
        y = T.empty([M, N], T.float32)
        top = T.empty([M], T.float32)
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            t = T.alloc_fragment([blk_m, N], T.float32)
            m = T.alloc_fragment([blk_m], T.float32)
            T.copy(x[bx * blk_m, 0], t)
            for i, j in T.Parallel(blk_m, N):
                t[i, j] = t[i, j] * factor
            T.reduce_max(t, m, dim=1)
            T.copy(t, y[bx * blk_m, 0])
            T.copy(m, top[bx * blk_m])
        return y, top
    return scale_rows


def test_autotune_over_the_eager_form_tunes_and_runs_on_the_calls_tensors():
    """The sizes come from the tensors (40 rows: ragged for both tiles), the configs are
    measured, the winner runs on the call's tensors; a tunable the call gives is pinned."""
    tuned = _tuned_scale([{"blk_m": 16, "threads": 64}, {"blk_m": 32, "threads": 128}])
    x = np.random.default_rng(0).uniform(-1, 1, (40, 32)).astype(np.float32)
    y, top = tuned(x, 3.0)
    np.testing.assert_allclose(y, 3 * x, rtol=1e-6)
    np.testing.assert_allclose(top, (3 * x).max(axis=1), rtol=1e-6)
    assert tuned.best_config in ({"blk_m": 16, "threads": 64}, {"blk_m": 32, "threads": 128})
    assert len(tuned.result.trials) == 2 and "M=40" in tuned.result.problem
    y, _ = tuned(x, 2.0, blk_m=16)
    np.testing.assert_allclose(y, 2 * x, rtol=1e-6)
    assert tuned.best_config["blk_m"] == 16 and {t.config["threads"] for t in
                                                tuned.result.trials} == {64, 128}
    kernel = tuned.compile(x, 2.0, blk_m=32, threads=64)   # every tunable given: no tuning
    assert kernel.func is not None


def test_autotune_over_the_eager_form_compiles_from_sizes_and_tunables_without_defaults():
    """TileLang's blocksparse GEMM form: f.compile(M=..., N=...) tunes from the T.const sizes
    alone, and tunables the function gives no default are the configurations' to set."""
    @tilecraft.autotune(configs=[{"blk_m": 8}, {"blk_m": 16}], warmup=1, rep=2, cache=False,
                        verbose=False)
    @tilecraft.jit(target="interp")
    def double(x, blk_m):
        M, N = T.const("M, N")
        x: T.Tensor([M, N], T.float32)
        y = T.empty([M, N], T.float32)
        with T.Kernel(T.ceildiv(M, blk_m), threads=32) as bx:
            for i, j in T.Parallel(blk_m, N):
                y[bx * blk_m + i, j] = x[bx * blk_m + i, j] * 2
        return y

    kernel = double.compile(M=40, N=16)
    assert kernel.config in ({"blk_m": 8}, {"blk_m": 16})
    x = np.random.default_rng(1).uniform(-1, 1, (40, 16)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), 2 * x)
    np.testing.assert_allclose(double(x), 2 * x)
