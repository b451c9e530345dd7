"""Malformed programs rejected by the frontend: annotations, names, statements, frames,
indexing and compile-time values. Each test checks the message, the exact line and column of
the construct at fault, and that the rendered error carries no Python traceback."""

import tilecraft.language as T

from error_expect import expect


# --- parameters -------------------------------------------------------------------------

def test_unknown_dtype_string():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "floatx")):  # <- here
            pass
    err = expect(program, "unknown dtype 'floatx'", 'T.Tensor(')
    assert "^^^" in str(err)


def test_tensor_shape_with_a_string_dimension():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8, "n"), "float32")):  # <- here
            pass
    expect(program, "T.Tensor dimension 1 must be an int", "T.Tensor(")


def test_tensor_shape_negative_dimension():
    def program():
        @T.prim_func
        def main(A: T.Tensor((4, -2), "float32")):  # <- here
            pass
    expect(program, "T.Tensor dimension 1 is negative", "T.Tensor(")


def test_symbolic_size_with_a_float_dtype():
    def program():
        n = T.symbolic("n", "float32")  # <- here  # noqa: F841
    expect(program, "T.symbolic: a size must have an integer dtype, got float32", "T.symbolic(")


def test_missing_parameter_annotation():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), count):  # <- here
            pass
    expect(program, "parameter 'count' needs an annotation", "count")


# --- names and statements ----------------------------------------------------------------

def test_undefined_name():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(8):
                    B[i] = A[i] * undefined_scale  # <- here  # noqa: F821
    expect(program, "name 'undefined_scale' is not defined", "undefined_scale")


def test_builtin_called_with_a_bad_value():
    def program(block="sixty-four"):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                size = int(block)  # <- here
                A[0] = size
    err = expect(program, "ValueError: invalid literal for int()", "int(block)")
    assert "internal error" not in err.message


def test_while_loop():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                while bx < 4:  # <- here
                    A[0] = 1.0
    expect(program, "`while` loops are not supported", "while")


def test_break():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.serial(8):
                    A[i] = 0.0
                    break  # <- here
    expect(program, "`break` is not supported", "break")


def test_continue():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.serial(8):
                    continue  # <- here
    expect(program, "`continue` is not supported", "continue")


def test_return_in_prim_func():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = 1.0
            return A  # <- here
    expect(program, "a prim_func returns nothing", "return")


def test_assert_with_compile_time_false():
    def program(block_M=48):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            assert block_M % 32 == 0, "block_M must be a multiple of 32"  # <- here
            with T.Kernel(1, threads=32) as bx:
                A[0] = 1.0
    expect(program, "block_M must be a multiple of 32", "assert")


def test_integer_division_by_zero_in_constants():
    def program(block_M=64, splits=0):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                chunk = block_M // splits  # <- here
                A[0] = chunk
    expect(program, "division by zero", "block_M // splits")


def test_integer_division_by_zero_in_device_index():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(4, threads=32) as bx:
                A[bx // 0] = 1.0  # <- here
    expect(program, "integer division by zero", "bx // 0")


# --- where device code may appear ----------------------------------------------------------

def test_copy_outside_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            T.copy(A, B)  # <- here
    expect(program, "T.copy must be called inside a `with T.Kernel(...)` block", "T.copy(")


def test_alloc_shared_outside_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            A_s = T.alloc_shared((8,), "float32")  # <- here
    expect(program, "T.alloc_shared must be called inside a `with T.Kernel(...)`",
           "T.alloc_shared(")


def test_gemm_outside_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16"),
                 C: T.Tensor((16, 16), "float32")):
            T.gemm(A, B, C)  # <- here
    expect(program, "T.gemm must be called inside a `with T.Kernel(...)` block", "T.gemm(")


def test_store_outside_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            B[0] = A[0] + 1.0  # <- here
    expect(program, "must be called inside a `with T.Kernel(...)` block", "B[0] =")


# --- T.Kernel and loops ------------------------------------------------------------------

def test_nested_kernel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                with T.Kernel(2, threads=32) as by:  # <- here
                    A[by] = 1.0
    expect(program, "T.Kernel cannot be nested", "with T.Kernel(2")


def test_kernel_with_four_grid_dims():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, 2, 3, 4, threads=32) as (bx, by, bz, bw):  # <- here
                A[0] = 1.0
    expect(program, "T.Kernel takes 1 to 3 grid extents, got 4", "T.Kernel(")


def test_kernel_with_too_many_threads():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=(64, 32)) as bx:  # <- here
                A[0] = 1.0
    expect(program, "asks for 2048 threads per block; a block has at most 1024", "T.Kernel(")


def test_kernel_with_float_threads():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=128.0) as bx:  # <- here
                A[0] = 1.0
    expect(program, "threads= must be a compile-time int", "T.Kernel(")


def test_parallel_with_wrong_number_of_loop_variables():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(8, 8):  # <- here
                    A[i, 0] = 1.0
    expect(program, "T.Parallel has 2 dimension(s) but the loop binds 1 name(s)", "T.Parallel(")


def test_parallel_with_symbolic_extent():
    def program():
        n = T.symbolic("n")

        @T.prim_func
        def main(A: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(n):  # <- here
                    A[i] = 1.0
    expect(program, "T.Parallel extents must be compile-time integers", "T.Parallel(")


def test_tile_op_inside_parallel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=64) as bx:
                A_s = T.alloc_shared((8, 8), "float32")
                for i in T.Parallel(8):
                    T.fill(A_s, 0)  # <- here
    expect(program, "T.fill is a tile operation and cannot be used inside T.Parallel",
           "T.fill(")


def test_alloc_inside_parallel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(8):
                    tmp = T.alloc_local((4,), "float32")  # <- here
                    A[i] = tmp[0]
    expect(program, "T.alloc_local cannot be used inside T.Parallel", "T.alloc_local(")


# --- device values in compile-time positions -----------------------------------------------

def test_range_of_device_value_in_python_list():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(4, threads=32) as bx:
                offsets = [j * 2 for j in range(bx)]  # <- here
                A[0] = 1.0
    expect(program, "a device value cannot be used where Python needs a compile-time integer",
           "[j * 2")


def test_shape_from_device_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(4, threads=32) as bx:
                rows = 16 if bx > 0 else 32
                A_s = T.alloc_shared((rows, 8), "float32")  # <- here
                A_s[0, 0] = 1.0
    expect(program, "T.alloc_shared: dimension 0 must be a compile-time int",
           "T.alloc_shared(")


def test_python_truth_value_of_device_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(4, threads=32) as bx:
                stages = [1, 2][bool(bx > 1)]  # <- here
                A[0] = stages
    expect(program, "a device value has no compile-time truth value", "bool(bx > 1)")


# --- indexing ----------------------------------------------------------------------------

def test_wrong_number_of_indices():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(8):
                    B[i] = A[i]  # <- here
    expect(program, "buffer A has 2 dimension(s) but is indexed with 1", "A[i]")


def test_wrong_number_of_indices_on_store():
    def program():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(8):
                    A[i, 0, 0] = 1.0  # <- here
    expect(program, "buffer A has 2 dimension(s) but is indexed with 3", "A[i, 0, 0]")


def test_constant_index_out_of_range_for_shared_buffer():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A_s = T.alloc_shared((16,), "float32")
                T.copy(A, A_s)
                A[0] = A_s[16]  # <- here
    expect(program, "buffer A_s: index 16 is out of range for dimension 0 of extent 16",
           "A_s[16]")


def test_float_index():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(8):
                    A[i * 0.5] = 1.0  # <- here
    expect(program, "buffer A: index 0 has type float", "A[i * 0.5]")


def test_slice_with_step():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A_s = T.alloc_shared((8,), "float32")
                T.copy(A[0:16:2], A_s)  # <- here
    expect(program, "buffer A: slices with a step are not supported", "A[0:16:2]")


def test_assign_to_buffer_slice():
    def program():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A_s = T.alloc_shared((16,), "float32")
                A_s[0:8] = 0.0  # <- here
    expect(program, "cannot assign to a slice of buffer A_s", "A_s[0:8]")
