"""Mistakes made when compiling and calling kernels: @tilecraft.jit factories, out_idx, and
kernel arguments of the wrong count, dtype, shape or kind. The error must point at the user's
line (the call or the declaration at fault), never at tilecraft's own code. The last tests run
scripts in a subprocess to check what a user sees on the terminal."""
import os
import subprocess
import sys
import textwrap

import numpy as np

import tilecraft
import tilecraft.language as T

from error_expect import PACKAGE_DIR, expect


@tilecraft.jit(out_idx=[-1])
def scale(M, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M,), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < M:
                    B[bx * 32 + i] = A[bx * 32 + i] * 2
    return main


@tilecraft.jit(out_idx=[-1])
def add_symbolic():
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < n:
                    C[bx * 32 + i] = A[bx * 32 + i] + B[bx * 32 + i]
    return main


@tilecraft.jit
def shift(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "int32"), offset: T.int32):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(M):
                A[i] = A[i] + offset
    return main


# --- @tilecraft.jit factories and out_idx ----------------------------------------------------

def test_sanity_kernels_run():
    a = np.arange(40, dtype=np.float32)
    np.testing.assert_array_equal(scale(40)(a), a * 2)
    np.testing.assert_array_equal(add_symbolic()(a, a), a * 2)


def test_jit_factory_returning_nothing():
    def program():
        @tilecraft.jit
        def factory(M):
            @T.prim_func
            def main(A: T.Tensor((M,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    A[0] = 1.0
        factory(16)  # <- here
    expect(program, "@tilecraft.jit: factory must return a @T.prim_func, but returned NoneType",
           "factory(16)")


def test_jit_error_inside_the_factory_points_at_the_kernel():
    def program():
        @tilecraft.jit(out_idx=[-1])
        def factory(M):
            @T.prim_func
            def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    A_s = T.alloc_shared((M // 2,), "float32")
                    T.copy(A, A_s)  # <- here
                    T.copy(A_s, B)
            return main
        factory(64)
    expect(program, "T.copy: source A tile (64) and destination A_s tile (32)", "T.copy(")


def test_out_idx_out_of_range():
    def program():
        @tilecraft.jit(out_idx=[3])  # <- here
        def factory(M):
            @T.prim_func
            def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    B[0] = A[0]
            return main
        factory(16)
    expect(program, "out_idx 3 is out of range for main, which has 2 parameters",
           "tilecraft.jit(")


def test_out_idx_pointing_at_a_scalar():
    def program():
        @tilecraft.jit(out_idx=-1)  # <- here
        def factory(M):
            @T.prim_func
            def main(A: T.Tensor((M,), "float32"), n: T.int32):
                with T.Kernel(1, threads=32) as bx:
                    A[0] = n
            return main
        factory(16)
    expect(program, "out_idx 1 names the scalar parameter n; only tensors can be outputs",
           "tilecraft.jit(")


def test_compile_out_idx_out_of_range():
    def program():
        func = scale(8).func
        tilecraft.compile(func, out_idx=[-3])  # <- here
    expect(program, "out_idx -3 is out of range for main", "tilecraft.compile(")


def test_compile_of_a_plain_function():
    def program():
        def not_a_kernel(A):
            return A
        tilecraft.compile(not_a_kernel)  # <- here
    expect(program, "expected a @T.prim_func, got function", "tilecraft.compile(")


# --- calling a kernel with the wrong arguments -------------------------------------------------

def test_call_with_wrong_argument_count():
    kernel = scale(16)

    def program():
        a = np.zeros(16, np.float32)
        kernel(a, a)  # <- here
    expect(program, "kernel main takes 1 argument(s) (A), got 2", "kernel(a, a)")


def test_call_with_wrong_dtype():
    kernel = scale(16)

    def program():
        a = np.zeros(16, np.float64)
        kernel(a)  # <- here
    expect(program, "argument A: expected dtype float32, got float64", "kernel(a)")


def test_call_with_wrong_shape():
    kernel = scale(16)

    def program():
        a = np.zeros(12, np.float32)
        kernel(a)  # <- here
    expect(program, "argument A: expected shape (16,), got (12,)", "kernel(a)")


def test_call_with_wrong_number_of_dimensions():
    kernel = scale(16)

    def program():
        a = np.zeros((4, 4), np.float32)
        kernel(a)  # <- here
    expect(program, "argument A: expected 1 dimension(s) (16,), got shape (4, 4)", "kernel(a)")


def test_call_with_inconsistent_symbolic_size():
    kernel = add_symbolic()

    def program():
        a, b = np.zeros(40, np.float32), np.zeros(41, np.float32)
        kernel(a, b)  # <- here
    expect(program, "argument B: dimension 0 is 41, but the size n was already bound to 40",
           "kernel(a, b)")


def test_call_with_a_list_instead_of_an_array():
    kernel = scale(4)

    def program():
        kernel([1.0, 2.0, 3.0, 4.0])  # <- here
    expect(program, "argument A must be a numpy array or a torch tensor, got list", "kernel(")


def test_call_with_an_unsupported_array_dtype():
    kernel = scale(4)

    def program():
        a = np.zeros(4, np.complex64)
        kernel(a)  # <- here
    expect(program, "argument A: expected dtype float32, got an array of unsupported dtype "
           "complex64", "kernel(a)")


def test_call_with_an_array_for_a_scalar_parameter():
    kernel = shift(8)

    def program():
        a = np.zeros(8, np.int32)
        kernel(a, np.ones(1, np.int32))  # <- here
    expect(program, "argument offset must be an int (int32), got ndarray", "kernel(a, np")


def test_call_with_a_float_for_an_int_scalar():
    kernel = shift(8)

    def program():
        a = np.zeros(8, np.int32)
        kernel(a, 1.5)  # <- here
    expect(program, "argument offset must be an int (int32), got float", "kernel(a, 1.5)")


def test_output_size_not_given_by_any_input():
    def program():
        m, n = T.symbolic("m, n")

        @T.prim_func
        def main(A: T.Tensor((m,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                B[0] = A[0]
        kernel = tilecraft.compile(main, out_idx=[1])
        kernel(np.zeros(4, np.float32))  # <- here
    expect(program, "cannot allocate output B: its size n is not given by any input",
           "kernel(np")


# --- the language used from plain Python, and dtype names ---------------------------------

def test_alloc_shared_at_module_level():
    def program():
        A_s = T.alloc_shared((16, 16), "float16")  # <- here  # noqa: F841
    expect(program, "T.alloc_shared can only be used inside a @T.prim_func", "T.alloc_shared(")


def test_copy_at_module_level():
    def program():
        a, b = np.zeros(8, np.float32), np.zeros(8, np.float32)
        T.copy(a, b)  # <- here
    expect(program, "T.copy can only be used inside a @T.prim_func", "T.copy(")


def test_gemm_at_module_level():
    def program():
        T.gemm(None, None, None)  # <- here
    expect(program, "T.gemm can only be used inside a @T.prim_func", "T.gemm(")


def test_cast_to_unknown_dtype():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(64):
                    A[i] = T.cast(A[i], "float17")  # <- here
    expect(program, "T.cast: unknown dtype 'float17'", "T.cast(")


def test_alloc_fragment_unknown_dtype():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                acc = T.alloc_fragment((64,), "f32x")  # <- here
                T.clear(acc)
    expect(program, "T.alloc_fragment: unknown dtype 'f32x'", "T.alloc_fragment(")


# --- what a user sees on the terminal ---------------------------------------------------------

SCRIPT = '''\
import numpy as np
import tilecraft
import tilecraft.language as T


@tilecraft.jit(out_idx=[-1])
def matmul(M, N, K, block=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // block, M // block, threads=128) as (bx, by):
            A_s = T.alloc_shared((block, block), "float16")
            B_s = T.alloc_shared((block, 16), "float16")
            C_l = T.alloc_fragment((block, block), "float32")
            T.clear(C_l)
            for k in T.serial(K // block):
                T.copy(A[by * block, k * block], A_s)
                T.copy(B[k * block, bx * block], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block, bx * block])
    return main


kernel = matmul(64, 64, 64)
'''


def run_script(tmp_path, text, debug=False, clean=True):
    """The script run in a fresh process; clean: with TILECRAFT_CLEAN_ERRORS=1 (the opt-in
    hook that prints an uncaught TileError as a message alone)."""
    path = tmp_path / "user_script.py"
    path.write_text(text)
    env = dict(os.environ)
    env.pop("TILECRAFT_DEBUG", None)
    env.pop("TILECRAFT_CLEAN_ERRORS", None)
    if debug:
        env["TILECRAFT_DEBUG"] = "1"
    if clean:
        env["TILECRAFT_CLEAN_ERRORS"] = "1"
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=120)
    return path, proc


def test_script_error_is_printed_without_traceback(tmp_path):
    path, proc = run_script(tmp_path, SCRIPT)
    assert proc.returncode != 0
    err = proc.stderr
    assert "Traceback" not in err, err
    assert err.startswith("error: T.gemm: C (C_l) has shape (32, 32) but op(A) @ op(B) is "
                          "(32, 16)"), err
    source = "                T.gemm(A_s, B_s, C_l)"
    line_no = SCRIPT.splitlines().index(source) + 1
    lines = err.splitlines()
    assert lines[1] == f"  --> {path}:{line_no}:17", err
    assert lines[3] == f"{line_no} | {source}", err
    assert lines[4] == "   | " + " " * 16 + "^" * len("T.gemm(A_s, B_s, C_l)"), err
    assert PACKAGE_DIR not in err


def test_without_the_hook_the_traceback_holds_user_frames_only(tmp_path):
    path, proc = run_script(tmp_path, SCRIPT, clean=False)
    assert proc.returncode != 0
    err = proc.stderr
    assert "Traceback" in err and str(path) in err, err
    # of tilecraft's frames only the re-raise remains (errors.raise_clean and its caller)
    assert err.count(PACKAGE_DIR) <= 2, err
    message = err[err.index("error: T.gemm: C (C_l) has shape (32, 32)"):]
    assert f"  --> {path}:" in message, err


def test_script_error_with_debug_shows_traceback(tmp_path):
    path, proc = run_script(tmp_path, SCRIPT, debug=True)
    assert proc.returncode != 0
    err = proc.stderr
    assert "Traceback" in err, err
    assert "T.gemm: C (C_l) has shape (32, 32)" in err
    assert PACKAGE_DIR in err  # tilecraft's own frames are shown for debugging


def test_script_call_error_points_at_the_call(tmp_path):
    text = SCRIPT.replace("(block, 16)", "(block, block)") + textwrap.dedent('''\
        a = np.zeros((64, 64), np.float16)
        c = kernel(a, a.astype(np.float32))
    ''')
    path, proc = run_script(tmp_path, text)
    assert proc.returncode != 0
    err = proc.stderr
    assert "Traceback" not in err, err
    assert err.startswith("error: argument B: expected dtype float16, got float32"), err
    line_no = len(text.splitlines())
    assert f"--> {path}:{line_no}:5" in err, err
    assert "c = kernel(a, a.astype(np.float32))" in err
    assert "   |     " + "^" * len("kernel(a, a.astype(np.float32))") + "\n" in err


def test_spans_outside_the_frontend_point_at_each_calling_line():
    """IR built from plain Python (no prim_func being evaluated) takes the position of the user's
    call: each line and column of its own, however often the same position asks again."""
    from tilecraft.errors import current_span
    spans = []
    for _ in range(3):
        spans.append(current_span())
        spans.append((None, current_span()))  # a second position, on the next line
    first, second = spans[0], spans[1][1]
    assert first.filename == __file__ and second.filename == __file__
    assert second.line == first.line + 1 and first.col != second.col
    assert all(s == first for s in spans[0::2])
    assert all(s[1] == second for s in spans[1::2])
    assert "spans.append(current_span())" in first.source_line
