"""The GPU tests' kernels, as factories returning prim_funcs. The GPU tier runs them against
torch; the toolkit tier compiles every one of them for sm_80 and sm_90a."""
import tilecraft.language as T
from tilecraft.ir import dtypes


def gemm(M, N, K, bm, bn, bk, dtype, accum, trans_A=False, trans_B=False, threads=128,
         a_in_registers=False, policy=T.GemmWarpPolicy.Square, num_stages=0, eviction=None):
    """C = A @ B; `eviction`: the L2 eviction policy of A's loads and C's store."""
    a_shape = (K, M) if trans_A else (M, K)
    b_shape = (N, K) if trans_B else (K, N)
    as_shape = (bk, bm) if trans_A else (bm, bk)
    bs_shape = (bn, bk) if trans_B else (bk, bn)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            A_f = T.alloc_fragment((bm, bk), dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s, eviction_policy=eviction)
                if trans_B:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                if a_in_registers:
                    T.copy(A_s, A_f)
                    T.gemm(A_f, B_s, C_f, transpose_B=trans_B, policy=policy)
                else:
                    T.gemm(A_s, B_s, C_f, transpose_A=trans_A, transpose_B=trans_B, policy=policy)
            T.copy(C_f, C[by * bm, bx * bn], eviction_policy=eviction)

    return main


def k_major_gemm(M, N, K, bm=128, bn=128, bk=64, threads=256, num_stages=2, a_dtype="float8_e4m3",
             b_dtype="float8_e4m3", out_dtype="float32"):
    """C = A @ B^T for A (M x K) and B (N x K): the layout fp8 and tf32 wgmma read (K-major);
    fp8 (e4m3 / e5m2 each) or tfloat32 operands."""
    @T.prim_func
    def main(A: T.Tensor((M, K), a_dtype), B: T.Tensor((N, K), b_dtype),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), a_dtype)
            B_s = T.alloc_shared((bn, bk), b_dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def elementwise(M, N, bm=32, bn=64):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                C[by * bm + i, bx * bn + j] = T.max(A[by * bm + i, bx * bn + j] * 2.0, 0.0) + \
                    B[by * bm + i, bx * bn + j]

    return main


def float_tests(N, dtype="float32"):
    """Flags[0..2] = isnan / isinf / isfinite of X, Y = clamp(X, -1, 1) with NaN kept."""
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Flags: T.Tensor((3, N), "int32"),
             Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                x = X[bx * 128 + i]
                Flags[0, bx * 128 + i] = T.cast(T.isnan(x), "int32")
                Flags[1, bx * 128 + i] = T.cast(T.isinf(x), "int32")
                Flags[2, bx * 128 + i] = T.cast(T.isfinite(x), "int32")
                Y[bx * 128 + i] = T.if_then_else(T.isnan(x), x, T.clamp(x, -1.0, 1.0))

    return main


def workspace_rows(n=None):
    """B = A with each row's mean taken out, Tot = sum of A: the row sums pass from the first
    launch to the second through a workspace of n rows (T.alloc_global; n symbolic unless
    given)."""
    n = T.symbolic("n") if n is None else n

    @T.prim_func
    def main(A: T.Tensor((n, 4), "float32"), B: T.Tensor((n, 4), "float32"),
             Tot: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(n, 8), threads=32) as bx:
            x = T.alloc_fragment((8, 4), "float32")
            row = T.alloc_fragment((8,), "float32")
            W = T.alloc_global((n,), "float32")
            T.copy(A[bx * 8, 0], x)
            T.reduce_sum(x, row, dim=1)
            T.copy(row, W[bx * 8:(bx + 1) * 8])   # the tail beyond n is dropped
            for i, j in T.Parallel(8, 4):
                x[i, j] = x[i, j] - row[i] / 4.0
            T.copy(x, B[bx * 8, 0])
        with T.Kernel(1, threads=32) as bx:
            acc = T.alloc_var("float32", init=0.0)
            for i in T.serial(n):
                acc += W[i]
            Tot[0] = acc

    return main


def reduce(kind, dim, M, N):
    out_shape = (N,) if dim == 0 else (M,)

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor(out_shape, "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment(out_shape, "float32")
            T.copy(X, x)
            getattr(T, f"reduce_{kind}")(x, y, dim=dim)
            T.copy(y, Y)

    return main


def reduce_max_accumulate(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            T.fill(y, 0.25)
            T.reduce_max(x, y, dim=1, clear=False)
            T.copy(y, Y)

    return main


def cumsum(M, N, reverse):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(X, x)
            T.cumsum(x, dim=1, reverse=reverse)
            T.copy(x, Y)

    return main


def atomics(M, N, blocks):
    @T.prim_func
    def main(X: T.Tensor((blocks, M, N), "float32"), S: T.Tensor((M, N), "float32"),
             H: T.Tensor((16,), "int32"), Mx: T.Tensor((N,), "float32")):
        with T.Kernel(blocks, threads=128) as b:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(X[b, :, :], x)
            T.atomic_add(S[0, 0], x)
            for i, j in T.Parallel(M, N):
                T.atomic_add(H[(i * N + j) % 16], 1)
                T.atomic_max(Mx[j], x[i, j])

    return main


def softmax(M, N, bm=16):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            mx = T.alloc_fragment((bm,), "float32")
            sm = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.reduce_sum(x, sm, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] / sm[i]
            T.copy(x, Y[bx * bm, 0])

    return main


def layernorm(M, N, bm=8):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"),
             Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=256) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            sq = T.alloc_fragment((bm, N), "float32")
            mean = T.alloc_fragment((bm,), "float32")
            var = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] - mean[i] / N
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, var, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * T.rsqrt(var[i] / N + 1e-5) * W[j]
            T.copy(x, Y[bx * bm, 0])

    return main


def scale_rows(M, N, block_M=64):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 2
    return main


def staged_copy(M, N, block_M=64):
    """global -> shared -> fragment -> global, and a tile added into the input by atomics."""
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            s = T.alloc_shared((block_M, N), "float32")
            f = T.alloc_fragment((block_M, N), "float32")
            T.copy(X[bx * block_M, 0], s)
            T.copy(s, f)
            T.copy(f, Y[bx * block_M, 0])
            T.atomic_add(X[bx * block_M, 0], s)
    return main


def corpus():
    """(name, prim_func) for every kind of kernel the GPU tests run, at one size each."""
    out = []
    for dtype in ("float16", "bfloat16"):
        for ta, tb in ((False, False), (False, True), (True, False)):
            out.append((f"gemm_{dtype}_{int(ta)}{int(tb)}",
                        gemm(200, 136, 72, 64, 64, 32, dtype, "float32", ta, tb)))
    out.append(("gemm_rs", gemm(192, 128, 96, 64, 64, 32, "float16", "float32",
                                a_in_registers=True, policy=T.GemmWarpPolicy.FullRow)))
    out.append(("gemm_f32", gemm(100, 70, 48, 32, 32, 16, "float32", "float32")))
    out.append(("gemm_big", gemm(384, 512, 256, 128, 256, 64, "float16", "float32", threads=256)))
    out.append(("gemm_pipelined", gemm(200, 136, 72, 64, 64, 32, "float16", "float32",
                                       num_stages=3)))
    out.append(("gemm_l2_hints", gemm(200, 136, 72, 64, 64, 32, "float16", "float32",
                                      num_stages=3, eviction="evict_first")))
    out.append(("gemm_fp8", k_major_gemm(130, 200, 96, 64, 64, 64, threads=128,
                                     a_dtype="float8_e5m2")))
    out.append(("elementwise", elementwise(100, 77)))
    out.append(("float_tests", float_tests(200)))
    out.append(("workspace_rows", workspace_rows(300)))
    for kind in ("sum", "max", "min", "abssum", "absmax"):
        for dim in (0, 1):
            out.append((f"reduce_{kind}_{dim}", reduce(kind, dim, 32, 48)))
    out.append(("reduce_accumulate", reduce_max_accumulate(64, 32)))
    out.append(("cumsum", cumsum(32, 48, True)))
    out.append(("atomics", atomics(64, 32, 8)))
    out.append(("softmax", softmax(100, 96)))
    out.append(("layernorm", layernorm(128, 256)))
    out.append(("paired_elementwise", paired_elementwise(50, 100, "float16")))
    for src in ("int8", "uint16"):
        out.append((f"nibble_fields_{src}", nibble_fields(40, 120, src)))
    out.append(("shared_reductions", shared_reductions(64, 48, 32)))
    out.append(("gemm_b_in_registers", gemm_with_computed_b(50, 37, 29, False)))
    return out


def paired_elementwise(M, N, dtype, bm=32, bn=64, threads=128):
    """16-bit float element-wise work the code generator computes two elements at a time
    (codegen/pairs.py): Y = X * S[row] + Z - X * X, and W = (nibble - 8) * S[row] with the
    nibbles unpacked from bytes (P[i, j // 2], even j low) as in a 4-bit weight dequantize."""
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Z: T.Tensor((M, N), dtype), S: T.Tensor((M,), dtype),
             P: T.Tensor((M, N // 2), "uint8"), Y: T.Tensor((M, N), dtype),
             W: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            x = T.alloc_fragment((bm, bn), dtype)
            z = T.alloc_fragment((bm, bn), dtype)
            s = T.alloc_fragment((bm,), dtype)
            p = T.alloc_fragment((bm, bn // 2), "uint8")
            y = T.alloc_fragment((bm, bn), dtype)
            w = T.alloc_fragment((bm, bn), dtype)
            T.copy(X[by * bm, bx * bn], x)
            T.copy(Z[by * bm, bx * bn], z)
            T.copy(S[by * bm], s)
            T.copy(P[by * bm, bx * (bn // 2)], p)
            for i, j in T.Parallel(bm, bn):
                y[i, j] = x[i, j] * s[i] + z[i, j] - x[i, j] * x[i, j]
                nibble = (p[i, j // 2] >> ((j % 2) * 4)) & 0xF
                w[i, j] = T.cast(T.cast(nibble, "int32") - 8, dtype) * s[i]
            T.copy(y, Y[by * bm, bx * bn])
            T.copy(w, W[by * bm, bx * bn])

    return main


def nibble_fields(M, N, src_dtype, dtype="float16", bm=16, bn=64, threads=64):
    """4-bit fields of packed integers to 16-bit floats: W[i, j] = nibble j of row i minus 8,
    nibble j being bits 4 (j % per) .. of P[i, j // per] with per = the nibbles a P element
    holds (the code generator converts two at a time, codegen/pairs.py)."""
    per = dtypes.dtype(src_dtype).bits // 4

    @T.prim_func
    def main(P: T.Tensor((M, N // per), src_dtype), W: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            p = T.alloc_fragment((bm, bn // per), src_dtype)
            w = T.alloc_fragment((bm, bn), dtype)
            T.copy(P[by * bm, bx * (bn // per)], p)
            for i, j in T.Parallel(bm, bn):
                nibble = (p[i, j // per] >> ((j % per) * 4)) & 0xF
                w[i, j] = T.cast(T.cast(nibble, "int32") - 8, dtype)
            T.copy(w, W[by * bm, bx * bn])

    return main


def shared_reductions(M, N, half):
    """R, C, H = row sums of A, column maxima of A (at least -1), row sums of A's first
    `half` rows: reductions of a shared tile, one into a shared vector (stage_tile_operands)."""
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32"),
             C: T.Tensor((N,), "float32"), H: T.Tensor((half,), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            c_s = T.alloc_shared((N,), "float32")
            h = T.alloc_fragment((half,), "float32")
            T.copy(A, A_s)
            T.reduce_sum(A_s, r, dim=1)                     # shared -> fragment
            T.fill(c_s, -1.0)
            T.reduce_max(A_s, c_s, dim=0, clear=False)      # shared -> shared, accumulated
            T.reduce_sum(A_s[0:half, :], h, dim=1)          # a sub-tile of the shared buffer
            T.copy(r, R)
            T.copy(c_s, C)
            T.copy(h, H)
    return main


def gemm_with_computed_b(M, N, K, transpose_B):
    """C = A @ (2 B - 1) with the 64x64x32 tile's B computed in a fragment (staged through a
    shared tile for the tensor cores, stage_tile_operands); M, N, K up to the tile."""
    b_shape = (N, K) if transpose_B else (K, N)

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor(b_shape, "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 32), "float16")
            b = T.alloc_fragment((64, 32) if transpose_B else (32, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.copy(A[0, 0], a)
            T.copy(B[0, 0], b)
            for i, j in T.Parallel(*b.shape):
                b[i, j] = b[i, j] * 2 - 1                  # computed in registers
            T.gemm(a, b, c, transpose_B=transpose_B, clear_accum=True)
            T.copy(c, C[0, 0])
    return main
