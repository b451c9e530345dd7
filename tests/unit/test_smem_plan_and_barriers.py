"""plan_shared_memory (liveness-based reuse, alignment) and insert_barriers (a barrier exactly
where a shared-memory hazard exists), on small tile-level programs."""
import dataclasses

import tilecraft.language as T
from tilecraft import layout as lay
from tilecraft.ir.buffer import is_shared
from tilecraft.ir.stmt import Allocate, For, IfThenElse, stmts_of
from tilecraft.ir.visitor import walk
from tilecraft.passes.infer_layouts import infer_layouts
from tilecraft.passes.insert_barriers import insert_barriers
from tilecraft.ir.annotations import is_sync
from tilecraft.passes.plan_shared_memory import plan_shared_memory
from tilecraft.backends.cuda.rules import CUDA_RULES


def planned(func, reuse=True):
    func = plan_shared_memory(infer_layouts(func, CUDA_RULES), CUDA_RULES, reuse=reuse)
    shared = {n.buffer.name: n.buffer for n in walk(func.body)
              if isinstance(n, Allocate) and is_shared(n.buffer.scope)}
    offsets = {name: func.attrs["smem_offsets"][id(b)] for name, b in shared.items()}
    return func, offsets


def kernel_body(func):
    return list(stmts_of(func.kernels()[0].body))


def overlap(a, b) -> bool:
    (sa, na), (sb, nb) = a, b
    return sa < sb + nb and sb < sa + na


def two_phase():
    """Tile `first` is dead before `second` is born; `both` lives across."""
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            first = T.alloc_shared((64, 64), "float16")
            both = T.alloc_shared((64, 64), "float16")
            second = T.alloc_shared((64, 64), "float16")
            T.copy(X, first)
            T.copy(first, both)
            T.copy(both, second)
            T.copy(second, Y)
    return main


def test_dead_tiles_share_bytes_and_live_ones_do_not():
    func, off = planned(two_phase())
    assert overlap(off["first"], off["second"])  # first is dead before second is born
    assert not overlap(off["first"], off["both"])
    assert not overlap(off["second"], off["both"])
    assert func.kernels()[0].attrs["smem_bytes"] == 2 * 64 * 64 * 2


def test_reuse_turned_off_gives_every_tile_bytes_of_its_own():
    func, off = planned(two_phase(), reuse=False)
    assert not any(overlap(off[a], off[b]) for a, b in
                   (("first", "second"), ("first", "both"), ("second", "both")))
    assert func.kernels()[0].attrs["smem_bytes"] == 3 * 64 * 64 * 2


def test_the_pass_configs_that_decide_reuse():
    from tilecraft import PassConfigKey
    from tilecraft.compiler import lower

    def smem(configs):
        planned = lower(two_phase(), "sm_80", configs, stop_after="plan_shared_memory")
        return planned.kernels()[0].attrs["smem_bytes"]

    assert smem({}) == 2 * 64 * 64 * 2
    assert smem({PassConfigKey.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE: True}) == smem({})
    assert smem({PassConfigKey.TL_DISABLE_SHARED_MEMORY_REUSE: True}) == 3 * 64 * 64 * 2


def test_swizzled_tiles_are_aligned_to_their_atom():
    func, off = planned(two_phase())
    for start, _ in off.values():
        assert start % 1024 == 0  # 64 fp16 columns: 128-byte swizzle, 1024-byte atoms


def test_a_tile_used_in_a_loop_lives_for_the_whole_loop():
    @T.prim_func
    def main(X: T.Tensor((4, 64, 64), "float16"), Y: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((64, 64), "float32")
            prev = T.alloc_fragment((64, 64), "float32")
            tile = T.alloc_shared((64, 64), "float16")
            late = T.alloc_shared((64, 64), "float16")
            T.clear(acc)
            T.copy(acc, late)
            for k in T.serial(4):
                T.copy(X[k, :, :], tile)
                T.copy(late, prev)  # the previous iteration's late: carried over the back edge
                T.copy(tile, acc)
                T.copy(acc, late)
            T.copy(late, Y)
    _, off = planned(main)
    assert not overlap(off["tile"], off["late"])


def test_a_tile_each_iteration_overwrites_first_is_live_from_that_write_on():
    """The persistent kernels' query / output tiles: each iteration loads `q` whole before
    touching it and writes `out` whole after its last read of `q`, so the two share bytes, with
    a barrier at the top of the body (the next load of `q` overwrites the previous `out`)."""
    @T.prim_func
    def main(X: T.Tensor((4, 64, 64), "float16"), Y: T.Tensor((4, 64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((64, 64), "float32")
            q = T.alloc_shared((64, 64), "float16")
            out = T.alloc_shared((64, 64), "float16")
            for k in T.serial(4):
                T.copy(X[k, :, :], q)
                T.copy(q, acc)
                T.copy(acc, out)
                T.copy(out, Y[k, :, :])
    func, off = planned(main)
    assert overlap(off["q"], off["out"])
    loop = next(s for s in kernel_body(insert_barriers(func, CUDA_RULES)) if isinstance(s, For))
    assert is_sync(stmts_of(loop.body)[0])


def barriers(func):
    func = insert_barriers(plan_shared_memory(infer_layouts(func, CUDA_RULES), CUDA_RULES),
                           CUDA_RULES)
    return kernel_body(func)


def test_a_barrier_between_a_shared_write_and_its_read_only():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            f = T.alloc_fragment((64, 64), "float32")
            g = T.alloc_fragment((64, 64), "float32")
            T.copy(X, s)
            T.copy(s, f)
            T.copy(f, g)  # registers only: no barrier
            T.copy(g, Y)
    body = [s for s in barriers(main) if not isinstance(s, Allocate)]
    kinds = ["sync" if is_sync(s) else type(s).__name__ for s in body]
    assert kinds == ["Copy", "sync", "Copy", "Copy", "Copy"]


def test_a_loop_that_refills_a_tile_gets_a_barrier_at_its_top():
    @T.prim_func
    def main(X: T.Tensor((4, 64, 64), "float16"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.serial(4):
                T.copy(X[k, :, :], s)
                for i, j in T.Parallel(64, 64):
                    acc[i, j] += s[i, j]
            T.copy(acc, Y)
    loop = next(s for s in barriers(main) if isinstance(s, For))
    inner = list(stmts_of(loop.body))
    # The next iteration's copy must wait for this iteration's readers (WAR), and the reads
    # for the copy (RAW): two barriers, one before each.
    assert [is_sync(s) for s in inner] == [True, False, True, False]


def test_reused_bytes_are_separated_by_a_barrier():
    body = barriers(two_phase())
    body = [s for s in body if not isinstance(s, Allocate)]
    kinds = ["sync" if is_sync(s) else "op" for s in body]
    # Each copy reads what the previous one wrote (a barrier each); the barrier before the copy
    # into `second` also retires the reads of `first`, whose bytes `second` reuses.
    assert kinds == ["op", "sync", "op", "sync", "op", "sync", "op"]


def test_a_branch_on_shared_data_waits_for_its_writer():
    @T.prim_func
    def main(X: T.Tensor((64,), "int32"), Y: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            flags = T.alloc_shared((64,), "int32")
            T.copy(X, flags)
            if flags[3] > 0:
                T.copy(flags, Y)
    body = [s for s in barriers(main) if not isinstance(s, Allocate)]
    assert is_sync(body[1]) and isinstance(body[2], IfThenElse)


def test_the_only_hazard_is_the_reuse_of_bytes():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float16"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            first = T.alloc_shared((64, 64), "float16")
            second = T.alloc_shared((64, 64), "float16")
            f = T.alloc_fragment((64, 64), "float32")
            T.copy(X, first)
            T.copy(first, f)
            T.copy(X, second)  # a different tile, but on first's bytes
            T.copy(second, f)
            T.copy(f, Y)
    _, off = planned(main)
    assert overlap(off["first"], off["second"])
    body = [s for s in barriers(main) if not isinstance(s, Allocate)]
    kinds = ["sync" if is_sync(s) else "op" for s in body]
    assert kinds == ["op", "sync", "op", "sync", "op", "sync", "op", "op"]


def refill_after_a_reduce(threads):
    """A loop that rewrites a shared tile after a row reduction: with one warp the reduction
    stays inside it; with 128 threads each row spans two warps (f pinned to a grid of 64
    threads a row: left to itself, layout inference keeps each row in one warp)."""
    grid = lay.grid_partition((64, 64), threads)

    @T.prim_func
    def main(X: T.Tensor((4, 64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            s = T.alloc_shared((64, 64), "float32")
            f = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            acc = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({f: grid})
            T.clear(acc)
            for k in T.serial(4):
                T.copy(X[k, :, :], f)
                T.reduce_max(f, m, dim=1)
                T.copy(f, s)
                for i, j in T.Parallel(64, 64):
                    acc[i, j] += s[i, j] - m[i]
            T.copy(acc, Y)
    return main


def test_a_reduction_across_warps_serves_as_the_barrier_before_a_refill(example):
    # MLA decode splits the score columns over two warpgroups (FullCol, with the seesaw
    # schedule off): its row max and sum go through shared memory between two barriers, which
    # also order the last iteration's reads of S_shared before this iteration's write: no
    # barrier of its own at the loop top.
    from tilecraft.carver.recommend import underlying
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    from tilecraft.backends.cuda import pipeline as pipelines
    m = example("mla_decode")
    func = underlying(m.flash_mla_decode)(2, 64, 1, 200, 128, 64, block_N=64, block_H=64,
                                          num_stages=2, threads=256)
    text = emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024, SHARED_ROWS))[0]
    consumer = text[text.index("} else {"):]
    loop = consumer[consumer.index("for (int k = 0;"):]
    assert "tc::named_barrier_sync" not in loop[:loop.index("scores_max_red[0] =")]
    # The same on tile level: the refill of s waits for the last iteration's readers by a
    # barrier of its own only where the reduction in front of it stays inside a warp, and
    # that barrier comes just before the refill, not at the top of the body.
    for threads, kinds in ((32, ["Copy", "Reduce", "sync", "Copy", "sync", "For"]),
                           (128, ["Copy", "Reduce", "Copy", "sync", "For"])):
        loop = next(s for s in barriers(refill_after_a_reduce(threads)) if isinstance(s, For))
        assert ["sync" if is_sync(s) else type(s).__name__
                for s in stmts_of(loop.body)] == kinds


# Both warpgroups in every score tile, as FullCol splits it (not seesaw_warpgroups).
SHARED_ROWS = {"tl.disable_seesaw_warpgroups": True}


def _mla_consumer_loop(example, **cfg):
    from tilecraft.carver.recommend import underlying
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    from tilecraft.backends.cuda import pipeline as pipelines
    m = example("mla_decode")
    func = underlying(m.flash_mla_decode)(2, 64, 1, 200, 128, 64, block_N=64, block_H=64,
                                          num_stages=2, threads=256)
    text = emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024, {**SHARED_ROWS, **cfg}))[0]
    consumer = text[text.index("} else {"):]
    start = consumer.index("for (int k = 0;")
    return text, consumer[start:consumer.index("tma_empty[k % 2]));", start)]


def test_reductions_drop_their_trailing_barrier_where_another_comes_first(example):
    # MLA's loop: the row max and the row sum each publish their partials with a barrier, and
    # S_shared's write is published by one; the barrier each reduction used to add after its
    # reads (before the next user of the shared scratch) is gone, since the next reduction's
    # barrier, or S's, always comes first. Each reduction has scratch bytes of its own.
    text, loop = _mla_consumer_loop(example)
    assert loop.count("tc::named_barrier_sync") == 3
    max_ws = text[text.index("scores_max_ws = "):].split("tc_smem + ")[1].split(")")[0]
    sum_ws = text[text.index("scores_sum_ws = "):].split("tc_smem + ")[1].split(")")[0]
    assert abs(int(max_ws) - int(sum_ws)) >= 512   # 128 float slots each
    # On tile level the mark is in the IR: the refill loop's reduction has the barrier after
    # it (the one in front of the refill's readers) to rely on.
    loop = next(s for s in barriers(refill_after_a_reduce(128)) if isinstance(s, For))
    reduce = next(s for s in stmts_of(loop.body) if type(s).__name__ == "Reduce")
    assert reduce.trailing_barrier is False


def lone_reduction():
    """A loop whose only barrier is its reduction across warps (f pinned to a grid whose rows
    span two warps: left to itself, layout inference keeps each row in one warp)."""
    grid = lay.grid_partition((64, 64), 128)

    @T.prim_func
    def main(X: T.Tensor((4, 64, 64), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            acc = T.alloc_fragment((64,), "float32")
            T.annotate_layout({f: grid})
            T.clear(acc)
            for k in T.serial(4):
                T.copy(X[k, :, :], f)
                T.reduce_max(f, m, dim=1)
                for i in T.Parallel(64):
                    acc[i] += m[i]
            T.copy(acc, Y)
    return main


def test_a_lone_reduction_keeps_its_trailing_barrier_which_the_emulator_shows_is_needed(
        monkeypatch):
    import numpy as np
    import tilecraft.backends.cuda.emulator as E
    from tilecraft.passes import insert_barriers as ib
    loop = next(s for s in barriers(lone_reduction()) if isinstance(s, For))
    reduce = next(s for s in stmts_of(loop.body) if type(s).__name__ == "Reduce")
    assert reduce.trailing_barrier is True
    X = np.random.default_rng(0).standard_normal((4, 64, 64)).astype(np.float32)
    Y = np.zeros(64, np.float32)
    assert list(E.run(E.lower(lone_reduction()), [X, Y])) == []
    np.testing.assert_allclose(Y, X.max(axis=2).sum(axis=0), rtol=1e-5)
    # Dropping it anyway: the next iteration's partials overwrite slots still being read.
    monkeypatch.setattr(ib._Inserter, "without_trailing", lambda self, body: [
        dataclasses.replace(x, trailing_barrier=False) if self.synchronizes(x) else x
        for x in body])
    reports = [r for r in E.run(E.lower(lone_reduction()), [X, Y]) if r.kind == "race"]
    assert reports and reports[0].buffer == "m_ws"
