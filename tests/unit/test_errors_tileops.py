"""Malformed uses of the tile operators and builtins (copy, gemm, reductions, cumsum, fill,
atomics, T.Pipelined, T.use_swizzle, expression builtins): message, exact line:col, no traceback."""

import tilecraft
import tilecraft.language as T

from error_expect import expect


# --- T.copy ------------------------------------------------------------------------------

def test_copy_extent_mismatch():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((16, 16), "float16")
                T.copy(A[0:16, 0:8], A_s)  # <- here
    expect(program, "T.copy: source A tile (16, 8) and destination A_s tile (16, 16) do not "
           "have the same extents", "T.copy(")


def test_copy_tile_origin_with_too_few_dims():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((16, 16), "float16")
                T.copy(A_s, A[bx * 16])  # <- here
    expect(program, "T.copy: the destination A has 1 dimension(s) but the tile it meets has "
           "shape (16, 16)", "T.copy(")


def test_copy_tile_origin_past_the_end_of_a_shared_buffer():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((16,), "float32")
                T.copy(A[0:8], A_s[12])  # <- here
    expect(program, "T.copy: the destination covers [12, 20) of dimension 0 of A_s, whose "
           "extent is 16", "T.copy(")


def test_copy_slice_past_the_end_of_a_fragment():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                acc = T.alloc_fragment((16, 16), "float32")
                T.copy(acc[8:24, 0:16], A[0:16, 0:16])  # <- here
    expect(program, "T.copy: the source covers [8, 24) of dimension 0 of acc, whose extent is "
           "16", "T.copy(")


# --- T.gemm ------------------------------------------------------------------------------

def test_gemm_k_mismatch():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((16, 64), "float16")
                C_l = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_l)  # <- here
    expect(program, "T.gemm: the K extents of A (A_s: (64, 32)) and B (B_s: (16, 64)) differ",
           "T.gemm(")


def test_gemm_k_mismatch_with_transpose_b():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_l = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_l, transpose_B=True)  # <- here
    expect(program, "(B_s: (64, 32), transposed) differ", "T.gemm(")


def test_gemm_c_shape_mismatch():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_l = T.alloc_fragment((64, 32), "float32")
                T.gemm(A_s, B_s, C_l)  # <- here
    expect(program, "T.gemm: C (C_l) has shape (64, 32) but op(A) @ op(B) is (64, 64)",
           "T.gemm(")


def test_gemm_accumulator_in_shared_memory():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_s = T.alloc_shared((64, 64), "float32")
                T.gemm(A_s, B_s, C_s)  # <- here
    expect(program, "T.gemm: the accumulator C (C_s) must be a fragment", "T.gemm(")


def test_gemm_operand_in_global_memory():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128) as bx:
                B_s = T.alloc_shared((32, 64), "float16")
                C_l = T.alloc_fragment((64, 64), "float32")
                T.gemm(A, B_s, C_l)  # <- here
    expect(program, "T.gemm: operand A (A) is in global memory", "T.gemm(")


def test_gemm_mixed_operand_dtypes():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "bfloat16")
                C_l = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_l)  # <- here
    expect(program, "T.gemm: A is float16 but B is bfloat16", "T.gemm(")


def test_gemm_wrong_accumulator_dtype():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "int8")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "int8")
                B_s = T.alloc_shared((32, 64), "int8")
                C_l = T.alloc_fragment((64, 64), "float16")
                T.gemm(A_s, B_s, C_l)  # <- here
    expect(program, "T.gemm: int8 operands accumulate into int32, but C (C_l) is float16",
           "T.gemm(")


def test_gemm_bad_policy():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_l = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_l, policy="rows")  # <- here
    expect(program, "T.gemm: policy must be a T.GemmWarpPolicy, got 'rows'", "T.gemm(")


def test_gemm_single_element_operand():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_l = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s[0, 0], B_s, C_l)  # <- here
    expect(program, "operand A must be a whole tile or a slice, not a single element of A_s",
           "T.gemm(")


# --- reductions, cumsum, fill -------------------------------------------------------------

def test_reduce_dim_out_of_range():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                S = T.alloc_fragment((16, 32), "float32")
                m = T.alloc_fragment((16,), "float32")
                T.reduce_max(S, m, dim=2)  # <- here
    expect(program, "T.reduce_max: dim=2 is out of range for the 2-d source S", "T.reduce_max(")


def test_reduce_output_shape_mismatch():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                S = T.alloc_fragment((16, 32), "float32")
                row_sum = T.alloc_fragment((32,), "float32")
                T.reduce_sum(S, row_sum, dim=1)  # <- here
    expect(program, "T.reduce_sum: reducing S (16, 32) along dim 1 gives shape (16), but "
           "row_sum has shape (32)", "T.reduce_sum(")


def test_reduce_of_global_tensor():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128) as bx:
                m = T.alloc_fragment((16,), "float32")
                T.reduce_max(A, m, dim=1)  # <- here
    expect(program, "T.reduce_max: the source A is in global memory", "T.reduce_max(")


def test_reduce_into_a_fragment_laid_out_for_another_dimension():
    """Row sums then column sums of one accumulator into the same fragment: its layout follows
    the first reduction, which keeps the column sums in other threads (wrong results before);
    now a clear error at the second."""
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), R: T.Tensor((2, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_shared((64, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                r = T.alloc_fragment((64,), "float32")
                T.copy(A, a)
                T.gemm(a, a, c, clear_accum=True)
                T.reduce_sum(c, r, dim=1)
                T.copy(r, R[0, :])
                T.reduce_sum(c, r, dim=0)  # <- here
                T.copy(r, R[1, :])
        tilecraft.compile(main, target="sm_80")
    expect(program, "T.reduce_sum: fragment r keeps its elements in other threads than the "
           "ones that reduce c along dim 0 into them", "T.reduce_sum(c, r, dim=0)")


def test_cumsum_shape_mismatch():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_shared((64,), "float32")
                y = T.alloc_shared((32,), "float32")
                T.cumsum(x, y)  # <- here
    expect(program, "T.cumsum: destination y (32) must have the source's shape (64)",
           "T.cumsum(")


def test_cumsum_dim_out_of_range():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_shared((8, 8), "float32")
                T.cumsum(x, dim=-3)  # <- here
    expect(program, "T.cumsum: dim=-3 is out of range for the 2-d source x", "T.cumsum(")


def test_fill_with_a_buffer_as_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((64,), "float32")
                y = T.alloc_fragment((64,), "float32")
                T.fill(x, y)  # <- here
    expect(program, "T.fill: the value must be a scalar, got Buffer", "T.fill(")


def test_reduce_of_a_shared_region_of_run_time_extents_on_the_cuda_backend():
    """The interpreter reduces any shared region; the CUDA lowering moves one into a fragment of
    its shape, which a region of run-time extents does not have: refused at the reduction's
    line (it used to fail inside barrier insertion with an internal error)."""
    import tilecraft.backends.cuda.emulator as E

    def program():
        @T.prim_func
        def main(A: T.Tensor((8, 4), "float32"), B: T.Tensor((8,), "float32"), m: T.int32):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((8, 4), "float32")
                row = T.alloc_fragment((8,), "float32")
                T.copy(A, s)
                T.reduce_sum(s[0:8, 0:m], row, dim=1)  # <- here
                T.copy(row, B)
        E.lower(main)
    expect(program, "T.reduce_sum: the region of s has extents known only at run time",
           "T.reduce_sum(")


# --- atomics -----------------------------------------------------------------------------

def test_atomic_add_into_fragment():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                acc = T.alloc_fragment((64,), "float32")
                T.clear(acc)
                T.atomic_add(acc[bx], 1.0)  # <- here
    expect(program, "T.atomic_add: the destination acc is per-thread (local.fragment)",
           "T.atomic_add(")


def test_atomic_scalar_value_into_region():
    def program():
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(4, threads=128) as bx:
                T.atomic_max(C[bx * 16:(bx + 1) * 16, 0:64], 1.0)  # <- here
    expect(program, "T.atomic_max: a scalar value needs a single destination element",
           "T.atomic_max(")


def test_atomic_memory_order_other_than_relaxed():
    def program():
        @T.prim_func
        def main(C: T.Tensor((64,), "float32")):
            with T.Kernel(4, threads=128) as bx:
                T.atomic_add(C[bx], 1.0, memory_order="seq_cst")  # <- here
    expect(program, "T.atomic_add: memory_order='seq_cst' is not supported: the atomics are "
           "relaxed", "T.atomic_add(")


def test_atomic_return_prev():
    def program():
        @T.prim_func
        def main(C: T.Tensor((64,), "float32")):
            with T.Kernel(4, threads=128) as bx:
                T.atomic_max(C[bx], 1.0, return_prev=True)  # <- here
    expect(program, "T.atomic_max: return_prev=True is not supported", "T.atomic_max(")


def test_atomic_use_tma_from_a_fragment():
    def program():
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                acc = T.alloc_fragment((64, 64), "float16")
                T.clear(acc)
                T.atomic_add(C[0, 0], acc, use_tma=True)  # <- here
    expect(program, "T.atomic_add: use_tma=True adds a shared-memory tile into global memory; "
           "here the value acc is in local.fragment", "T.atomic_add(")


def test_atomic_tile_shapes_differ():
    def program():
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(4, threads=128) as bx:
                part = T.alloc_fragment((16, 32), "float32")
                T.clear(part)
                T.atomic_add(C[bx * 16:(bx + 1) * 16, 0:64], part)  # <- here
    expect(program, "T.atomic_add: destination tile (16, 64) and value tile part (16, 32) differ",
           "T.atomic_add(")


# --- T.Pipelined, T.use_swizzle -------------------------------------------------------------

def test_pipelined_negative_num_stages():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for k in T.Pipelined(4, num_stages=-1):  # <- here
                    A[k] = 0.0
    expect(program, "T.Pipelined num_stages must be a non-negative int, got -1", "T.Pipelined(")


def test_pipelined_order_not_a_permutation():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for k in T.Pipelined(4, num_stages=2, order=[0, 0]):  # <- here
                    A[k] = 0.0
                    B[k] = 1.0
    expect(program, "T.Pipelined order= must be a permutation of 0..1, got [0, 0]",
           "T.Pipelined(")


def test_pipelined_order_length_differs_from_body():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for k in T.Pipelined(4, num_stages=2, order=[2, 0, 1]):  # <- here
                    A[k] = 0.0
                    B[k] = 1.0
    expect(program, "T.Pipelined order= lists 3 entries but the loop body has 2 statements",
           "T.Pipelined(")


def test_pipelined_stage_length_differs_from_body():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for k in T.Pipelined(4, num_stages=2, stage=[0]):  # <- here
                    A[k] = 0.0
                    B[k] = 1.0
    expect(program, "T.Pipelined stage= lists 1 entries but the loop body has 2 statements",
           "T.Pipelined(")


def test_use_swizzle_bad_order():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(4, 4, threads=128) as (bx, by):
                T.use_swizzle(panel_size=4, order="diagonal")  # <- here
                A[bx] = 0.0
    expect(program, "T.use_swizzle: order must be 'row' or 'column', got 'diagonal'",
           "T.use_swizzle(")


# --- expression builtins ---------------------------------------------------------------------

def test_infinity_of_int_dtype():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(64):
                    A[i] = -T.infinity("int32")  # <- here
    expect(program, "T.infinity needs a float dtype, got int32", "T.infinity(")


def test_call_extern_without_a_name():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.evaluate(T.call_extern(A[0], dtype="float32"))  # <- here
    expect(program, "T.call_extern needs the function name as a string", "T.call_extern(")


def test_address_of_a_whole_buffer():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.evaluate(T.call_extern("flush", T.address_of(A)))  # <- here
    expect(program, "T.address_of takes a buffer element such as buf[0]", "T.address_of(")


def test_max_value_of_unknown_dtype():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A[bx] = T.max_value("float33")  # <- here
    expect(program, "T.max_value: unknown dtype 'float33'", "T.max_value(")



def test_gemm_wg_wait_other_than_zero_is_rejected():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((64, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.copy(A, A_s)
                T.gemm(A_s, A_s, C_f, wg_wait=1)  # <- here
                T.copy(C_f, C)
    expect(program, "T.gemm: wg_wait=1 is not supported", "T.gemm(")
