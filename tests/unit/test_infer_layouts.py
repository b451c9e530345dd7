"""infer_layouts: which layout each fragment, shared tile and T.Parallel nest gets, and the
error when two ops want different layouts for one buffer."""
import inspect
import os

import numpy as np
import pytest

import tilecraft.language as T
from tilecraft import layout as lay
from tilecraft.errors import TileError
from tilecraft.ir.stmt import Allocate, For
from tilecraft.ir.tileop import AnnotateLayout, Gemm, Reduce
from tilecraft.ir.visitor import walk
from tilecraft.passes.infer_layouts import infer_layouts
from tilecraft.backends.cuda.rules import CUDA_RULES

POLICIES = {"square": T.GemmWarpPolicy.Square, "full_row": T.GemmWarpPolicy.FullRow,
            "full_col": T.GemmWarpPolicy.FullCol}


def infer(func):
    kernel = func.kernels()[0]
    return kernel, infer_layouts(kernel, CUDA_RULES)


def buffers(kernel) -> dict:
    return {n.buffer.name: n.buffer for n in walk(kernel.body) if isinstance(n, Allocate)}


def parallel_nests(kernel) -> list:
    """Outermost T.Parallel loops, in program order."""
    loops = [n for n in walk(kernel.body) if isinstance(n, For) and n.kind == "parallel"]
    inner = {id(l.body) for l in loops}
    return [l for l in loops if id(l) not in inner]


def ops_of(kernel, kind) -> list:
    return [n for n in walk(kernel.body) if isinstance(n, kind)]


def holders(frag) -> np.ndarray:
    """threads[*index, rep]: which thread holds each replica of each element."""
    return frag.table()[..., 0]


def row_threads(frag, row) -> set:
    return set(holders(frag)[row].reshape(-1).tolist())


def same_layout(a, b) -> bool:
    return a.is_equal(b) and getattr(a, "replicate", 1) == getattr(b, "replicate", 1)


def gemm_kernel(bm, bn, bk, threads=128, policy=T.GemmWarpPolicy.Square, epilogue=True):
    @T.prim_func
    def main(A: T.Tensor((bm, bk), "float16"), B: T.Tensor((bk, bn), "float16"),
             C: T.Tensor((bm, bn), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, policy=policy, clear_accum=True)
            if epilogue:
                for i, j in T.Parallel(bm, bn):
                    C_f[i, j] = C_f[i, j] * 2.0
            T.copy(C_f, C)
    return main


def policy_split(policy, m, n, warps):
    """The warp split each policy describes, by brute force over all splits into whole
    16x8 atoms: FullRow puts as many warps on M as fit, FullCol on N, Square makes the
    per-warp tile closest to square (ties: more warps on M)."""
    fits = [(wm, warps // wm) for wm in range(1, warps + 1)
            if warps % wm == 0 and m % (16 * wm) == 0 and n % (8 * (warps // wm)) == 0]
    if policy == "full_row":
        return max(fits)
    if policy == "full_col":
        return min(fits)
    return min(fits, key=lambda s: (abs(m / s[0] - n / s[1]), -s[0]))


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("bm,bn,threads", [(128, 128, 128), (64, 128, 128), (128, 64, 128),
                                           (64, 64, 256), (128, 256, 256)])
def test_gemm_accumulator_split_follows_policy(policy, bm, bn, threads):
    kernel, layouts = infer(gemm_kernel(bm, bn, 32, threads, POLICIES[policy]))
    gemm, = ops_of(kernel, Gemm)
    wm, wn = layouts.gemm_warps[id(gemm)]
    assert (wm, wn) == policy_split(policy, bm, bn, threads // 32)
    assert (wm, wn) == lay.split_warps(bm, bn, threads // 32, policy)
    c = layouts.buffer(buffers(kernel)["C_f"])
    assert same_layout(c, lay.gemm_c_fragment(bm, bn, wm, wn))
    # Read the split back from the layout: warp w = warp_m + wm * warp_n holds exactly the
    # (bm / wm) x (bn / wn) sub-tile at (warp_m, warp_n).
    warp = holders(c)[..., 0] // 32
    rows, cols = np.indices((bm, bn))
    assert np.array_equal(warp % wm, rows // (bm // wm))
    assert np.array_equal(warp // wm, cols // (bn // wn))
    assert c.num_threads == threads and c.replicate == 1


@pytest.mark.parametrize("bm,bn,threads,expected", [
    (128, 128, 128, {"square": (2, 2), "full_row": (4, 1), "full_col": (1, 4)}),
    (64, 64, 256, {"square": (4, 2), "full_row": (4, 2), "full_col": (1, 8)}),
])
def test_gemm_warp_split_examples(bm, bn, threads, expected):
    for policy, split in expected.items():
        kernel, layouts = infer(gemm_kernel(bm, bn, 32, threads, POLICIES[policy]))
        assert list(layouts.gemm_warps.values()) == [split], policy


@pytest.mark.parametrize("bk,a_mode", [(16, "32B"), (32, "64B"), (64, "128B")])
def test_gemm_shared_operands_are_swizzled(bk, a_mode):
    # A_s rows are bk halves (2 * bk bytes): the swizzle is as wide as a row allows.
    kernel, layouts = infer(gemm_kernel(64, 64, bk))
    b = buffers(kernel)
    a_s, b_s = layouts.buffer(b["A_s"]), layouts.buffer(b["B_s"])
    assert isinstance(a_s, lay.SharedLayout) and a_s.mode == a_mode
    assert isinstance(b_s, lay.SharedLayout) and b_s.mode == "128B"
    assert same_layout(a_s, lay.make_swizzled_layout(64, bk, 16))
    assert a_s.is_bijective() and b_s.is_bijective()
    gemm, = ops_of(kernel, Gemm)
    assert layouts.origin[id(b["A_s"])] is gemm and layouts.origin[id(b["B_s"])] is gemm


def test_shared_tile_outside_a_gemm_is_swizzled_and_one_dimensional_stays_row_major():
    @T.prim_func
    def main(X: T.Tensor((32, 64), "float16"), Y: T.Tensor((32, 64), "float16"),
             V: T.Tensor((48,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((32, 64), "float16")
            w = T.alloc_shared((48,), "int32")
            T.copy(X, s)
            T.copy(s, Y)
            T.copy(V, w)
            T.copy(w, V)
    kernel, layouts = infer(main)
    s = layouts.buffer(buffers(kernel)["s"])
    # 64 fp16 columns are 128 bytes: the widest XOR swizzle, a bijection onto 32 * 64 slots.
    assert s.mode == "128B" and s.is_bijective() and s.size == 32 * 64
    assert s.forward([3, 5])[0].value != 3 * 64 + 5  # row 3 moves its chunks
    w = layouts.buffer(buffers(kernel)["w"])
    assert w.forward([7])[0].value == 7


def test_parallel_loop_over_accumulator_takes_its_layout():
    kernel, layouts = infer(gemm_kernel(64, 64, 32))
    loop, = parallel_nests(kernel)
    assert layouts.loop(loop) is layouts.buffer(buffers(kernel)["C_f"])


def attention_like(partition_only):
    """A fragment indexed by the row only (scores_max[i]) in a loop over (i, j)."""
    @T.prim_func
    def main(Q: T.Tensor((64, 32), "float16"), K: T.Tensor((32, 64), "float16"),
             S: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            Q_s = T.alloc_shared((64, 32), "float16")
            K_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            scores_max = T.alloc_fragment((64,), "float32")
            T.fill(scores_max, 1.0)
            if partition_only:
                T.copy(S, acc)
            else:
                T.copy(Q, Q_s)
                T.copy(K, K_s)
                T.gemm(Q_s, K_s, acc, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                acc[i, j] = acc[i, j] - scores_max[i]
            T.copy(acc, S)
    return main


@pytest.mark.parametrize("partition_only", [False, True])
def test_row_indexed_fragment_gets_row_projection(partition_only):
    kernel, layouts = infer(attention_like(partition_only))
    b = buffers(kernel)
    acc, row = layouts.buffer(b["acc"]), layouts.buffer(b["scores_max"])
    assert row.shape == (64,)
    loop, = parallel_nests(kernel)
    assert layouts.loop(loop) is acc
    assert layouts.origin[id(b["scores_max"])] is loop
    for i in range(64):
        # Every thread that holds part of row i of acc holds scores_max[i], and no other.
        assert row_threads(row, i) == row_threads(acc, i), i
    assert row.replicate == len(row_threads(acc, 0))
    # Replicas of one element sit in distinct threads, at one local slot.
    table = row.table()
    for i in range(64):
        assert len(set(table[i, :, 0].tolist())) == row.replicate
        assert len(set(table[i, :, 1].tolist())) == 1
    if not partition_only:
        assert row.replicate == 8  # a quad of lanes in each of the two N-warps


@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_output_is_reduce_fragment_of_input(dim):
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             R: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            red = T.alloc_fragment((64,), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            T.reduce_sum(acc, red, dim=dim)
            T.copy(red, R)
    kernel, layouts = infer(main)
    b = buffers(kernel)
    red = layouts.buffer(b["red"])
    assert same_layout(red, lay.reduce_fragment(layouts.buffer(b["acc"]), dim))
    reduce_op, = ops_of(kernel, Reduce)
    assert layouts.origin[id(b["red"])] is reduce_op
    acc_threads = holders(layouts.buffer(b["acc"]))[..., 0]
    sliced = acc_threads if dim == 1 else acc_threads.T
    assert set(holders(red)[5].tolist()) == set(sliced[5].tolist())


def test_fragment_read_at_two_positions_is_fully_replicated():
    @T.prim_func
    def main(G: T.Tensor((32,), "float32"), Y: T.Tensor((32, 32), "float32"),
             Z: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            g = T.alloc_fragment((32,), "float32")
            h = T.alloc_fragment((32,), "float32")
            o = T.alloc_fragment((32, 32), "float32")
            p = T.alloc_fragment((32, 32), "float32")
            T.copy(G, g)
            T.copy(G, h)
            for r, i in T.Parallel(32, 32):
                o[r, i] = g[r] - g[i]
            for r, i in T.Parallel(32, 32):
                p[r, i] = h[r] * 2.0
            T.copy(o, Y)
            T.copy(p, Z)
    kernel, layouts = infer(main)
    b = buffers(kernel)
    g, h = layouts.buffer(b["g"]), layouts.buffer(b["h"])
    assert g.is_fully_replicated() and g.replicate == 128
    assert all(row_threads(g, i) == set(range(128)) for i in range(32))
    assert g.locals_per_thread == 32
    first, _ = parallel_nests(kernel)
    assert layouts.origin[id(b["g"])] is first
    # Read at one position only: a projection of the loop, not a full copy per thread.
    assert not h.is_fully_replicated() and h.replicate < 128


def test_unconstrained_fragments_get_a_partition():
    @T.prim_func
    def main(X: T.Tensor((32, 64), "float32"), Y: T.Tensor((32, 64), "float32"),
             R: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((32, 64), "float32")
            y = T.alloc_fragment((32, 64), "float32")
            r = T.alloc_fragment((32,), "float32")
            T.copy(X, x)
            T.reduce_max(x, r, dim=1)
            T.copy(Y, y)
            T.copy(y, Y)
            T.copy(r, R)
    kernel, layouts = infer(main)
    b = buffers(kernel)
    x, y = layouts.buffer(b["x"]), layouts.buffer(b["y"])
    for frag in (x, y):
        # Each element in exactly one thread, the tile spread evenly over all threads.
        assert frag.replicate == 1 and frag.num_threads == 128
        slots = frag.table().reshape(-1, 2)
        assert len({tuple(s) for s in slots.tolist()}) == 32 * 64
        assert np.bincount(slots[:, 0], minlength=128).tolist() == [16] * 128
    # Copied in and out only: runs of four (one 16-byte access each) dealt round robin.
    assert same_layout(y, lay.make_partition((32, 64), 128, 4))
    # Reduced along its rows: runs of eight, so a row spans 8 lanes of one warp (3 shuffle
    # steps, no shared memory) and the result is kept by 8 threads, not 64.
    assert same_layout(x, lay.make_partition((32, 64), 128, 8))
    assert layouts.buffer(b["r"]).replicate == 8
    assert layouts.origin[id(b["y"])] is None
    assert same_layout(layouts.buffer(b["r"]), lay.reduce_fragment(x, 1))


def test_annotate_layout_pins_a_fragment():
    # Column-major round robin: not what inference would choose by itself.
    pinned = lay.Fragment((64, 64), lambda i, j: ((j * 64 + i) % 128, (j * 64 + i) // 128),
                          logical_fn=lambda t, l: [(l * 128 + t) % 64, (l * 128 + t) // 64])

    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 64), "float32")
            y = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({x: pinned})
            T.copy(X, x)
            for i, j in T.Parallel(64, 64):
                y[i, j] = x[i, j] + 1.0
            T.copy(y, Y)
    kernel, layouts = infer(main)
    b = buffers(kernel)
    assert layouts.buffer(b["x"]) is pinned
    annotate, = ops_of(kernel, AnnotateLayout)
    assert layouts.origin[id(b["x"])] is annotate
    loop, = parallel_nests(kernel)
    assert layouts.loop(loop) is pinned
    assert layouts.buffer(b["y"]) is pinned
    assert pinned.check()
    assert not same_layout(pinned, lay.make_partition((64, 64), 128))
    assert not same_layout(pinned, lay.grid_partition((64, 64), 128))


def marked_line(fn, marker) -> int:
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, text in enumerate(lines) if text.rstrip().endswith(marker)]
    assert len(hits) == 1, marker
    return hits[0]


def conflicting(annotate_first):
    def build():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
                 C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                if annotate_first:
                    T.annotate_layout({C_f: lay.make_partition((64, 64), 128)})  # <- pin1
                T.copy(A, A_s)
                T.copy(B, B_s)
                T.gemm(A_s, B_s, C_f)  # <- gemm
                if not annotate_first:
                    T.annotate_layout({C_f: lay.make_partition((64, 64), 128)})  # <- pin2
                T.copy(C_f, C)
        return main
    return build


@pytest.mark.parametrize("annotate_first", [True, False])
def test_layout_conflict_names_both_ops_and_lines(annotate_first):
    build = conflicting(annotate_first)
    func = build()
    with pytest.raises(TileError) as info:
        infer(func)
    err = info.value
    gemm_line = marked_line(build, "# <- gemm")
    pin_line = marked_line(build, "# <- pin1" if annotate_first else "# <- pin2")
    assert "C_f" in err.message
    assert "T.gemm" in err.message and "T.annotate_layout" in err.message
    # The error is at the op that came second in program order, the note at the first.
    here, there = (gemm_line, pin_line) if annotate_first else (pin_line, gemm_line)
    assert err.span is not None and err.span.line == here
    assert os.path.samefile(err.span.filename, __file__)
    assert len(err.notes) == 1
    text, span = err.notes[0]
    assert "C_f" in text and span is not None and span.line == there
    rendered = str(err)
    assert f"{os.path.basename(__file__)}:{here}:" in rendered
    assert f"{os.path.basename(__file__)}:{there}:" in rendered


def test_shared_layout_conflict_with_gemm_swizzle():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({A_s: lay.make_linear_layout(64, 32, 16)})
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)
    with pytest.raises(TileError) as info:
        infer(main)
    assert "A_s" in info.value.message and "T.gemm" in info.value.message


def test_annotation_equal_to_what_gemm_needs_is_no_conflict():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({C_f: lay.gemm_c_fragment(64, 64, 2, 2)})
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)
    kernel, layouts = infer(main)
    assert same_layout(layouts.buffer(buffers(kernel)["C_f"]), lay.gemm_c_fragment(64, 64, 2, 2))
