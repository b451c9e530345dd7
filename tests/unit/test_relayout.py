"""A T.Parallel loop reading a fragment that another op laid out for other threads reads it
through shared memory (tileops/relayout.py); a write into such an element is an error that
names the op which chose the layout."""
import inspect
import warnings

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T

M, N, D = 64, 64, 128


def attention_chain(policy, write_scores=False):
    """S = Q K^T, m = rowmax(S), P = exp(S - m), O = (P V) * m: the scores are one gemm's
    accumulator, P the next gemm's A operand in registers."""
    @T.prim_func
    def main(Q: T.Tensor((M, D), "float16"), K: T.Tensor((N, D), "float16"),
             V: T.Tensor((N, D), "float16"), O: T.Tensor((M, D), "float32")):
        with T.Kernel(1, threads=128) as bx:
            Qs = T.alloc_shared((M, D), "float16")
            Ks = T.alloc_shared((N, D), "float16")
            Vs = T.alloc_shared((N, D), "float16")
            S = T.alloc_fragment((M, N), "float32")
            P = T.alloc_fragment((M, N), "float16")
            Of = T.alloc_fragment((M, D), "float32")
            m = T.alloc_fragment((M,), "float32")
            T.copy(Q, Qs)
            T.copy(K, Ks)
            T.copy(V, Vs)
            T.clear(S)
            T.clear(Of)
            T.gemm(Qs, Ks, S, transpose_B=True, policy=policy)
            T.reduce_max(S, m, dim=1)
            for i, j in T.Parallel(M, N):
                P[i, j] = T.exp(S[i, j] - m[i])
                if write_scores:
                    S[i, j] = 0  # <- here
            T.gemm(P, Vs, Of, policy=policy)
            for i, j in T.Parallel(M, D):
                Of[i, j] = Of[i, j] * m[i]
            T.copy(Of, O)
    return main


def inputs():
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal(s).astype(np.float16) for s in ((M, D), (N, D), (N, D)))
    s = Q.astype(np.float32) @ K.astype(np.float32).T
    m = s.max(1)
    p = np.exp(s - m[:, None]).astype(np.float16).astype(np.float32)
    return (Q, K, V), (p @ V.astype(np.float32)) * m[:, None]


@pytest.mark.parametrize("policy", ["Square", "FullCol"])
@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
def test_scores_laid_out_for_other_warps_are_read_through_shared_memory(policy, target):
    (Q, K, V), want = inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tilecraft.compile(attention_chain(getattr(T.GemmWarpPolicy, policy)),
                                   target=target)
    O = np.full((M, D), np.nan, np.float32)
    kernel(Q, K, V, O)
    assert not kernel.reports
    np.testing.assert_allclose(O, want, rtol=2e-3, atol=2e-3)
    said = [str(w.message) for w in caught if "through shared memory" in str(w.message)]
    if target == "emulator":   # mma.sync: the score gemm's warps split the columns
        assert said and "fragment S" in said[0] and "T.gemm at test_relayout.py" in said[0]
        assert "FullRow" in said[0]


def test_rows_in_one_warp_need_no_shared_copy():
    (Q, K, V), want = inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tilecraft.compile(attention_chain(T.GemmWarpPolicy.FullRow),
                                   target="emulator")
    assert not [w for w in caught if "through shared memory" in str(w.message)]
    O = np.full((M, D), np.nan, np.float32)
    kernel(Q, K, V, O)
    np.testing.assert_allclose(O, want, rtol=2e-3, atol=2e-3)


def test_a_write_into_an_element_another_thread_holds_is_an_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(tilecraft.TileError) as info:
            tilecraft.compile(attention_chain(T.GemmWarpPolicy.Square, write_scores=True),
                              target="emulator")
    err = info.value
    lines, first = inspect.getsourcelines(attention_chain)
    line = first + next(i for i, text in enumerate(lines) if "# <- here" in text)
    assert (err.span.line, err.span.col) == (line, lines[line - first].index("S[i, j]") + 1)
    assert "is written by thread" in err.message and "fragment S" in err.message
    assert "T.gemm at test_relayout.py" in err.message and "FullRow" in err.message


def test_the_relaid_chain_compiles_for_sm80(tmp_path):
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    from tilecraft.backends.cuda import pipeline as pipelines
    from tilecraft.backends.cuda.runtime import has_nvcc
    from tilecraft.backends.cuda.runtime.toolchain import compile_cubin
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = emit_cuda(pipelines.cuda(attention_chain(T.GemmWarpPolicy.Square), "sm_80",
                                          163 * 1024))[0]
    assert "S_relaid" in source
    if not has_nvcc():
        pytest.skip("nvcc is not installed")
    compile_cubin(source, "sm_80")


def small_column_scale():
    """Y = X * S[row]: S is a (4, 1) fragment, fewer elements than the block has threads,
    read by the 32 threads of each row."""
    @T.prim_func
    def main(X: T.Tensor((4, 32), "float32"), S: T.Tensor((4, 1), "float32"),
             Y: T.Tensor((4, 32), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((4, 32), "float32")
            s = T.alloc_fragment((4, 1), "float32")
            T.copy(X, x)
            T.copy(S, s)
            for i, j in T.Parallel(4, 32):
                x[i, j] = x[i, j] * s[i, j // 64]
            T.copy(x, Y)
    return main


@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
def test_a_small_fragment_goes_through_shared_memory_from_its_holders_only(target):
    # Its layout has more slots than elements: only the slots holding one store it (the others
    # wrote past the end of the shared copy).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel = tilecraft.compile(small_column_scale(), target=target)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((4, 32)).astype(np.float32)
    S = rng.standard_normal((4, 1)).astype(np.float32)
    Y = np.full((4, 32), np.nan, np.float32)
    kernel(X, S, Y)
    assert not kernel.reports
    np.testing.assert_array_equal(Y, X * S)
