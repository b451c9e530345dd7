"""Programs the differential fuzzer (tests/fuzz) found wrong, shrunk, each against numpy on
the targets where it failed. The programs are the fuzzer's renderings, pasted."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T


def rng(seed=0):
    return np.random.default_rng(seed)


def signed(r, shape, dtype=np.float32):
    """Random values of magnitude 0.25 to 2, either sign (never zero)."""
    return (r.uniform(0.25, 2.0, shape) * r.choice((-1.0, 1.0), shape)).astype(dtype)


def run(func, target, *args):
    """The kernel on target with args (written in place); the emulator's checker must be
    silent."""
    kernel = tilecraft.compile(func, target=target)
    kernel(*args)
    assert getattr(kernel, "reports", []) == []
    return args


# --- a pipelined copy whose origin is read from a buffer -----------------------------------
def indexed_tiles():
    M, L = 16, 8   # whole rows: each tile is one contiguous range, as the prefetch needs

    @T.prim_func
    def main(X: T.Tensor((M, L), "float32"), Idx: T.Tensor((5,), "int32"), count: T.int32,
             Y: T.Tensor((M, L), "float32")):
        with T.Kernel(T.ceildiv(M, 8), threads=32) as bx:
            x_s = T.alloc_shared((8, 8), "float32")
            acc = T.alloc_fragment((8, 8), "float32")
            T.fill(acc, 0.25)
            for k in T.Pipelined(count, num_stages=3):
                T.copy(X[bx * 8, Idx[k] * 8], x_s)
                for i, j in T.Parallel(8, 8):
                    acc[i, j] = T.max(acc[i, j], x_s[i, j])
            T.copy(acc, Y[bx * 8, 0])

    return main


@pytest.mark.parametrize("count", [0, 3])
@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_pipelined_copy_at_an_origin_read_from_a_buffer(target, count):
    """The L2 prefetch of sm_90a's warp-specialized loop counted the blocks reading each tile
    by evaluating the copy's origin Idx[k] * 8 with no memory: AttributeError. A tile whose
    origin is data is now left without a prefetch."""
    X = signed(rng(1), (16, 8))
    Idx = np.zeros(5, np.int32)
    Y = np.full((16, 8), np.nan, np.float32)
    run(indexed_tiles(), target, X, Idx, count, Y)
    want = np.maximum(X, 0.25) if count else np.full((16, 8), 0.25, np.float32)
    np.testing.assert_array_equal(Y, want)


# --- a TMA store straight from a warp-specialized loop's stage -----------------------------
def tiles_through_shared():
    M, L = 16, 32

    @T.prim_func
    def main(X: T.Tensor((M, L), "float32"), Z: T.Tensor((M, L), "float32")):
        with T.Kernel(T.ceildiv(M, 8), threads=32) as bx:
            x_s = T.alloc_shared((8, 8), "float32")
            for k in T.Pipelined(4, num_stages=2):
                T.copy(X[bx * 8, k * 8], x_s)
                T.copy(x_s, Z[bx * 8, k * 8])

    return main


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_tma_store_from_a_pipeline_stage_is_read_before_the_stage_is_refilled(target):
    """On sm_90a the consumers stored each stage by TMA and released it at once: the producer's
    next TMA load could overwrite the stage while the store still read it (the emulator's
    race report). The issuing thread now waits for its stores' reads before each release."""
    X = signed(rng(2), (16, 32))
    Z = np.full((16, 32), np.nan, np.float32)
    run(tiles_through_shared(), target, X, Z)
    np.testing.assert_array_equal(Z, X)


def test_stage_release_waits_for_tma_store_reads_in_the_sm90a_source():
    source = tilecraft.compile(tiles_through_shared(), target="emulator:sm_90a").get_kernel_source()
    lines = [line.strip() for line in source.splitlines()]
    release = next(i for i, line in enumerate(lines) if "mbarrier_arrive_warp" in line)
    assert "tma_store_wait<0>" in lines[release - 1]
    assert any("tma_store_2d" in line for line in lines[:release])


# --- a gemm accumulating in float16 ----------------------------------------------------------
def half_accumulator(a_in_registers, M=40, N=24, K=48):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 8), T.ceildiv(M, 16), threads=32) as (bx, by):
            A_s = T.alloc_shared((16, 16), "float16")
            B_s = T.alloc_shared((16, 8), "float16")
            A_f = T.alloc_fragment((16, 16), "float16")
            C_f = T.alloc_fragment((16, 8), "float16")
            T.clear(C_f)
            for k in T.serial(T.ceildiv(K, 16)):
                T.copy(A[by * 16, k * 16], A_s)
                T.copy(B[k * 16, bx * 8], B_s)
                if a_in_registers:
                    T.copy(A_s, A_f)
                    T.gemm(A_f, B_s, C_f, policy=T.GemmWarpPolicy.Square)
                else:
                    T.gemm(A_s, B_s, C_f, policy=T.GemmWarpPolicy.Square)
            T.copy(C_f, C[by * 16, bx * 8])

    return main


@pytest.mark.parametrize("a_in_registers", [True, False], ids=["A-registers", "A-shared"])
@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
def test_gemm_accumulating_in_half_precision(target, a_in_registers):
    """A float16 accumulator had no tensor-core path: the scalar fallback refused A in
    registers ("register operands need float16 or bfloat16 tensor-core operands (got
    float16)"). It now runs on mma.sync's f16-accumulating instruction."""
    r = rng(3)
    A, B = signed(r, (40, 48), np.float16), signed(r, (48, 24), np.float16)
    C = np.full((40, 24), np.nan, np.float32)
    run(half_accumulator(a_in_registers), target, A, B, C)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    bound = (np.abs(A).astype(np.float64) @ np.abs(B)) * 2.0 ** -10 * 4  # a few half ulps
    assert np.all(np.abs(C - exact) <= bound)


def test_gemm_accumulating_in_half_precision_uses_the_f16_mma():
    source = tilecraft.compile(half_accumulator(True), target="emulator").get_kernel_source()
    assert "mma_m16n8k16_f16_f16" in source


# --- an attention step whose two accumulators are laid out over the warps differently -------
def attention_step(bm=32, d=16, dv=16, N=20, threads=64, policy_pv="FullCol"):
    M = bm

    @T.prim_func
    def main(Q: T.Tensor((M, d), "float16"), K: T.Tensor((N, d), "float16"),
             V: T.Tensor((N, dv), "float16"), O: T.Tensor((M, dv), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            q = T.alloc_shared((bm, d), "float16")
            k_s = T.alloc_shared((32, d), "float16")
            v_s = T.alloc_shared((32, dv), "float16")
            s = T.alloc_fragment((bm, 32), "float32")
            p = T.alloc_shared((bm, 32), "float16")
            o = T.alloc_fragment((bm, dv), "float32")
            m = T.alloc_fragment((bm,), "float32")
            total = T.alloc_fragment((bm,), "float32")
            T.copy(Q[bx * bm, 0], q)
            T.copy(K[0, 0], k_s)
            T.copy(V[0, 0], v_s)
            T.clear(s)
            T.clear(o)
            T.gemm(q, k_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(bm, 32):
                s[i, j] = T.if_then_else(j < N, s[i, j] * 0.25, -T.infinity("float32"))
            T.reduce_max(s, m, dim=1)
            for i, j in T.Parallel(bm, 32):
                s[i, j] = T.exp(s[i, j] - m[i])
            T.reduce_sum(s, total, dim=1)
            T.copy(s, p)
            T.gemm(p, v_s, o, policy=getattr(T.GemmWarpPolicy, policy_pv))
            for i, j in T.Parallel(bm, dv):
                o[i, j] /= total[i]
            T.copy(o, O[bx * bm, 0])

    return main


def _softmax_attention(Q, K, V, scale):
    s = Q.astype(np.float64) @ K.astype(np.float64).T * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return p @ V.astype(np.float64) / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("target, policy_pv", [
    ("interp", "FullCol"), ("emulator", "FullRow"), ("emulator:sm_90a", "FullRow"),
    # The row sums take the scores' FullRow layout; the FullCol output's loop reads them
    # through a shared copy (tileops/relayout.py).
    ("emulator", "FullCol"),
])
def test_attention_step_over_accumulators_of_different_warp_layouts(target, policy_pv):
    r = rng(4)
    Q, K, V = (signed(r, shape, np.float16) for shape in ((32, 16), (20, 16), (20, 16)))
    O = np.full((32, 16), np.nan, np.float16)
    run(attention_step(policy_pv=policy_pv), target, Q, K, V, O)
    np.testing.assert_allclose(O.astype(np.float64), _softmax_attention(Q, K, V, 0.25),
                               rtol=1e-2, atol=1e-2)
