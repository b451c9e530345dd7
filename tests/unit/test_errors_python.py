"""Malformed programs whose mistake is in the Python around the tile code: the user's own
exceptions (an IndexError of a list, a KeyError of a dict, a helper that raises) reported as
the user's error at their expression, never as an internal error; Python's numeric functions
(max, math.exp, numpy) given device values, named with the T builtin to use; a loop given a
range; decorator options and macro keywords that do not exist; a tile where a value is
needed."""
import math

import numpy as np

import tilecraft.language as T

from error_expect import expect


# --- the user's own exceptions ------------------------------------------------------------

def test_index_error_of_a_python_list():
    def program():
        sizes = [1, 2]

        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = sizes[5]  # <- here
    err = expect(program, "IndexError: list index out of range (in `sizes[5]`)", "sizes[5]")
    assert "internal" not in err.message


def test_key_error_of_a_config_dict():
    def program():
        config = {"block_M": 64}

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((config["block_N"],), "float32")  # <- here
                T.copy(A, f)
    expect(program, "KeyError: 'block_N'", 'config["block_N"]')


def test_index_error_of_a_shape_tuple():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((A.shape[0], A.shape[2]), "float32")  # <- here
                T.clear(f)
    expect(program, "IndexError: tuple index out of range (in `A.shape[2]`)", "A.shape[2]")


def test_type_error_of_python_arithmetic():
    def program():
        tiles = [64, 64]

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = tiles - 1  # <- here
    expect(program, "TypeError: unsupported operand type(s) for -", "tiles - 1")


def test_exception_raised_by_the_users_helper():
    def program():
        def pick_block(n):
            if n % 16:
                raise ValueError(f"no block size divides {n}")
            return 16

        @T.prim_func
        def main(A: T.Tensor((40,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((pick_block(40),), "float32")  # <- here
                T.clear(f)
    err = expect(program, "ValueError: no block size divides 40", "pick_block(40)")
    assert "internal" not in err.message


def test_missing_attribute_of_a_config_object():
    def program():
        class Config:
            block_M = 64

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((Config.block_K,), "float32")  # <- here
                T.clear(f)
    expect(program, "has no attribute 'block_K'", "Config.block_K")


# --- Python's numeric functions on device values -------------------------------------------

def test_builtin_max_of_a_tile_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = max(A[i], 0.0)  # <- here
    err = expect(program, "Python's max() computes on numbers", "max(")
    assert "use T.max" in err.message


def test_builtin_min_of_two_tile_values():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = min(A[i], B[i]) * 2.0  # <- here
    expect(program, "Python's min() computes on numbers while the kernel is compiled and "
           "cannot take a device value", "min(")


def test_math_exp_of_a_tile_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = math.exp(A[i] - 1.0)  # <- here
    err = expect(program, "math.exp() computes on numbers", "math.exp(")
    assert "use T.exp" in err.message


def test_math_sqrt_of_a_tile_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = 1.0 / math.sqrt(A[i])  # <- here
    expect(program, "math.sqrt() computes on numbers while the kernel is compiled and cannot "
           "take a device value (a buffer element or an expression of one); use T.sqrt",
           "math.sqrt(")


def test_math_fabs_names_t_abs():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = math.fabs(A[i])  # <- here
    expect(program, "math.fabs() computes on numbers while the kernel is compiled and cannot "
           "take a device value (a buffer element or an expression of one); use T.abs",
           "math.fabs(")


def test_numpy_exp_of_a_tile_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = np.exp(A[i])  # <- here
    err = expect(program, "numpy.exp() computes on numbers", "np.exp(")
    assert "use T.exp" in err.message


def test_numpy_maximum_names_t_max():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = np.maximum(A[i], B[i])  # <- here
    expect(program, "numpy.maximum() computes on numbers while the kernel is compiled and "
           "cannot take a device value (a buffer element or an expression of one); use T.max",
           "np.maximum(")


def test_builtin_float_of_a_tile_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "int32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = float(A[i]) * 0.5  # <- here
    expect(program, 'Python\'s float() computes on numbers while the kernel is compiled and '
           'cannot take a device value (a buffer element or an expression of one); use '
           'T.cast(x, "float32")', "float(")


def test_builtin_round_of_a_tile_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    B[i] = round(A[i])  # <- here
    expect(program, "Python's round() computes on numbers", "round(")


def test_python_math_on_compile_time_values_still_works():
    import tilecraft
    scale = 1.0 / math.sqrt(16)

    @T.prim_func
    def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(max(16, 32)):
                B[i] = A[i] * scale + abs(-1)
    a = np.arange(32, dtype=np.float32)
    b = np.zeros(32, np.float32)
    tilecraft.compile(main, target="interp")(a, b)
    np.testing.assert_allclose(b, a * 0.25 + 1)


# --- loops given a range --------------------------------------------------------------------

def test_pipelined_given_a_range():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.Pipelined(range(4)):  # <- here
                    A[k] = 1.0
    expect(program, "T.Pipelined takes the loop's extent, as in T.Pipelined(4) or "
           "T.Pipelined(start, stop), not a range", "T.Pipelined(")


def test_pipelined_given_a_range_with_stages():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.Pipelined(range(0, 4), num_stages=2):  # <- here
                    A[k] = 1.0
    expect(program, "write `for k in T.Pipelined(n)`", "T.Pipelined(")


def test_parallel_given_a_range():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(range(32)):  # <- here
                    A[i] = 1.0
    expect(program, "T.Parallel takes the loop's extent", "T.Parallel(")


def test_serial_given_a_range():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(range(8)):  # <- here
                    A[k] = 1.0
    expect(program, "T.serial takes the loop's extent", "T.serial(")


# --- decorator options and macro keywords ---------------------------------------------------

def test_misspelled_macro_keyword_at_the_call():
    def program():
        @T.macro
        def scale_rows(buf, scale=1.0):
            for i in T.Parallel(32):
                buf[i] = buf[i] * scale

        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                scale_rows(A, scal=2.0)  # <- here
    expect(program, "macro scale_rows: got an unexpected keyword argument 'scal'; it takes "
           "(buf, scale)", "scale_rows(A")


def test_macro_called_with_a_missing_argument():
    def program():
        @T.macro
        def add_into(dst, src):
            for i in T.Parallel(32):
                dst[i] = dst[i] + src[i]

        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                add_into(A)  # <- here
    expect(program, "macro add_into: missing a required argument: 'src'", "add_into(")


def test_misspelled_macro_decorator_option():
    def program():
        @T.macro(hygenic=True)  # <- here
        def helper(buf):
            buf[0] = 1.0
    expect(program, "T.macro: unknown option hygenic=True (did you mean hygienic=?)", "T.macro(")


def test_unhygienic_macro_is_refused():
    def program():
        @T.macro(hygienic=False)  # <- here
        def helper(buf):
            buf[0] = 1.0
    expect(program, "T.macro: hygienic=False is not supported", "T.macro(")


def test_misspelled_prim_func_option():
    def program():
        @T.prim_func(privat=True)  # <- here
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = 1.0
    expect(program, "T.prim_func: unknown option privat=True (did you mean private=?)",
           "T.prim_func(")


# --- a tile where a value is needed, and (1,)-fragments indexed with constants ----------------

def test_whole_fragment_used_as_a_value():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((1,), "float32")
                T.fill(f, 2.0)
                for i in T.Parallel(32):
                    B[i] = A[i] * f  # <- here
    expect(program, "buffer f is a tile, not a value: index it (f[i]) to use one element",
           "A[i] * f")


def test_single_element_fragment_indexed_with_two_constants():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((1,), "float32")
                T.fill(f, 2.0)
                for i in T.Parallel(32):
                    B[i] = A[i] * f[0, 0]  # <- here
    expect(program, "buffer f has 1 dimension(s) but is indexed with 2", "f[0, 0]")


def test_single_element_fragment_indexed_past_its_end():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((1,), "float32")
                T.fill(f, 2.0)
                for i in T.Parallel(32):
                    B[i] = A[i] * f[1]  # <- here
    expect(program, "buffer f: index 1 is out of range for dimension 0 of extent 1", "f[1]")


def test_single_element_fragment_indexed_from_the_end():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((1,), "float32")
                T.fill(f, 2.0)
                f[-1] = 3.0  # <- here
                T.copy(f, B[0:1])
    expect(program, "buffer f: index -1 is out of range for dimension 0 of extent 1", "f[-1]")


def test_importing_leaves_the_exception_hook_alone():
    """The clean printing of uncaught TileErrors is opt-in: importing tilecraft does not
    change the process's sys.excepthook; TILECRAFT_CLEAN_ERRORS=1 installs it."""
    import os
    import subprocess
    import sys
    probe = ("import sys; hook = sys.excepthook; import tilecraft; "
             "print(sys.excepthook is hook)")
    env = {k: v for k, v in os.environ.items() if k != "TILECRAFT_CLEAN_ERRORS"}
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           env=env, check=True).stdout.strip()
    opted = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           env={**env, "TILECRAFT_CLEAN_ERRORS": "1"}, check=True).stdout.strip()
    assert (plain, opted) == ("True", "False")
