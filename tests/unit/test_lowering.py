"""lower_tile_ops (after insert_barriers): tile-level kernels become per-thread code. No
T.Parallel loop and no tile op survives, fragments become register arrays of
locals_per_thread elements, shared tiles flat arrays; a loop that reads a fragment element
another thread holds reads it from a shared copy, and one that writes such an element is
rejected at its line."""
import inspect
import os

import numpy as np
import pytest

import tilecraft

import tilecraft.language as T
from tilecraft.errors import TileError
from tilecraft.ir.buffer import FRAGMENT, LOCAL, is_shared
from tilecraft.ir.expr import BufferLoad, Var
from tilecraft.ir.stmt import Allocate, BufferStore, For
from tilecraft.ir.tileop import TileOp
from tilecraft.ir.visitor import walk
from tilecraft.passes.infer_layouts import infer_layouts
from tilecraft.passes.insert_barriers import insert_barriers
from tilecraft.backends.cuda.lower_tile_ops import lower_tile_ops
from tilecraft.backends.cuda.rules import CUDA_RULES


def gemm_epilogue():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 128), "float16"),
             C: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(64, 64):
                C_f[i, j] = T.max(C_f[i, j], 0.0)
            T.copy(C_f, C[by * 64, bx * 64])
    return main


def softmax():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            x = T.alloc_fragment((16, 64), "float32")
            mx = T.alloc_fragment((16,), "float32")
            sm = T.alloc_fragment((16,), "float32")
            T.copy(X[bx * 16, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(16, 64):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.reduce_sum(x, sm, dim=1)
            for i, j in T.Parallel(16, 64):
                x[i, j] = x[i, j] / sm[i]
            T.copy(x, Y[bx * 16, 0])
    return main


def elementwise():
    @T.prim_func
    def main(A: T.Tensor((100, 70), "float32"), B: T.Tensor((100, 70), "float32")):
        with T.Kernel(3, 4, threads=128) as (bx, by):
            for i, j in T.Parallel(32, 32):
                B[by * 32 + i, bx * 32 + j] = A[by * 32 + i, bx * 32 + j] + 1.0
    return main


def cumsum():
    @T.prim_func
    def main(X: T.Tensor((32, 32), "float32"), Y: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((32, 32), "float32")
            s = T.alloc_shared((32, 32), "float32")
            T.copy(X, x)
            T.cumsum(x, dim=0)
            T.copy(x, s)
            T.copy(s, Y)
    return main


def gemm_a_in_registers():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            A_f = T.alloc_fragment((64, 32), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(A_s, A_f)
            T.gemm(A_f, B_s, C_f, clear_accum=True)
            T.copy(C_f, C)
    return main


def accumulator_into_operand():
    # Two warps, 32 rows each: a warp holds two 16-row mma tiles of S, and S as the next
    # gemm's A operand keeps every element in the same thread in another register order.
    @T.prim_func
    def main(Q: T.Tensor((64, 32), "float16"), K: T.Tensor((32, 32), "float16"),
             V: T.Tensor((32, 32), "float16"), O: T.Tensor((64, 32), "float32")):
        with T.Kernel(1, threads=64) as bx:
            Q_s = T.alloc_shared((64, 32), "float16")
            K_s = T.alloc_shared((32, 32), "float16")
            V_s = T.alloc_shared((32, 32), "float16")
            S_f = T.alloc_fragment((64, 32), "float32")
            P_f = T.alloc_fragment((64, 32), "float16")
            O_f = T.alloc_fragment((64, 32), "float32")
            T.copy(Q, Q_s)
            T.copy(K, K_s)
            T.copy(V, V_s)
            T.gemm(Q_s, K_s, S_f, transpose_B=True, clear_accum=True)
            T.copy(S_f, P_f)
            T.gemm(P_f, V_s, O_f, clear_accum=True)
            T.copy(O_f, O)
    return main


KERNELS = {"gemm_epilogue": gemm_epilogue, "softmax": softmax, "elementwise": elementwise,
           "cumsum": cumsum, "gemm_a_in_registers": gemm_a_in_registers,
           "accumulator_into_operand": accumulator_into_operand}


def lower(func):
    return lower_tile_ops(insert_barriers(func, CUDA_RULES))


def allocations(node) -> dict:
    return {n.buffer.name: n.buffer for n in walk(node) if isinstance(n, Allocate)}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_no_parallel_loops_or_tile_ops_remain(name):
    func = KERNELS[name]()
    before = func.kernels()[0]
    assert any(isinstance(n, TileOp) or (isinstance(n, For) and n.kind == "parallel")
               for n in walk(before.body))
    lowered = lower(func)
    kernel, = lowered.kernels()
    nodes = list(walk(kernel.body))
    assert not [n for n in nodes if isinstance(n, TileOp)]
    assert not [n for n in nodes if isinstance(n, For) and n.kind in ("parallel", "pipelined")]
    assert isinstance(kernel.thread_var, Var)
    assert "T.Parallel" not in lowered.script() and "T.Pipelined" not in lowered.script()


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_fragments_become_register_arrays(name):
    func = KERNELS[name]()
    original = func.kernels()[0]
    layouts = infer_layouts(original, CUDA_RULES)
    fragments = {b.name: b for b in allocations(original.body).values() if b.scope == FRAGMENT}
    shared = {b.name: b for b in allocations(original.body).values() if is_shared(b.scope)}
    after = allocations(lower(func).kernels()[0].body)
    assert not [b for b in after.values() if b.scope == FRAGMENT]
    for fname, frag in fragments.items():
        reg = after[fname]
        assert reg.scope == LOCAL
        assert tuple(reg.shape) == (layouts.buffer(frag).locals_per_thread,)
        assert reg.dtype == frag.dtype
    for sname, tile in shared.items():
        flat = after[sname]
        assert is_shared(flat.scope) and len(flat.shape) == 1
        assert flat.shape[0] >= tile.static_shape()[0] * tile.static_shape()[1]


@pytest.mark.parametrize("name", ["gemm_epilogue", "softmax", "gemm_a_in_registers",
                                  "accumulator_into_operand"])
def test_register_indices_do_not_depend_on_the_thread(name):
    # A register array indexed by a thread-dependent value would live in local memory.
    func = KERNELS[name]()
    fragments = {b.name for b in allocations(func.kernels()[0].body).values()
                 if b.scope == FRAGMENT}
    kernel = lower(func).kernels()[0]
    tx = kernel.thread_var
    checked = 0
    for n in walk(kernel.body):
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope == LOCAL and \
                n.buffer.name in fragments:
            used = {id(v) for i in n.indices for v in walk(i) if isinstance(v, Var)}
            assert id(tx) not in used, f"{n.buffer.name} indexed by the thread"
            checked += 1
    assert checked > 0


def test_copy_between_fragments_of_the_same_threads_stays_in_registers():
    # S_f (an accumulator) and P_f (an A operand) order a warp's two 16-row tiles differently
    # but keep each element in one thread: the copy permutes registers, with no shared scratch
    # tile and no barrier around it.
    kernel = infer_layouts(accumulator_into_operand(), CUDA_RULES)
    layouts = kernel.kernels()[0].attrs["layouts"]
    frags = {b.name: b for b in allocations(kernel.kernels()[0].body).values()
             if b.scope == FRAGMENT}
    s, p = layouts.buffer(frags["S_f"]), layouts.buffer(frags["P_f"])
    assert not s.is_equal(p)
    lowered = lower(accumulator_into_operand()).kernels()[0]
    assert not [b for b in allocations(lowered.body) if b.endswith("_stage")]


def test_lowering_leaves_the_input_function_unchanged():
    func = gemm_epilogue()
    text = func.script()
    lower(func)
    assert func.script() == text


def test_barriers_separate_shared_writes_from_reads():
    lowered = lower(gemm_epilogue()).script()
    assert "syncthreads" in lowered


def marked_line(fn, marker="# <- here") -> int:
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, text in enumerate(lines) if text.rstrip().endswith(marker)]
    assert len(hits) == 1
    return hits[0]


def transposed(write=False):
    """An accumulator read (or, with write, written) transposed in a T.Parallel loop."""
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                if write:
                    acc[j, i] = acc[i, j] * 0.5  # <- here
                else:
                    acc[i, j] = acc[i, j] * 0.5 + acc[j, i]
            T.copy(acc, C)
    return main


def test_transposed_fragment_read_goes_through_shared_memory():
    """Each thread reads elements of the accumulator other threads hold: from a shared copy
    made before the loop, so every read sees the values before the loop's writes, as on the
    interpreter."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 32)).astype(np.float16)
    B = rng.standard_normal((32, 64)).astype(np.float16)
    p = A.astype(np.float32) @ B.astype(np.float32)
    with pytest.warns(UserWarning, match="reads fragment acc through shared memory"):
        kernel = tilecraft.compile(transposed(), target="emulator")
    C = np.full((64, 64), np.nan, np.float32)
    kernel(A, B, C)
    assert not kernel.reports
    np.testing.assert_allclose(C, p * 0.5 + p.T, rtol=1e-5, atol=1e-4)


def test_transposed_fragment_write_is_rejected_at_its_line():
    func = transposed(write=True)
    with pytest.raises(TileError) as info:
        lower(func)
    err = info.value
    assert "acc" in err.message and "T.Parallel" in err.message and "written" in err.message
    line = marked_line(transposed)
    assert err.span is not None and err.span.line == line
    assert os.path.samefile(err.span.filename, __file__)
    source = inspect.getsource(transposed).splitlines()
    marked = [t for t in source if t.rstrip().endswith("# <- here")][0]
    assert err.span.col == marked.index("acc[j, i]") + 1
    assert f"{os.path.basename(__file__)}:{line}:" in str(err)


def test_same_loop_reading_the_fragment_as_laid_out_is_accepted():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                acc[i, j] = acc[i, j] * 0.5 + acc[i, j]
            T.copy(acc, C)
    kernel = lower(main).kernels()[0]
    assert not [n for n in walk(kernel.body) if isinstance(n, For) and n.kind == "parallel"]
