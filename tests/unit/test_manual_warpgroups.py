"""Warp specialization written by hand (T.ws, T.alloc_barrier, T.barrier_wait / arrive,
T.tma_copy; schedule/manual_warpgroups.py): the forms of TileLang's warp-specialized GEMM
examples, on random inputs with poisoned outputs and ragged sizes, agree with numpy on the
interpreter and on the sm_90a emulator (mbarriers, TMA and wgmma modelled, race checker on,
nothing reported), and compile with nvcc without spills or serialized wgmma; misuse is refused
at its line."""
import re

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError


def producer_consumer(M, N, K, bm=128, bn=128, bk=64, producer=0, tma=True, num_stages=0):
    """A producer warpgroup loads A and B tiles (by TMA, or with ordinary copies doubling A on
    the way); the consumer multiplies them. Two mbarriers hand the one tile pair back and
    forth."""
    consumer = 1 - producer

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            ready = T.alloc_barrier(arrive_count=128)
            done = T.alloc_barrier(arrive_count=128)
            with T.ws(consumer):
                T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                with T.ws(producer):
                    T.barrier_wait(done, (ko + 1) % 2)
                    if tma:
                        T.tma_copy(A[by * bm, ko * bk], A_s, barrier=ready)
                        T.tma_copy(B[ko * bk, bx * bn], B_s, barrier=ready)
                    else:
                        T.copy(A[by * bm, ko * bk], A_s)
                        for i, j in T.Parallel(bm, bk):
                            A_s[i, j] = A_s[i, j] * 2
                        T.copy(B[ko * bk, bx * bn], B_s)
                    T.barrier_arrive(ready)
                with T.ws(consumer):
                    T.barrier_wait(ready, ko % 2)
                    T.gemm(A_s, B_s, C_l)
                    T.barrier_arrive(done)
            with T.ws(consumer):
                T.copy(C_l, C[by * bm, bx * bn])
    return main


def two_halves(M, N, K, bm=64, bn=128, bk=32):
    """Both warpgroups multiply: each owns half of the output tile's columns and loads its own
    B tile in its region; the A tile all threads load is shared."""
    half = bn // 2

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B0 = T.alloc_shared((bk, half), "float16")
            B1 = T.alloc_shared((bk, half), "float16")
            C0 = T.alloc_fragment((bm, half), "float32")
            C1 = T.alloc_fragment((bm, half), "float32")
            with T.ws(1):
                T.clear(C1)
            with T.ws(0):
                T.clear(C0)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=0):
                T.copy(A[by * bm, ko * bk], A_s)
                with T.ws(1):
                    T.copy(B[ko * bk, bx * bn + half], B1)
                    T.gemm(A_s, B1, C1)
                with T.ws(0):
                    T.copy(B[ko * bk, bx * bn], B0)
                    T.gemm(A_s, B0, C0)
            with T.ws(1):
                T.copy(C1, C[by * bm, bx * bn + half])
            with T.ws(0):
                T.copy(C0, C[by * bm, bx * bn])
    return main


def two_stage_ring(M, N, K, bm=128, bn=128, bk=64, stages=2):
    """The producer runs up to `stages` tiles ahead: a ring of tiles, a full and an empty
    mbarrier per stage (one T.alloc_barrier of 2 * stages)."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((stages, bm, bk), "float16")
            B_s = T.alloc_shared((stages, bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            bars = T.alloc_barrier([128] * (2 * stages))
            with T.ws(0):
                T.clear(C_l)
            for ko in range(T.ceildiv(K, bk)):
                with T.ws(1):
                    T.mbarrier_wait_parity(mbarrier=bars[ko % stages + stages],
                                           parity=((ko // stages) % 2) ^ 1)
                    T.tma_copy(A[by * bm:(by + 1) * bm, ko * bk:(ko + 1) * bk],
                               A_s[ko % stages, :, :], barrier=bars[ko % stages])
                    T.tma_copy(B[ko * bk:(ko + 1) * bk, bx * bn:(bx + 1) * bn],
                               B_s[ko % stages, :, :], barrier=bars[ko % stages])
                    T.mbarrier_arrive(mbarrier=bars[ko % stages])
                with T.ws(0):
                    T.mbarrier_wait_parity(mbarrier=bars[ko % stages], parity=(ko // stages) % 2)
                    T.gemm(A_s[ko % stages, :, :], B_s[ko % stages, :, :], C_l)
                    T.mbarrier_arrive(mbarrier=bars[ko % stages + stages])
            with T.ws(0):
                T.copy(C_l, C[by * bm, bx * bn])
    return main


def one_producer_two_consumers(M, N, K, bm=64, bn=128, bk=64):
    """Three warpgroups: warpgroup 2 loads A and both halves of B by TMA; warpgroups 0 and 1
    each multiply A by their half into a fragment of their own, and both must release the
    tiles (256 arrivals) before the producer refills them."""
    half = bn // 2

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=384) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B0 = T.alloc_shared((bk, half), "float16")
            B1 = T.alloc_shared((bk, half), "float16")
            C0 = T.alloc_fragment((bm, half), "float32")
            C1 = T.alloc_fragment((bm, half), "float32")
            ready = T.alloc_barrier(128)
            done = T.alloc_barrier(256)
            with T.ws(0):
                T.clear(C0)
            with T.ws(1):
                T.clear(C1)
            for ko in T.serial(T.ceildiv(K, bk)):
                with T.ws(2):
                    T.barrier_wait(done, (ko + 1) % 2)
                    T.tma_copy(A[by * bm, ko * bk], A_s, barrier=ready)
                    T.tma_copy(B[ko * bk, bx * bn], B0, barrier=ready)
                    T.tma_copy(B[ko * bk, bx * bn + half], B1, barrier=ready)
                    T.barrier_arrive(ready)
                with T.ws(0):
                    T.barrier_wait(ready, ko % 2)
                    T.gemm(A_s, B0, C0)
                    T.barrier_arrive(done)
                with T.ws(1):
                    T.barrier_wait(ready, ko % 2)
                    T.gemm(A_s, B1, C1)
                    T.barrier_arrive(done)
            with T.ws(0):
                T.copy(C0, C[by * bm, bx * bn])
            with T.ws(1):
                T.copy(C1, C[by * bm, bx * bn + half])
    return main


CASES = [
    pytest.param(producer_consumer, (256, 256, 192), {}, id="producer0"),
    pytest.param(producer_consumer, (200, 136, 192), {"producer": 1}, id="producer1-ragged"),
    # as TileLang's softpipe example writes it: the loop's num_stages has nothing to pipeline
    pytest.param(producer_consumer, (128, 128, 256), {"num_stages": 2}, id="pipelined-loop"),
    pytest.param(two_halves, (100, 200, 96), {}, id="two-halves-ragged"),
    pytest.param(one_producer_two_consumers, (128, 200, 192), {}, id="three-warpgroups"),
    pytest.param(two_stage_ring, (256, 128, 320), {}, id="ring"),
]


@pytest.mark.parametrize("target", ["interp", "emulator:sm_90a"])
@pytest.mark.parametrize("factory, shape, options", CASES)
def test_hand_specialized_gemms_agree_with_numpy(factory, shape, options, target):
    M, N, K = shape
    rng = np.random.default_rng(M + N + K)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, np.float16)
    kernel = tilecraft.compile(factory(M, N, K, **options), target=target)
    kernel(A, B, C)
    if target != "interp":
        assert kernel.reports == []
    want = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(C.astype(np.float64), want, rtol=1e-2, atol=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("factory, shape, options", CASES)
def test_hand_specialized_gemms_compile_without_spills(factory, shape, options):
    kernel = tilecraft.compile(factory(*shape, **options), target="sm_90a")
    source = kernel.get_kernel_source()
    assert "tc::warpgroup_index() == " in source
    assert ("tc::mbarrier_init(" in source) == (factory is not two_halves)
    assert kernel.n_regs > 0 and kernel.n_spills == 0 and not kernel.wgmma_serialized


def lowered_source(func, target="sm_90a"):
    from tilecraft.backends.cuda import pipeline
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    return emit_cuda(pipeline.lower(func, target))[0]


def test_what_the_regions_become():
    """The region's TMA loads are issued by its first thread after counting their bytes on
    the barrier; a barrier inside a region is a named barrier of its warpgroup; the loop is a
    plain loop (no compiler pipeline or producer warpgroup of its own)."""
    text = lowered_source(producer_consumer(256, 256, 192, producer=1))
    assert "if (tc::is_producer_leader(128)) {\n" in text
    assert "tc::mbarrier_expect_tx((&ready[0]), 16384);" in text
    assert "tc::setmaxnreg" not in text and "tma_full" not in text
    halves = lowered_source(two_halves(128, 256, 64))
    assert "tc::named_barrier_sync(7, 128);" in halves     # warpgroup 1's own barrier
    assert "tc::named_barrier_sync(6, 128);" in halves


def refused(body_kind):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            bar = T.alloc_barrier(128)
            if body_kind == "fragment-in-two":
                with T.ws(0):
                    T.clear(C_l)
                with T.ws(1):
                    T.copy(C_l, C)
            elif body_kind == "group-out-of-range":
                with T.ws(2):
                    T.clear(C_l)
            elif body_kind == "tma-not-shared":
                T.tma_copy(A, C_l, barrier=bar)
            elif body_kind == "not-a-barrier":
                T.barrier_arrive(A_s)
            else:
                T.copy(A, A_s)
    return main


@pytest.mark.parametrize("kind, message", [
    ("fragment-in-two", "fragment C_l is used T.ws(1) and T.ws(0)"),
    ("group-out-of-range", "the block has 256 threads, 2 whole warpgroup(s)"),
    ("tma-not-shared", "T.tma_copy: copies a tile of a global tensor into shared memory"),
    ("not-a-barrier", "T.barrier_arrive: expected an mbarrier of T.alloc_barrier"),
])
def test_misuse_is_refused_at_its_line(kind, message):
    with pytest.raises(TileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lowered_source(refused(kind))


def test_tma_copy_without_tma_is_an_ordinary_copy_by_the_region():
    """Without TMA (sm_80) T.tma_copy is a copy by the threads running it, each writing before
    its own arrival on the barrier; said in a warning. The emulator finds no race and the
    product is right."""
    M, N, K = 100, 72, 96
    func = producer_consumer(M, N, K, bm=64, bn=64, bk=32, producer=1)
    with pytest.warns(UserWarning, match="T.tma_copy of A runs as an ordinary copy by the "
                                         "threads running it: TMA needs sm_90a"):
        kernel = tilecraft.compile(func, target="emulator")
    rng = np.random.default_rng(12)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, np.float16)
    kernel(A, B, C)
    assert kernel.reports == []
    np.testing.assert_allclose(C.astype(np.float64), A.astype(np.float64) @ B.astype(
        np.float64), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("target", ["interp", "emulator:sm_90a"])
def test_a_region_filling_tiles_with_ordinary_stores(target):
    """Tiles one region writes with ordinary stores and another's wgmma reads: a block barrier
    (fenced for the async proxy) orders the regions where they share the tiles, besides the
    program's mbarrier handshake; the emulator finds no race and the right numbers."""
    M, N, K = 100, 72, 96
    func = producer_consumer(M, N, K, bm=64, bn=64, bk=32, producer=1, tma=False)
    if target != "interp":
        text = lowered_source(func)
        loop = text[text.index("for (int ko"):]
        assert re.search(r"tc::fence_proxy_async_shared\(\);\s*tc::syncthreads\(\);", loop)
    rng = np.random.default_rng(9)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, np.float16)
    kernel = tilecraft.compile(func, target=target)
    kernel(A, B, C)
    if target != "interp":
        assert kernel.reports == []
    np.testing.assert_allclose(C.astype(np.float64), 2 * A.astype(np.float64) @ B.astype(
        np.float64), rtol=1e-2, atol=2e-2)


def consumer_first(arrivals=128, producer_first=False):
    """The consumer's region comes before the producer's that completes its phase (or after
    it, with producer_first)."""
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((64, 64), "float16")
            ready = T.alloc_barrier(arrivals)
            if producer_first:
                with T.ws(1):
                    T.copy(A, A_s)
                    T.barrier_arrive(ready)
            with T.ws(0):
                T.barrier_wait(ready, 0)
                T.copy(A_s, C)
            if not producer_first:
                with T.ws(1):
                    T.copy(A, A_s)
                    T.barrier_arrive(ready)
    return main


def test_the_interpreter_refuses_a_wait_its_program_order_cannot_pass():
    """The interpreter runs regions in program order and counts each mbarrier's arrivals: a
    wait for a phase only a later region completes is an error naming the barrier, not a
    silently wrong answer. The CUDA code orders the two regions, which share A_s, with a block
    barrier: valid only where program order is a valid order, so the emulator reports the
    deadlock it makes here."""
    from tilecraft.backends.cuda.emulator import EmulatorError
    A = np.random.default_rng(3).uniform(-1, 1, (64, 64)).astype(np.float16)
    with pytest.raises(TileError, match=r"T.barrier_wait on mbarrier ready \(parity 0\) would "
                                        r"block here: 0 of its 128 arrivals are in"):
        tilecraft.compile(consumer_first(), target="interp")(A, np.zeros_like(A))
    with pytest.raises(EmulatorError, match="deadlock: ready: threads 0-127 wait"):
        tilecraft.compile(consumer_first(), target="emulator:sm_90a")(A, np.zeros_like(A))


def test_more_arrivals_than_a_phase_expects_is_an_error_on_the_interpreter():
    A = np.random.default_rng(4).uniform(-1, 1, (64, 64)).astype(np.float16)
    C = np.full_like(A, np.nan)
    tilecraft.compile(consumer_first(producer_first=True), target="interp")(A, C)
    np.testing.assert_array_equal(C, A)
    with pytest.raises(TileError, match="128 arrivals on mbarrier ready in one phase, which "
                                        "expects 64"):
        tilecraft.compile(consumer_first(64, producer_first=True), target="interp")(A, C)
