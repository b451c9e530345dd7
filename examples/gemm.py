"""Matrix multiplication (paper appendix O.1): C = A @ B for A [M, K] and B [K, N] in float16,
accumulated in float32 and stored as float16. Each thread block owns one block_M x block_N tile
of C; the K loop is software-pipelined (T.Pipelined) so that the copies of the next A and B
tiles into shared memory overlap the tile GEMM on the current ones. T.use_swizzle optionally
rasterizes the blocks in panels for better L2 reuse. M, N and K need not be multiples of the
tile sizes: out-of-range elements are read as zero and never written.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T


@tilecraft.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128,
           swizzle_panel=0, dtype="float16", accum_dtype="float32"):
    @T.prim_func
    def main(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor((K, N), dtype),
            C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            if swizzle_panel > 0:
                T.use_swizzle(panel_size=swizzle_panel)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


@tilecraft.jit
def matmul_splitk(M, N, K, block_M=128, block_N=256, block_K=64, split_k=2, num_stages=4,
                  threads=256, dtype="float16", accum_dtype="float32"):
    """C += A @ B with K split over `split_k` blocks per tile of C, for shapes whose few tiles
    of C would leave most of the GPU idle (M x N small, K long). Each block adds its partial
    tile into C with T.atomic_add; use_tma=True makes that one TMA reduction per box on sm_90
    (element-wise atomics elsewhere). C must hold what the product is added to (zeros)."""
    k_tiles = -(-K // (split_k * block_K))   # K steps per split; TMA zero-fills past K

    @T.prim_func
    def main(
            A: T.Tensor((M, K), dtype),
            B: T.Tensor((K, N), dtype),
            C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split_k,
                      threads=threads) as (bx, by, bz):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_shared = T.alloc_shared((block_M, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            T.clear(C_local)
            for k in T.Pipelined(k_tiles, num_stages=num_stages):
                T.copy(A[by * block_M, (bz * k_tiles + k) * block_K], A_shared)
                T.copy(B[(bz * k_tiles + k) * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C_shared)
            T.atomic_add(C[by * block_M, bx * block_N], C_shared, use_tma=True)

    return main


def ref_program(A, B):
    return A.astype(np.float32) @ B.astype(np.float32)


def run(M=256, N=256, K=256, seed=0, **config):
    """Build the kernel, run it on random inputs, check it against ref_program and return the
    largest absolute error."""
    kernel = matmul(M, N, K, **config)
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1.0, 1.0, (M, K)).astype(np.float16)
    B = rng.uniform(-1.0, 1.0, (K, N)).astype(np.float16)
    C = kernel(A, B)
    ref = ref_program(A, B)
    assert C.shape == (M, N) and C.dtype == np.float16
    np.testing.assert_allclose(C.astype(np.float32), ref, rtol=1e-2, atol=1e-2)
    return float(np.abs(C.astype(np.float32) - ref).max())


def run_splitk(M=256, N=256, K=512, seed=0, **config):
    """matmul_splitk on random inputs, added into a random C; returns the largest absolute
    error against C + A @ B."""
    kernel = matmul_splitk(M, N, K, **config)
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1.0, 1.0, (M, K)).astype(np.float16)
    B = rng.uniform(-1.0, 1.0, (K, N)).astype(np.float16)
    C = rng.uniform(-1.0, 1.0, (M, N)).astype(np.float16)
    want = C.astype(np.float32) + ref_program(A, B)
    kernel(A, B, C)
    np.testing.assert_allclose(C.astype(np.float32), want, rtol=1e-2, atol=5e-2)
    return float(np.abs(C.astype(np.float32) - want).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--block_m", type=int, default=128)
    parser.add_argument("--block_n", type=int, default=128)
    parser.add_argument("--block_k", type=int, default=32)
    parser.add_argument("--swizzle_panel", type=int, default=0)
    args = parser.parse_args()
    err = run(args.m, args.n, args.k, block_M=args.block_m, block_N=args.block_n,
              block_K=args.block_k, swizzle_panel=args.swizzle_panel)
    print(f"gemm: ok (max abs error {err:.2e})")
