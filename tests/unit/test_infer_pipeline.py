"""infer_pipeline: the issue order and stage of each statement of a T.Pipelined loop (paper
algorithm 4), checks of a user's order=/stage=, the dump, and pipeline_loops consuming them."""
import importlib.util
from pathlib import Path

import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.ir.stmt import For
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.passes.infer_pipeline import infer_pipeline
from tilecraft.backends.cuda.schedule.pipeline_loops import pipeline_loops
from tilecraft.backends.cuda.runtime import has_nvcc

from error_expect import expect

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
needs_nvcc = pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")


def example(module_name: str, factory: str):
    spec = importlib.util.spec_from_file_location(f"pipeline_ex_{module_name}",
                                                  EXAMPLES / f"{module_name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, factory).__wrapped__


def gemm(num_stages=3):
    return example("gemm", "matmul")(256, 256, 256, num_stages=num_stages)


def mha(is_causal, num_stages=2):
    return example("flash_attention", "flash_attention")(1, 2, 100, 32, is_causal,
                                                          num_stages=num_stages)


def mla(num_stages=2):
    return example("mla_decode", "flash_mla_decode")(2, 16, 1, 200, 64, 32,
                                                      num_stages=num_stages)


def pipelined_loops(func):
    return [n for n in walk(func.body) if isinstance(n, For) and n.kind == "pipelined"]


def schedule(func):
    (loop,) = pipelined_loops(infer_pipeline(func))
    return loop.annotations["pipeline_order"], loop.annotations["pipeline_stage"]


# --- inferred schedules ----------------------------------------------------------------------
def test_gemm_copies_are_rotated_to_the_front():
    # gemm, then both copies after their last use; all copies at the tail, so the tail
    # rotation issues them first and the gemm runs num_stages - 1 stages later.
    assert schedule(gemm(3)) == ([0, 1, 2], [0, 0, 2])
    assert schedule(gemm(2)) == ([0, 1, 2], [0, 0, 1])


@pytest.mark.parametrize("is_causal", [False, True])
def test_mha_copies_follow_their_last_use(is_causal):
    # 0 copy K, 1 init scores, 2 gemm Q K^T, 3..10 online softmax, 11 copy V, 12 gemm P V.
    order, stage = schedule(mha(is_causal))
    assert order == [2, 0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 12, 11]
    assert stage == [0] + [1] * 10 + [0, 1]
    order, stage = schedule(mha(is_causal, num_stages=3))
    assert order == [2, 0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 12, 11]
    assert stage == [0] + [2] * 10 + [0, 2]


def test_mla_two_copies_two_gemms_one_accumulator():
    # 0 copy KV, 1 copy K_pe, 2 init scores, 3 gemm Q KV^T, 4 gemm Q_pe K_pe^T (same acc_s),
    # 5..12 softmax, 13 gemm S KV. K_pe's last use is gemm 4, KV's is the final gemm 13.
    order, stage = schedule(mla())
    assert order == [13, 3, 0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert stage == [0, 0] + [1] * 12


def test_loops_without_stages_are_left_alone():
    for loop in pipelined_loops(infer_pipeline(mha(False, num_stages=1))):
        assert "pipeline_order" not in loop.annotations


def index_fed_copy():
    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), Ids: T.Tensor((8,), "int32"),
             C: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((32, 64), "float32")
            row = T.alloc_var("int32")
            T.clear(acc)
            for k in T.Pipelined(8, num_stages=2):
                row = Ids[k] * 32
                T.copy(A[row, 0], A_s)
                for i, j in T.Parallel(32, 64):
                    acc[i, j] += A_s[i, j]
            T.copy(acc, C)
    return main


def test_a_scalar_that_feeds_a_copy_is_a_producer():
    assert schedule(index_fed_copy()) == ([0, 1, 2], [0, 0, 1])


def test_a_copy_that_needs_a_last_stage_result_stays_there():
    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), C: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((32, 64), "float32")
            row = T.alloc_var("int32")
            row = 0
            T.clear(acc)
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[row, 0], A_s)  # the row comes from the previous iteration
                for i, j in T.Parallel(32, 64):
                    acc[i, j] += A_s[i, j]
                row = row + 32
            T.copy(acc, C)
    order, stage = schedule(main)
    assert stage == [1, 1, 1] and order == [0, 1, 2]
    assert "tc::cp_async" not in pipeline_loops(infer_pipeline(main)).script()


# --- the user's order= and stage= ------------------------------------------------------------
def user_gemm(order, stage):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(2, num_stages=2, order=order, stage=stage):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C)
    return main


def test_a_consistent_user_schedule_is_kept():
    assert schedule(user_gemm([1, 0, 2], [0, 0, 1])) == ([1, 0, 2], [0, 0, 1])
    assert schedule(user_gemm(None, [0, 0, 1])) == ([0, 1, 2], [0, 0, 1])
    # An order alone takes the inferred stages.
    assert schedule(user_gemm([2, 0, 1], None)) == ([2, 0, 1], [0, 0, 1])
    # Whatever the order, the statements that run ahead are issued right after the barrier
    # (their copies then overlap the whole iteration), A's before B's as the order says.
    func = pipeline_loops(infer_pipeline(user_gemm([1, 2, 0], [0, 0, 1])))
    text = func.script()
    loop = text[text.index("for k in T.serial"):]
    assert loop.index("syncthreads") < loop.index("scheduled=True") < loop.index("T.gemm(")
    assert loop.index("T.copy(A[") < loop.index("T.copy(B[")


def test_a_consumer_before_its_producer_is_rejected():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
                 C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                T.clear(acc)
                for k in T.Pipelined(2, num_stages=2, stage=[1, 1, 0]):
                    T.copy(A[0, k * 32], A_s)
                    T.copy(B[k * 32, 0], B_s)
                    T.gemm(A_s, B_s, acc)  # <- here
                T.copy(acc, C)
        infer_pipeline(main)
    err = expect(program, "T.Pipelined stage= puts this statement in stage 0, before stage 1 of "
                 "the statement at line", "T.gemm")
    assert "A_s" in err.message


def test_an_order_against_a_dependency_is_rejected():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                T.clear(acc)
                for k in T.Pipelined(2, num_stages=2, order=[0, 2, 1], stage=[0, 1, 1]):
                    T.copy(A, A_s)
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] += A_s[i, j]
                    for i, j in T.Parallel(64, 64):  # <- here
                        acc[i, j] *= 0.5
                T.copy(acc, C)
        infer_pipeline(main)
    err = expect(program, "T.Pipelined order= issues this statement before the statement at "
                 "line", "T.Parallel")
    assert "acc" in err.message


def test_an_earlier_stage_that_writes_a_tile_is_rejected():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_f = T.alloc_fragment((64, 64), "float32")
                acc = T.alloc_fragment((64, 64), "float32")
                T.clear(acc)
                for k in T.Pipelined(2, num_stages=2, stage=[0, 1]):
                    for i, j in T.Parallel(64, 64):  # <- here
                        A_f[i, j] = A[i, j] * k
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] += A_f[i, j]
                T.copy(acc, C)
        infer_pipeline(main)
    expect(program, "it writes A_f (local.fragment); besides copies from global into shared "
           "memory, an earlier stage may only write per-thread scalars", "T.Parallel")


def test_an_earlier_copy_of_a_last_stage_result_is_rejected():
    def program():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                row = T.alloc_var("int32")
                row = 0
                T.clear(acc)
                for k in T.Pipelined(2, num_stages=2, stage=[1, 0, 1]):
                    row = k
                    T.copy(A[row, 0], A_s)  # <- here
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] += A_s[i, j]
                T.copy(acc, C)
        infer_pipeline(main)
    expect(program, "T.Pipelined stage= puts this statement in stage 0, before stage 1",
           "T.copy")


# --- the dump and the rewrite ----------------------------------------------------------------
def test_the_dump_shows_the_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_DUMP_IR", str(tmp_path))
    pipelines.cuda_sm80(mha(True))
    names = sorted(p.name for p in tmp_path.iterdir())
    stages = [n.split(".")[2] for n in names]
    assert stages.index("infer_pipeline") < stages.index("pipeline_loops")
    text = (tmp_path / names[stages.index("infer_pipeline")]).read_text()
    assert ("pipeline_order=[2, 0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 12, 11], "
            "pipeline_stage=[0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1])") in text


def test_the_rewrite_issues_in_the_inferred_order():
    text = pipeline_loops(infer_pipeline(mha(False))).script()
    body = text[text.index("for k in T.serial"):text.index("cp_async_wait_all")]
    # wait, barrier, the first gemm (scores), then the refills of K and V for iteration k + 1
    # in their inferred order and one commit (a loop with two gemms issues them after the
    # first), then the rest of the consumers (softmax, the second gemm, ...).
    assert body.index("cp_async_wait<0>") < body.index("syncthreads")
    k_refill = body.index("T.copy(K[")
    v_refill = body.index("T.copy(V[")
    first_gemm = body.index("T.gemm(")
    assert body.index("syncthreads") < first_gemm < k_refill < v_refill < \
        body.index("cp_async_commit") < body.index("T.reduce_max(")
    assert body.count("cp_async_commit") == 1
    assert body.count("syncthreads") == 1
    # With one gemm (GEMM) the refills come right after the barrier.
    text = pipeline_loops(infer_pipeline(gemm())).script()
    body = text[text.index("for k in T.serial"):text.index("cp_async_wait_all")]
    assert body.index("syncthreads") < body.index("T.copy(A[") < body.index("T.gemm(")
    # The scalar producer runs ahead with its copy, in the prologue too.
    text = pipeline_loops(infer_pipeline(index_fed_copy())).script()
    assert text.count("row = Ids[") == 2


@needs_nvcc
@pytest.mark.parametrize("name", ["gemm", "mha", "mha_causal", "mla", "index_fed_copy"])
def test_pipelined_kernels_compile(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    func = {"gemm": gemm, "mha": lambda: mha(False), "mha_causal": lambda: mha(True),
            "mla": mla, "index_fed_copy": index_fed_copy}[name]()
    kernel = tilecraft.compile(func, target="sm_80")
    source = kernel.get_kernel_source()
    assert "cp_async_wait" in source and "cp_async_commit" in source


# --- a body under one `if` ----------------------------------------------------------------
def masked_sum(guard="mask", stages=2, tiles=8, rows=32, **schedule):
    """B = the sum of the row tiles of A that Keep keeps. guard: "mask" (if Keep[k]: copy and
    add), "none" (no if), "else" (an else branch: not run ahead)."""

    @T.prim_func
    def main(A: T.Tensor((tiles * rows, 32), "float32"), Keep: T.Tensor((tiles,), "bool"),
             B: T.Tensor((rows, 32), "float32")):
        with T.Kernel(1, threads=64):
            tile = T.alloc_shared((rows, 32), "float32")
            acc = T.alloc_fragment((rows, 32), "float32")
            T.clear(acc)
            for k in T.Pipelined(tiles, num_stages=stages, **schedule):
                if guard == "none":
                    T.copy(A[k * rows, 0], tile)
                    for i, j in T.Parallel(rows, 32):
                        acc[i, j] += tile[i, j]
                elif guard == "mask":
                    if Keep[k]:
                        T.copy(A[k * rows, 0], tile)
                        for i, j in T.Parallel(rows, 32):
                            acc[i, j] += tile[i, j]
                else:
                    if Keep[k]:
                        T.copy(A[k * rows, 0], tile)
                        for i, j in T.Parallel(rows, 32):
                            acc[i, j] += tile[i, j]
                    else:
                        for i, j in T.Parallel(rows, 32):
                            acc[i, j] -= 1.0
            T.copy(acc, B)

    return main


def test_a_body_under_one_if_runs_its_copies_ahead_under_the_condition():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (loop,) = pipelined_loops(infer_pipeline(masked_sum("mask")))
    assert loop.annotations["pipeline_stage"][0] == 0        # the copy runs ahead
    assert "Keep" in str(loop.annotations["pipeline_guard"])
    (plain,) = pipelined_loops(infer_pipeline(masked_sum("none")))
    assert "pipeline_guard" not in plain.annotations


def test_an_if_with_an_else_is_said_to_run_unpipelined():
    with pytest.warns(UserWarning, match=r"T.Pipelined loop \(num_stages=2\) runs without "
                                         r"pipelining: its whole body is under one `if`"):
        infer_pipeline(masked_sum("else"))


@pytest.mark.parametrize("target", ["emulator:sm_80", "emulator:sm_90a"])
@pytest.mark.parametrize("stages, tiles, rows, seed", [(2, 8, 32, 0), (3, 7, 16, 1),
                                                       (2, 5, 32, 2)])
def test_a_guarded_pipeline_sums_only_the_kept_tiles(target, stages, tiles, rows, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((tiles * rows, 32)).astype(np.float32)
    keep = rng.random(tiles) < 0.5
    keep[seed % tiles] = True
    keep[(seed + 1) % tiles] = False
    want = sum((a[t * rows:(t + 1) * rows] for t in range(tiles) if keep[t]),
               np.zeros((rows, 32), np.float32))
    kernel = tilecraft.compile(masked_sum("mask", stages, tiles, rows), out_idx=[-1],
                               target=target)
    np.testing.assert_allclose(kernel(a, keep), want, rtol=1e-5, atol=1e-5)
    assert "cp_async" in kernel.get_kernel_source()


def test_a_given_schedule_keeps_the_if_whole():
    # order= / stage= name the body's one statement, the `if`: nothing is unwrapped
    (loop,) = pipelined_loops(infer_pipeline(masked_sum("mask", order=[0], stage=[1])))
    assert "pipeline_guard" not in loop.annotations
    assert loop.annotations["pipeline_stage"] == [1]
