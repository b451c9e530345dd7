"""alternate_k_direction: the producer of a warp-specialized GEMM loads tile n - 1 - k on odd
waves (the consumers are untouched), in clusters too, every load of the pair by the same parity;
loops whose result depends on the order (attention), and kernels that may share an SM or loop
over tiles keep their order;
tl.disable_k_alternation turns it off. On the emulator (waves of two blocks) a GEMM whose odd
blocks walk K downwards agrees with numpy, ragged K included, and reversing only one operand's
copies is caught."""
import re

import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
import tilecraft.backends.cuda.transforms.alternate_k_direction as akd
from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir.tileop import Copy
from tilecraft.backends.cuda import pipeline as pipelines

OFF = {"tl.disable_k_alternation": True}
PARITY = "tc::launch_wave_parity()"


def source(func, configs=None):
    return emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024, configs))[0]


def gemm(example, M=256, N=256, K=200, **cfg):
    cfg = {**dict(block_M=128, block_N=128, block_K=64, threads=256, num_stages=3), **cfg}
    return underlying(example("gemm").matmul)(M, N, K, **cfg)


def test_the_producer_loads_the_reversed_tile_and_the_consumers_are_unchanged(example):
    on, off = source(gemm(example)), source(gemm(example), OFF)
    loads = [line for line in on.splitlines() if "tma_load_2d" in line]
    assert len(loads) == 3 and all(PARITY in line for line in loads)  # A; B in two boxes
    # 200 / 64 -> 4 iterations: odd waves load tile 3 - k
    assert all("? 3 - k : k)" in line for line in loads)
    assert PARITY not in off
    consumer = lambda src: src[src.index("setmaxnreg_inc"):]  # noqa: E731
    assert consumer(on) == consumer(off)


@pytest.mark.parametrize("what", ["attention", "mla", "no setmaxnreg", "persistent"])
def test_kernels_whose_order_or_wave_is_not_free_keep_their_order(example, what):
    if what == "attention":
        fa = example("flash_attention")
        func, configs = underlying(fa.flash_attention)(1, 2, 256, 64, False, block_M=128,
                                                       block_N=64, num_stages=2,
                                                       threads=256), None
    elif what == "mla":
        m = example("mla_decode")
        func, configs = underlying(m.flash_mla_decode)(2, 64, 1, 200, 128, 64, block_N=64,
                                                        block_H=64, num_stages=2,
                                                        threads=256), None
    elif what == "no setmaxnreg":  # 128 consumer threads: blocks may share an SM
        func, configs = gemm(example, block_M=64, threads=128), None
    else:
        func, configs = gemm(example), {"tl.enable_persistent_tiles": True}
    src = source(func, configs)
    assert "tma_load" in src and PARITY not in src


def test_blocks_of_a_cluster_walk_k_in_the_same_order(example):
    """With a tile multicast over pairs of blocks (here A's, to two blocks side by side), one
    block loads it into both: every load, multicast or not, takes tile 3 - k on odd waves, by
    the one parity that counts waves of clusters (so the pair agrees)."""
    src = source(gemm(example, M=512), {"tl.enable_tma_multicast": True})
    assert "__cluster_dims__" in src
    loads = [line for line in src.splitlines() if "tma_load_2d" in line]
    assert len(loads) == 3 and any("multicast" in line for line in loads)
    assert all(PARITY in line and "? 3 - k : k)" in line for line in loads)


def run_gemm(example, M, N, K):
    func = gemm(example, M, N, K)
    lowered = E.lower(func, "sm_90a")
    rng = np.random.default_rng(4)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = np.full((M, N), np.nan, np.float16)
    reports = list(E.run(lowered, [A, B, C]))
    return reports, C, A.astype(np.float32) @ B.astype(np.float32)


@pytest.mark.parametrize("M, N, K", [(256, 256, 200), (300, 256, 256)])
def test_reversed_waves_agree_with_numpy_on_the_emulator(example, M, N, K):
    # 2 x 2 or 3 x 2 blocks in waves of two: blocks 2 and 3 walk K downwards
    reports, C, want = run_gemm(example, M, N, K)
    assert reports == []
    np.testing.assert_allclose(C.astype(np.float32), want, rtol=2e-2, atol=5e-2)


def test_reversing_one_operand_only_is_caught(example, monkeypatch):
    reverse = akd._reversed_copy

    def only_a(copy: Copy, loop):
        return reverse(copy, loop) if copy.src.buffer.name == "A" else copy
    monkeypatch.setattr(akd, "_reversed_copy", only_a)
    _, C, want = run_gemm(example, 256, 256, 200)
    assert not np.allclose(C.astype(np.float32), want, rtol=2e-2, atol=5e-2)


def test_the_pass_is_listed_and_its_config_known():
    from tilecraft.pass_config import KNOWN, PassConfigKey
    assert PassConfigKey.TL_DISABLE_K_ALTERNATION in KNOWN
    assert re.search(r"\balternate_k_direction\b", open(pipelines.__file__).read())


def test_a_producer_that_loads_by_other_means_keeps_its_order(example):
    """A producer loop with a statement besides its copies and barrier calls (one the rewrite
    would leave in order) is left alone."""
    import dataclasses

    from tilecraft.ir.expr import Call
    from tilecraft.ir.stmt import Evaluate, seq, stmts_of
    from tilecraft.ir.visitor import Mutator, walk
    from tilecraft.backends.cuda.schedule.infer_instructions import infer_instructions
    from tilecraft.passes.infer_pipeline import infer_pipeline
    from tilecraft.backends.cuda.schedule.stage_epilogue import stage_epilogue
    from tilecraft.backends.cuda.schedule.warp_specialize import warp_specialize

    func = stage_epilogue(gemm(example), "sm_90a", None, 227 * 1024)
    func = warp_specialize(infer_pipeline(infer_instructions(func, "sm_90a", None)), "sm_90a")
    asks = lambda f: "tc::launch_wave_parity" in akd.alternate_k_direction(f).script()  # noqa
    assert asks(func)

    class AddToProducer(Mutator):
        def visit_For(self, s):
            if s.annotations.get("warp_specialized") or \
                    not any(isinstance(n, Copy) for n in walk(s.body)):
                return s
            other = Evaluate(Call("tc::some_other_load", (), s.var.dtype) + s.var)
            return dataclasses.replace(s, body=seq(list(stmts_of(s.body)) + [other]))
    assert not asks(AddToProducer().visit(func))
