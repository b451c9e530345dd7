"""Warp operations and barriers of per-thread code: the shuffles (with widths), warp
reductions, lane / warp indices, T.reinterpret, T.sync_threads (block-wide and named) and
T.sync_warp, on the interpreter and the sm_80 emulator against numpy, compiled for sm_90a; the
emulator's race checker still finds a missing barrier; TileLang names tilecraft lacks are
errors that name them."""
import inspect

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda.runtime import has_nvcc
from tilecraft.errors import TileError
from tilecraft.language.unsupported import NotSupportedYet, tilelang_names
from tilecraft.pass_config import PassConfigKey

from error_expect import expect

# The interpreter, then the emulator running the sm_80 and the sm_90a pipelines.
TARGETS = ("interp", "emulator", "emulator:sm_90a")

NO_AUTO_SYNC = {PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC: True}


def rng(seed=0):
    return np.random.default_rng(seed)


def line_of(fn, text) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def run(func, args, target, out_idx=-1, configs=None):
    kernel = tilecraft.compile(func, out_idx=out_idx, target=target, pass_configs=configs)
    return kernel(*args), getattr(kernel, "reports", [])


def on_all(func, *args, out_idx=-1):
    out = []
    for target in TARGETS:
        got, reports = run(func, args, target, out_idx)
        assert reports == [], reports
        out.append(got)
    return out


def reference_shuffle(kind, v, arg, width):
    """What CUDA's __shfl_*_sync(0xffffffff, v, arg, width) gives each lane, lane by lane."""
    out = v.copy()
    for t in range(len(v)):
        lane, warp = t % 32, t - t % 32
        first = lane // width * width
        a = int(arg[t])
        if kind == "xor":
            src = lane ^ a
            src = src if src < first + width else lane
        elif kind == "down":
            src = lane + a if lane + a < first + width else lane
        elif kind == "up":
            src = lane - a if lane - a >= first else lane
        else:
            src = first + a % width
        out[t] = v[warp + src]
    return out


def shuffles(dtype, width, arg):
    @T.prim_func
    def main(A: T.Tensor((128,), dtype), Out: T.Tensor((4, 128), dtype)):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_var(dtype)
            v = A[tx]
            Out[0, tx] = T.shfl_xor(v, arg, width=width)
            Out[1, tx] = T.shfl_down(v, arg, width)
            Out[2, tx] = T.shfl_up(v, arg, width)
            Out[3, tx] = T.shfl_sync(v, tx % 7 + arg, width)
    return main


@pytest.mark.parametrize("dtype,width,arg", [("float32", 32, 1), ("float32", 32, 16),
                                             ("int32", 8, 3), ("float16", 16, 5),
                                             ("int32", 4, 6)])
def test_shuffles_match_cuda(dtype, width, arg):
    a = (rng(1).standard_normal(128) * 100).astype(dtype)
    interp, *emulated = on_all(shuffles(dtype, width, arg), a)
    own = np.full(128, arg)
    lanes = np.arange(128) % 7 + arg
    for row, kind, args in ((0, "xor", own), (1, "down", own), (2, "up", own),
                            (3, "idx", lanes)):
        np.testing.assert_array_equal(interp[row], reference_shuffle(kind, a, args, width))
    for emu in emulated:
        np.testing.assert_array_equal(emu, interp)


def warp_reductions(dtype):
    @T.prim_func
    def main(A: T.Tensor((96,), dtype), Out: T.Tensor((3, 96), dtype)):
        with T.Kernel(1, threads=96) as bx:
            tx = T.get_thread_binding()
            Out[0, tx] = T.warp_reduce_sum(A[tx])
            Out[1, tx] = T.warp_reduce_max(A[tx])
            Out[2, tx] = T.warp_reduce_min(A[tx])
    return main


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_warp_reductions(dtype):
    a = (rng(2).standard_normal(96) * 50).astype(dtype)
    interp, *emulated = on_all(warp_reductions(dtype), a)
    w = a.reshape(3, 32).astype(np.float64)
    np.testing.assert_allclose(interp[0], np.repeat(w.sum(1), 32), rtol=1e-6)
    np.testing.assert_array_equal(interp[1], np.repeat(a.reshape(3, 32).max(1), 32))
    np.testing.assert_array_equal(interp[2], np.repeat(a.reshape(3, 32).min(1), 32))
    for emu in emulated:
        np.testing.assert_array_equal(emu, interp)


def test_lane_warp_and_warpgroup_indices():
    @T.prim_func
    def main(Out: T.Tensor((256, 5), "int32")):
        with T.Kernel(1, threads=(64, 4)) as bx:
            tx, ty = T.get_thread_binding(0), T.get_thread_binding(1)
            t = ty * 64 + tx
            Out[t, 0] = T.get_lane_idx()
            Out[t, 1] = T.get_warp_idx()
            Out[t, 2] = T.get_warp_idx_sync(16)
            Out[t, 3] = T.get_warp_group_idx()
            Out[t, 4] = T.get_warp_group_idx(32, 2)
    t = np.arange(256)
    want = np.stack([t % 32, t // 32, t // 16, t // 128, t // 64], 1)
    for got in on_all(main):
        np.testing.assert_array_equal(got, want)


def test_reinterpret_keeps_the_bits():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32"), H: T.Tensor((32,), "float16"),
             U: T.Tensor((32,), "uint32"), I: T.Tensor((32,), "int16"),
             F: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            U[tx] = T.reinterpret(A[tx], "uint32")
            I[tx] = T.reinterpret("int16", H[tx])     # TVM's argument order
            F[tx] = T.reinterpret(T.reinterpret(A[tx], "int32") + 1, T.float32)
    a = rng(3).standard_normal(32).astype(np.float32)
    h = rng(4).standard_normal(32).astype(np.float16)
    for u, i, f in on_all(main, a, h, out_idx=[2, 3, 4]):
        np.testing.assert_array_equal(u, a.view(np.uint32))
        np.testing.assert_array_equal(i, h.view(np.int16))
        np.testing.assert_array_equal(f, (a.view(np.int32) + 1).view(np.float32))


def block_sum(M, sync=True):
    """A block-wide tree reduction through shared memory, ordered by T.sync_threads."""
    @T.prim_func
    def main(A: T.Tensor((M, 256), "float32"), S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=256) as bx:
            tx = T.get_thread_binding()
            smem = T.alloc_shared((256,), "float32")
            smem[tx] = A[bx, tx]
            if sync:
                T.sync_threads()
            for s in [128, 64, 32, 16, 8, 4, 2, 1]:
                if tx < s:
                    smem[tx] = smem[tx] + smem[tx + s]
                if sync:
                    T.sync_threads()
            if tx == 0:
                S[bx] = smem[0]
    return main


def test_block_reduction_through_shared_memory():
    a = rng(5).standard_normal((3, 256)).astype(np.float32)
    interp, *emulated = on_all(block_sum(3), a)
    np.testing.assert_allclose(interp, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    for emu in emulated:
        np.testing.assert_array_equal(emu, interp)


@pytest.mark.parametrize("target", ["emulator", "emulator:sm_90a"])
def test_missing_sync_threads_is_a_race(target):
    """With the compiler's own barriers off, the tree reduction without T.sync_threads races
    (the checker names the write and the read); with them on, the compiler puts them in."""
    a = rng(6).standard_normal((2, 256)).astype(np.float32)
    _, reports = run(block_sum(2), [a], target, configs=NO_AUTO_SYNC)
    assert reports == []
    with pytest.raises(TileError) as info:
        run(block_sum(2, sync=False), [a], target, configs=NO_AUTO_SYNC)
    races = [r for r in info.value.reports if r.kind == "race"]
    assert races and races[0].buffer == "smem", info.value.reports
    assert races[0].lines == (line_of(block_sum, "smem[tx] = A[bx, tx]"),
                              line_of(block_sum, "smem[tx] = smem[tx] + smem[tx + s]"))
    got, reports = run(block_sum(2, sync=False), [a], target)
    assert reports == []
    np.testing.assert_allclose(got, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def warp_exchange(sync_warp, across_warps=False):
    """Lanes trade values through shared memory, ordered by T.sync_warp (within one warp)."""
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((64,), "float32")
            if across_warps:
                s[tx] = A[tx]
                T.sync_warp()
                B[tx] = s[63 - tx]
            else:
                if tx < 32:
                    s[tx] = A[tx]
                    if sync_warp:
                        T.sync_warp()
                    B[tx] = s[31 - tx]
    return main


def test_sync_warp_orders_its_warp_only():
    a = rng(7).standard_normal(64).astype(np.float32)
    interp, *emulated = on_all(warp_exchange(True), a)
    np.testing.assert_array_equal(interp[:32], a[:32][::-1])
    for emu in emulated:
        np.testing.assert_array_equal(emu[:32], interp[:32])
    with pytest.raises(TileError) as info:
        run(warp_exchange(False), [a], "emulator")
    assert any(r.kind == "race" and r.buffer == "s" for r in info.value.reports)
    with pytest.raises(TileError) as info:   # a warp barrier does not order other warps
        run(warp_exchange(True, across_warps=True), [a], "emulator", configs=NO_AUTO_SYNC)
    assert any(r.kind == "race" and r.buffer == "s" for r in info.value.reports)


def named_barrier(sync=True, outsiders=False):
    """Half of the block trades values, ordered by a barrier of its 64 threads; with
    outsiders, the other half reads them too, which that barrier does not order."""
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((64,), "float32")
            if tx < 64:
                s[tx] = A[tx]
                if sync:
                    T.sync_threads(barrier_id=1, arrive_count=64)
                B[tx] = s[63 - tx]
            elif outsiders:
                B[tx] = s[tx - 64]
    return main


def test_named_barrier_of_part_of_the_block():
    a = rng(8).standard_normal(64).astype(np.float32)
    interp, *emulated = on_all(named_barrier(), a)
    np.testing.assert_array_equal(interp[:64], a[::-1])
    for emu in emulated:
        np.testing.assert_array_equal(emu[:64], interp[:64])
    for bad in (named_barrier(sync=False), named_barrier(outsiders=True)):
        for target in ("emulator", "emulator:sm_90a"):
            with pytest.raises(TileError) as info:
                run(bad, [a], target)
            races = [r for r in info.value.reports if r.kind == "race"]
            assert races and races[0].buffer == "s", info.value.reports


def half_warp_shuffle():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            if tx < 16:
                B[tx] = T.shfl_xor(A[tx], 1)
    return main


def test_shuffle_by_part_of_a_warp():
    a = np.arange(32, dtype=np.float32)
    with pytest.raises(TileError, match="executed by only some lanes of warp 0"):
        run(half_warp_shuffle(), [a], "interp")
    with pytest.raises(TileError) as info:
        run(half_warp_shuffle(), [a], "emulator")
    assert any(r.kind == "warp-divergence" for r in info.value.reports)


@pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_warp_kernels_compile(arch):
    for func in (shuffles("float16", 16, 5), warp_reductions("float32"), block_sum(2),
                 warp_exchange(True), named_barrier(), reinterpret_bf16()):
        assert tilecraft.compile(func, target=arch).n_regs > 0


def reinterpret_bf16():
    """(Also compiled above.)"""
    @T.prim_func
    def main(A: T.Tensor((32,), "bfloat16"), U: T.Tensor((32,), "uint16")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            U[tx] = T.reinterpret(A[tx], "uint16")
    return main


def test_cuda_text_of_the_warp_operations():
    from tilecraft.backends.cuda import pipeline as pipelines
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    text = emit_cuda(pipelines.cuda_sm80(shuffles("float16", 16, 5)))[0]
    for call in ("tc::shfl_xor_group<16>(v[0], 5)", "tc::shfl_down_group<16>(v[0], 5)",
                 "tc::shfl_up_group<16>(v[0], 5)", "tc::shfl_idx_group<16>(v[0], tx % 7 + 5)"):
        assert call in text
    text = emit_cuda(pipelines.cuda_sm80(named_barrier()))[0]
    assert "tc::named_barrier_sync(1, 64);" in text
    text = emit_cuda(pipelines.cuda_sm80(warp_exchange(True)))[0]
    assert "tc::syncwarp();" in text
    text = emit_cuda(pipelines.cuda_sm80(reinterpret_bf16()))[0]
    assert "tc::bit_cast<unsigned short>(A[tx])" in text


# --- errors ------------------------------------------------------------------------------

def test_shuffle_of_a_fragment():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                T.copy(A, f)
                A[0] = T.shfl_xor(f, 1)  # <- here
    expect(program, "T.shfl_xor takes one value per thread, not the fragment f", "T.shfl_xor(")


def test_shuffle_of_a_fragment_element():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((32,), "float32")
                T.copy(A, f)
                A[0] = T.shfl_down(f[3], 1)  # <- here
    expect(program, "T.shfl_down: the value reads fragment f", "T.shfl_down(")


def test_shuffle_inside_parallel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    A[i] = T.shfl_xor(A[i], 1)  # <- here
    expect(program, "T.shfl_xor cannot be used inside T.Parallel", "T.shfl_xor(")


def test_shuffle_width_and_mask():
    def width():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.shfl_up(A[1], 1, width=12)  # <- here
    expect(width, "T.shfl_up: width must be a power of two from 1 to 32, got 12", "T.shfl_up(")

    def mask():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.shfl_sync(A[1], 0, mask=0xFFFF)  # <- here
    expect(mask, "T.shfl_sync: mask=65535 is not supported yet", "T.shfl_sync(")


def test_named_barrier_arguments():
    def count():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.sync_threads(1, 48)  # <- here
    expect(count, "T.sync_threads: arrive_count must be a multiple of 32 from 32 to the "
           "block's 128 threads, got 48", "T.sync_threads(")

    def ident():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.sync_threads(16)  # <- here
    expect(ident, "T.sync_threads: barrier_id must be 0..15, got 16", "T.sync_threads(")


def test_reinterpret_of_another_size():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float16")):
            with T.Kernel(1, threads=32) as bx:
                tx = T.get_thread_binding()
                B[tx] = T.reinterpret(A[tx], "float16")  # <- here
    expect(program, "T.reinterpret: a float32 (32 bits) cannot be read as a float16 (16 bits)",
           "T.reinterpret(")


def test_barrier_inside_parallel():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(32):
                    T.sync_threads()  # <- here
    expect(program, "T.sync_threads cannot be used inside T.Parallel", "T.sync_threads(")


# --- TileLang names tilecraft does not have -----------------------------------------------

def test_every_missing_tilelang_name_is_a_clear_error():
    missing = [n for n in tilelang_names() if n not in vars(T)]
    assert "sync_grid" in missing and "tcgen05_gemm" in missing
    for name in missing:
        with pytest.raises(NotSupportedYet) as info:
            getattr(T, name)
        assert isinstance(info.value, TileError)
        assert f"T.{name} is not supported by tilecraft yet" in info.value.message
        assert not hasattr(T, name)   # an AttributeError too: hasattr keeps its meaning


def test_a_name_tilelang_lacks_too_is_a_plain_attribute_error():
    with pytest.raises(AttributeError) as info:
        T.tma_cpy  # noqa: B018
    assert not isinstance(info.value, TileError)
    assert "tma_cpy" in str(info.value)


def test_missing_name_in_a_kernel_points_at_it():
    def program():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.sync_grid()  # <- here
    expect(program, "T.sync_grid is not supported by tilecraft yet", "T.sync_grid")
