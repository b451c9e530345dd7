"""The kernels whose tile IR and CUDA text are kept as golden files (tests/golden/cases).

They live in their own module because the generated CUDA names each statement's source line
(`// golden_corpus.py:42`): editing this file moves those lines and the golden files must then
be regenerated (TILECRAFT_UPDATE_GOLDEN=1, see test_golden_cuda.py).
"""
import importlib.util
from pathlib import Path

import tilecraft.language as T

ROOT = Path(__file__).resolve().parents[2]


def _example(name: str):
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"golden_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gemm_128x128x32():
    """examples/gemm.py's kernel, one 128x128 block and one 32-wide K step."""
    return _example("gemm").matmul.__wrapped__(128, 128, 32)


def elementwise_ragged():
    """A T.Parallel kernel over 32x64 tiles of a 100x77 tensor: every access needs a guard."""
    M, N, bm, bn = 100, 77, 32, 64

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                C[by * bm + i, bx * bn + j] = T.max(A[by * bm + i, bx * bn + j] * 2.0, 0.0) + \
                    B[by * bm + i, bx * bn + j]

    return main


def softmax_rows():
    """Row max, exp, row sum, normalize: reductions and fragments indexed by the row only."""
    M, N, bm = 100, 64, 16

    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            row_max = T.alloc_fragment((bm,), "float32")
            row_sum = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = T.exp(x[i, j] - row_max[i])
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * bm, 0])

    return main


def gemm_a_in_registers():
    """A copied shared -> registers, then a gemm reading A from its fragment (FullRow)."""
    M, N, K, bm, bn, bk = 128, 64, 64, 64, 64, 32

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            A_f = T.alloc_fragment((bm, bk), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=0):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.copy(A_s, A_f)
                T.gemm(A_f, B_s, C_f, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def cumsum_rows():
    """A reverse inclusive scan along each row of a fragment."""
    M, N = 32, 48

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(X, x)
            T.cumsum(x, dim=1, reverse=True)
            T.copy(x, Y)

    return main


def nibbles_in_registers():
    """A 4-bit weight GEMV with one weight row a block: fragments copied a stage ahead, the
    nibbles unpacked and multiplied in float16 two elements at a time."""
    N, K, bk = 100, 2048, 512

    @T.prim_func
    def main(A: T.Tensor((1, K), "float16"), P: T.Tensor((N, K // 2), "uint8"),
             C: T.Tensor((1, N), "float32")):
        with T.Kernel(N, threads=32) as bx:
            a = T.alloc_fragment((bk,), "float16")
            p = T.alloc_fragment((1, bk // 2), "uint8")
            partial = T.alloc_fragment((1, bk), "float16")
            acc = T.alloc_fragment((1,), "float32")
            T.clear(partial)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[0, k * bk], a)
                T.copy(P[bx, k * (bk // 2)], p)
                for i, j in T.Parallel(1, bk):
                    nibble = (p[i, j // 2] >> ((j % 2) * 4)) & 0xF
                    partial[i, j] += a[j] * T.cast(T.cast(nibble, "int32") - 8, "float16")
            T.reduce_sum(partial, acc, dim=1)
            T.copy(acc, C[0, bx])

    return main


def nibbles_into_shared():
    """4-bit weights unpacked into a float16 shared tile in runs of eight a thread, then
    doubled in place."""
    M, N = 64, 128

    @T.prim_func
    def main(P: T.Tensor((M, N // 2), "uint8"), W: T.Tensor((M, N), "float16")):
        with T.Kernel(1, threads=128) as bx:
            p = T.alloc_shared((M, N // 2), "uint8")
            w = T.alloc_shared((M, N), "float16")
            T.copy(P, p)
            for i, j in T.Parallel(M, N):
                w[i, j] = T.cast(T.cast((p[i, j // 2] >> ((j % 2) * 4)) & 0xF, "int32") - 8,
                                 "float16")
            for i, j in T.Parallel(M, N):
                w[i, j] = w[i, j] * 2
            T.copy(w, W)

    return main


CASES = {
    "gemm_128x128x32": gemm_128x128x32,
    "elementwise_ragged": elementwise_ragged,
    "softmax_rows": softmax_rows,
    "gemm_a_in_registers": gemm_a_in_registers,
    "cumsum_rows": cumsum_rows,
    "nibbles_in_registers": nibbles_in_registers,
    "nibbles_into_shared": nibbles_into_shared,
}
