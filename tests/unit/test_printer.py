"""Golden text of the IR printer (func.script() / kernel.get_kernel_source())."""
import tilecraft
import tilecraft.language as T


def gemm_kernel():
    @T.prim_func
    def gemm(A: T.Tensor((96, 64), "float16"), B: T.Tensor((80, 64), "float16"),
             C: T.Tensor((96, 80), "float32")):
        with T.Kernel(T.ceildiv(80, 32), T.ceildiv(96, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 32), "float16")
            C_f = T.alloc_fragment((64, 32), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(64, 32), num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[bx * 32:(bx + 1) * 32, k * 32:(k + 1) * 32], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C_f, C[by * 64, bx * 32])
    return gemm


def elementwise_kernel():
    @T.prim_func
    def scale(A: T.Tensor((64, 32), "float16"), B: T.Tensor((64, 32), "float16"), n: T.int32,
              alpha: T.float32):
        with T.Kernel(4, threads=(32, 4)) as bx:
            for i, j in T.Parallel(16, 32):
                if bx * 16 + i < n and j != 3:
                    B[bx * 16 + i, j] = T.exp(A[bx * 16 + i, j] * alpha)
                else:
                    B[bx * 16 + i, j] = T.float16(0)
            for i in T.Parallel(16):
                A[i, 0] = T.if_then_else(i % 2 == 0, -T.infinity("float16"), T.max(A[i, 1], 1.5))
    return scale


def reduction_kernel():
    @T.prim_func
    def softmax_sum(A: T.Tensor((128, 64), "float32"), S: T.Tensor((128,), "float32")):
        with T.Kernel(2) as bx:
            a = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            s = T.alloc_shared((64,), "float32")
            T.copy(A[bx * 64, 0], a)
            T.fill(m, -T.infinity("float32"))
            T.reduce_max(a, m, dim=1, clear=False)
            for i, j in T.Parallel(64, 64):
                a[i, j] = T.exp2(a[i, j] - m[i])
            T.reduce_sum(a, s, dim=1)
            T.cumsum(s, reverse=True)
            T.copy(s, S[bx * 64:(bx + 1) * 64])
    return softmax_sum


def symbolic_kernel():
    N = T.symbolic("N")

    @T.prim_func
    def count(A: T.Tensor((N, 4), "float32"), B: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            cnt = T.alloc_var("int32")
            scale = T.alloc_var(T.float32, init=0.5)
            for i in T.serial(32):
                cnt = 0
                for j in T.unroll(4):
                    if A[bx * 32 + i, j] * scale > 0:
                        cnt += 1
                for j in T.serial(2, 8, step=3):
                    cnt = cnt + j // 2
                if bx * 32 + i < N:
                    B[bx * 32 + i] = cnt
    return count


GEMM_TEXT = """\
@T.prim_func
def gemm(A: T.Tensor((96, 64), "float16"), B: T.Tensor((80, 64), "float16"), C: T.Tensor((96, 80), "float32")):
    with T.Kernel(3, 2, threads=128) as (bx, by):
        A_s = T.alloc_shared((64, 32), "float16")
        B_s = T.alloc_shared((32, 32), "float16")
        C_f = T.alloc_fragment((64, 32), "float32")
        T.clear(C_f)
        for k in T.Pipelined(2, num_stages=2):
            T.copy(A[by * 64:by * 64 + 64, k * 32:k * 32 + 32], A_s)
            T.copy(B[bx * 32:bx * 32 + 32, k * 32:k * 32 + 32], B_s)
            T.gemm(A_s, B_s, C_f, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
        T.copy(C_f, C[by * 64:by * 64 + 64, bx * 32:bx * 32 + 32])
"""


ELEMENTWISE_TEXT = """\
@T.prim_func
def scale(A: T.Tensor((64, 32), "float16"), B: T.Tensor((64, 32), "float16"), n: T.int32, alpha: T.float32):
    with T.Kernel(4, threads=(32, 4)) as bx:
        for i, j in T.Parallel(16, 32):
            if bx * 16 + i < n and j != 3:
                B[bx * 16 + i, j] = T.Cast("float16", T.exp(T.Cast("float32", A[bx * 16 + i, j]) * alpha))
            else:
                B[bx * 16 + i, j] = T.float16(0.0)
        for i_1 in T.Parallel(16):
            A[i_1, 0] = T.if_then_else(i_1 % 2 == 0, -T.infinity("float16"), T.max(A[i_1, 1], T.float16(1.5)))
"""


REDUCTION_TEXT = """\
@T.prim_func
def softmax_sum(A: T.Tensor((128, 64), "float32"), S: T.Tensor((128,), "float32")):
    with T.Kernel(2, threads=128) as bx:
        a = T.alloc_fragment((64, 64), "float32")
        m = T.alloc_fragment((64,), "float32")
        s = T.alloc_shared((64,), "float32")
        T.copy(A[bx * 64:bx * 64 + 64, :], a)
        T.fill(m, -T.infinity("float32"))
        T.reduce_max(a, m, dim=1, clear=False)
        for i, j in T.Parallel(64, 64):
            a[i, j] = T.exp2(a[i, j] - m[i])
        T.reduce_sum(a, s, dim=1)
        T.cumsum(s, s, dim=0, reverse=True)
        T.copy(s, S[bx * 64:bx * 64 + 64])
"""


SYMBOLIC_TEXT = """\
N = T.symbolic("N")
@T.prim_func
def count(A: T.Tensor((N, 4), "float32"), B: T.Tensor((N,), "int32")):
    with T.Kernel((N + 31) // 32, threads=32) as bx:
        cnt = T.alloc_var("int32")
        scale = T.alloc_var("float32")
        scale = 0.5
        for i in T.serial(32):
            cnt = 0
            for j in T.unroll(4):
                if A[bx * 32 + i, j] * scale > 0.0:
                    cnt = cnt + 1
            for j_1 in T.serial(2):
                cnt = cnt + (2 + j_1 * 3) // 2
            if bx * 32 + i < N:
                B[bx * 32 + i] = cnt
"""


def test_gemm_text():
    assert gemm_kernel().script() == GEMM_TEXT


def test_elementwise_with_device_if_text():
    assert elementwise_kernel().script() == ELEMENTWISE_TEXT


def test_reduction_text():
    assert reduction_kernel().script() == REDUCTION_TEXT


def test_symbolic_and_alloc_var_text():
    assert symbolic_kernel().script() == SYMBOLIC_TEXT


def test_kernel_source_is_the_printed_program():
    kernel = tilecraft.compile(gemm_kernel(), out_idx=[2])
    assert kernel.get_kernel_source() == GEMM_TEXT
    assert kernel.kernel_source == GEMM_TEXT

    @tilecraft.jit(out_idx=-1)
    def factory():
        return reduction_kernel()
    assert factory.get_kernel_source() == REDUCTION_TEXT


def test_same_name_variables_get_distinct_names():
    @T.prim_func
    def shadow(A: T.Tensor((8,), "float32"), i: T.int32):
        with T.Kernel(1) as bx:
            for i in T.Parallel(8):
                A[i] = A[i] + 1.0
            for i in T.serial(8):
                A[i] = A[i] * 2.0
        with T.Kernel(2) as bx:
            A[bx] = 0.0
    assert shadow.script() == """\
@T.prim_func
def shadow(A: T.Tensor((8,), "float32"), i: T.int32):
    with T.Kernel(1, threads=128) as bx:
        for i_1 in T.Parallel(8):
            A[i_1] = A[i_1] + 1.0
        for i_2 in T.serial(8):
            A[i_2] = A[i_2] * 2.0
    with T.Kernel(2, threads=128) as bx_1:
        A[bx_1] = 0.0
"""


def test_precedence_is_explicit():
    @T.prim_func
    def prec(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "bool")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(8):
                A[i] = (A[i] - (i - 1)) * (i + 2) // 3 % (i + 1) - -A[i]
                B[i] = (A[i] < i) == (i > 2) or not (A[i] >= 0 and i != 4)
    body = prec.script().splitlines()[4:]
    assert body == [
        "            A[i] = (A[i] - (i - 1)) * (i + 2) // 3 % (i + 1) - -A[i]",
        "            B[i] = (A[i] < i) == (i > 2) or not (A[i] >= 0 and i != 4)",
    ]


def test_printing_is_deterministic():
    texts = {symbolic_kernel().script() for _ in range(3)}
    assert texts == {SYMBOLIC_TEXT}
    func = elementwise_kernel()
    assert func.script() == func.script() == repr(func)
    # printing one function does not rename anything in another
    assert gemm_kernel().script() == GEMM_TEXT
    assert reduction_kernel().script() == REDUCTION_TEXT
