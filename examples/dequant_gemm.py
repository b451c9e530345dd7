"""Dequantized matrix multiplication W4A16 (paper appendix O.2): C = A @ dequant(B)^T, where the
activations A [M, K] are float16 and the weights are 4-bit integers packed two per byte with a
float16 scale per group of `group_size` consecutive K elements. The kernel unpacks and scales
the weight tile in registers (bit operations in a T.Parallel loop into a float16 shared tile)
and feeds it to a tile GEMM with float32 accumulation. A GEMV variant for decoding (M = 1 or a
few rows) keeps one activation row per block and reduces with T.reduce_sum instead of a GEMM;
`dequant_gemv_fast` is that GEMV written for memory bandwidth (a warp per row, K across lanes).
`dequant_gemm(..., weight_in_registers=True)` computes C^T = W A^T with the unpacked weight tile
as the register operand of the tensor-core instruction (no shared-memory round trip): the faster
form from a few rows to a few hundred (bench/dequant_gemm.md).

Packing format (what `pack_int4` produces):
  * B_packed is uint8 of shape [N, K // 2]; row n holds output channel n.
  * Weight element (n, k) lives in byte B_packed[n, k // 2]: even k in the low nibble
    (bits 0-3), odd k in the high nibble (bits 4-7).
  * A nibble q in 0..15 encodes the signed value q - 8 (range -8..7).
  * Scale is float16 of shape [N, ceil(K / group_size)];
    W[n, k] = (q(n, k) - 8) * Scale[n, k // group_size].
K must be even; M, N and K need not be multiples of the tile sizes.
"""
import argparse

import numpy as np

import tilecraft
import tilecraft.language as T


def scales_per_tile(block_K, group_size):
    """The scales a K tile of the weights needs: block_K // group_size when the tile holds
    whole groups, one when it lies inside a group."""
    assert block_K % group_size == 0 or group_size % block_K == 0, \
        "a K tile holds whole groups, or lies in one group"
    return max(1, block_K // group_size)


@tilecraft.jit(out_idx=[-1])
def dequant_gemm(M, N, K, group_size=32, block_M=64, block_N=64, block_K=64, num_stages=2,
                 threads=128, weight_in_registers=False, dtype="float16", accum_dtype="float32"):
    """weight_in_registers: compute C^T = W A^T instead, with the weight tile unpacked and
    scaled straight into registers laid out as the tensor-core instruction's register operand:
    it never goes through shared memory and no barrier separates the unpacking from the
    product (the activations are the shared-memory operand); the C^T tile is stored
    transposed. The faster form from a few rows of activations to a few hundred."""
    assert K % 2 == 0 and block_K % 2 == 0, "two 4-bit weights per byte: K must be even"
    scales = scales_per_tile(block_K, group_size)
    num_groups = T.ceildiv(K, group_size)

    @T.prim_func
    def main(
            A: T.Tensor((M, K), dtype),
            B_packed: T.Tensor((N, K // 2), "uint8"),
            Scale: T.Tensor((N, num_groups), dtype),
            C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_packed_shared = T.alloc_shared((block_N, block_K // 2), "uint8")
            Scale_shared = T.alloc_shared((block_N, scales), dtype)
            if weight_in_registers:
                W = T.alloc_fragment((block_N, block_K), dtype)
                C_local = T.alloc_fragment((block_N, block_M), accum_dtype)   # C^T
            else:
                W = T.alloc_shared((block_N, block_K), dtype)
                C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B_packed[bx * block_N, k * (block_K // 2)], B_packed_shared)
                T.copy(Scale[bx * block_N, k * block_K // group_size], Scale_shared)
                for i, j in T.Parallel(block_N, block_K):
                    nibble = (B_packed_shared[i, j // 2] >> ((j % 2) * 4)) & 0xF
                    # Weights past N or K come out as -8 * scale or 0: A_shared is zero there,
                    # so they add nothing to C.
                    W[i, j] = T.cast(T.cast(nibble, "int32") - 8, dtype) * \
                        Scale_shared[i, j // group_size]
                if weight_in_registers:
                    T.gemm(W, A_shared, C_local, transpose_B=True)
                else:
                    T.gemm(A_shared, W, C_local, transpose_B=True)
            if weight_in_registers:
                for i, j in T.Parallel(block_N, block_M):
                    C[by * block_M + j, bx * block_N + i] = C_local[i, j]
            else:
                T.copy(C_local, C[by * block_M, bx * block_N])

    return main


@tilecraft.jit(out_idx=[-1])
def dequant_gemv(M, N, K, group_size=32, block_N=64, block_K=128, threads=128,
                 dtype="float16", accum_dtype="float32"):
    """The decode-time variant: one activation row per block, so no tensor-core GEMM; each
    block dequantizes a block_N x block_K weight tile, multiplies it by the activation row and
    reduces along K with T.reduce_sum, accumulating into a block_N vector."""
    assert K % 2 == 0 and block_K % 2 == 0, "two 4-bit weights per byte: K must be even"
    num_groups = T.ceildiv(K, group_size)

    @T.prim_func
    def main(
            A: T.Tensor((M, K), dtype),
            B_packed: T.Tensor((N, K // 2), "uint8"),
            Scale: T.Tensor((N, num_groups), dtype),
            C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), M, threads=threads) as (bx, by):
            A_local = T.alloc_fragment((block_K,), dtype)
            B_packed_local = T.alloc_fragment((block_N, block_K // 2), "uint8")
            prod = T.alloc_fragment((block_N, block_K), accum_dtype)
            acc = T.alloc_fragment((block_N,), accum_dtype)

            T.clear(acc)
            for k in T.serial(T.ceildiv(K, block_K)):
                T.copy(A[by, k * block_K], A_local)
                T.copy(B_packed[bx * block_N, k * (block_K // 2)], B_packed_local)
                for i, j in T.Parallel(block_N, block_K):
                    nibble = (B_packed_local[i, j // 2] >> ((j % 2) * 4)) & 0xF
                    in_range = bx * block_N + i < N and k * block_K + j < K
                    scale = T.if_then_else(
                        in_range, Scale[bx * block_N + i, (k * block_K + j) // group_size], 0)
                    w = T.cast(T.cast(nibble, "int32") - 8, dtype) * scale
                    prod[i, j] = T.cast(A_local[j], accum_dtype) * T.cast(w, accum_dtype)
                T.reduce_sum(prod, acc, dim=1, clear=False)
            T.copy(acc, C[by, bx * block_N])

    return main


@tilecraft.jit(out_idx=[-1])
def dequant_gemv_fast(M, N, K, group_size=32, block_N=4, block_K=2048, threads=256,
                      num_stages=2, through_shared=False, min_blocks_per_sm=None,
                      dtype="float16", accum_dtype="float32"):
    """The decode GEMV at memory bandwidth: a block owns block_N rows of weights and spreads
    each step's block_K weights of a row over its threads (with the defaults half the
    threads serve a pair of rows, a 16-weight slice of both a thread), so a thread keeps few
    registers and many blocks share an SM: the many loads in flight a memory-bound kernel
    needs. The reduction along K is warp shuffles and one exchange through shared memory at
    the end, with no barrier in the loop; T.Pipelined loads the next num_stages - 1 tiles
    while one is unpacked. The weights are unpacked and scaled in float16 as in the GEMM, and
    each thread keeps its products summed per element across the K loop in float16 (K /
    block_K terms each, so the element-wise work runs two weights per instruction: the
    compiler's f16x2 code and nibble-pair conversion); the block reduces them once at the end,
    in float32.
    through_shared: the tiles are copied into shared memory first (asynchronous copies, the
    next num_stages - 1 tiles in flight without holding registers), then into registers.
    min_blocks_per_sm: T.annotate_min_blocks_per_sm, registers capped so that many blocks
    fit on an SM."""
    assert K % 2 == 0 and block_K % 2 == 0, "two 4-bit weights per byte: K must be even"
    scales = scales_per_tile(block_K, group_size)
    num_groups = T.ceildiv(K, group_size)

    @T.prim_func
    def main(
            A: T.Tensor((M, K), dtype),
            B_packed: T.Tensor((N, K // 2), "uint8"),
            Scale: T.Tensor((N, num_groups), dtype),
            C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), M, threads=threads) as (bx, by):
            A_local = T.alloc_fragment((block_K,), dtype)
            B_local = T.alloc_fragment((block_N, block_K // 2), "uint8")
            S_local = T.alloc_fragment((block_N, scales), dtype)
            partial = T.alloc_fragment((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_N,), accum_dtype)
            if min_blocks_per_sm:
                T.annotate_min_blocks_per_sm(min_blocks_per_sm)

            if through_shared:
                A_shared = T.alloc_shared((block_K,), dtype)
                B_shared = T.alloc_shared((block_N, block_K // 2), "uint8")
                S_shared = T.alloc_shared((block_N, scales), dtype)

            T.clear(partial)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if through_shared:
                    T.copy(A[by, k * block_K], A_shared)
                    T.copy(B_packed[bx * block_N, k * (block_K // 2)], B_shared)
                    T.copy(Scale[bx * block_N, k * block_K // group_size], S_shared)
                    T.copy(A_shared, A_local)
                    T.copy(B_shared, B_local)
                    T.copy(S_shared, S_local)
                else:
                    T.copy(A[by, k * block_K], A_local)
                    T.copy(B_packed[bx * block_N, k * (block_K // 2)], B_local)
                    T.copy(Scale[bx * block_N, k * block_K // group_size], S_local)
                for i, j in T.Parallel(block_N, block_K):
                    nibble = (B_local[i, j // 2] >> ((j % 2) * 4)) & 0xF
                    w = T.cast(T.cast(nibble, "int32") - 8, dtype) * S_local[i, j // group_size]
                    partial[i, j] += A_local[j] * w
            T.reduce_sum(partial, acc, dim=1)
            T.copy(acc, C[by, bx * block_N])

    return main


def pack_int4(q):
    """Pack unsigned nibbles q [N, K] (values 0..15) into uint8 [N, K // 2], even k low."""
    q = q.astype(np.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)


def unpack_int4(B_packed):
    """The inverse of pack_int4: [N, K // 2] bytes -> [N, K] nibbles."""
    q = np.empty((B_packed.shape[0], B_packed.shape[1] * 2), np.uint8)
    q[:, 0::2] = B_packed & 0xF
    q[:, 1::2] = B_packed >> 4
    return q


def ref_program(A, B_packed, Scale, group_size):
    q = unpack_int4(B_packed).astype(np.float32) - 8.0
    scale = np.repeat(Scale.astype(np.float32), group_size, axis=1)[:, :q.shape[1]]
    W = (q * scale).astype(np.float16).astype(np.float32)  # the kernel's fp16 weight tile
    return A.astype(np.float32) @ W.T


def make_inputs(M, N, K, group_size, seed):
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1.0, 1.0, (M, K)).astype(np.float16)
    B_packed = pack_int4(rng.integers(0, 16, (N, K)))
    Scale = rng.uniform(0.005, 0.02, (N, -(-K // group_size))).astype(np.float16)
    return A, B_packed, Scale


def run(M=64, N=256, K=256, group_size=32, seed=0, gemv=False, **config):
    """Build the GEMM (or, with gemv=True, the GEMV; gemv="fast", dequant_gemv_fast) kernel,
    run it on random inputs, check it against ref_program and return the largest absolute
    error."""
    factory = dequant_gemv_fast if gemv == "fast" else dequant_gemv if gemv else dequant_gemm
    kernel = factory(M, N, K, group_size=group_size, **config)
    A, B_packed, Scale = make_inputs(M, N, K, group_size, seed)
    C = kernel(A, B_packed, Scale)
    ref = ref_program(A, B_packed, Scale, group_size)
    assert C.shape == (M, N) and C.dtype == np.float16
    np.testing.assert_allclose(C.astype(np.float32), ref, rtol=1e-2, atol=2e-3)
    return float(np.abs(C.astype(np.float32) - ref).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--group_size", type=int, default=32)
    args = parser.parse_args()
    err = run(args.m, args.n, args.k, args.group_size)
    print(f"dequant_gemm: ok (max abs error {err:.2e})")
    err = run(args.m, args.n, args.k, args.group_size, weight_in_registers=True)
    print(f"dequant_gemm, weight in registers: ok (max abs error {err:.2e})")
    err = run(1, args.n, args.k, args.group_size, gemv=True)
    print(f"dequant_gemv: ok (max abs error {err:.2e})")
    err = run(1, args.n, args.k, args.group_size, gemv="fast")
    print(f"dequant_gemv_fast: ok (max abs error {err:.2e})")
