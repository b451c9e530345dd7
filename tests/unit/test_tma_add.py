"""T.atomic_add(global_region, shared_tile, use_tma=True): on sm_90a the tile is added by TMA
stores that add (tc::tma_store_add_Nd, one per box, issued by one thread); where TMA cannot do it
(another target, TMA stores turned off, unlike element types) the compiler says why at the
user's line and runs element-wise atomics (16-bit floats in pairs, one f16x2 / bf16x2 atomic per
two elements, where rows are made of whole pairs). Both run on the emulator to C0 + A @ B for the
split-K GEMM example, including splits that reach past K or lie wholly beyond it."""
import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
import tilecraft.language as T
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines

from test_emulator_checker import line_of
from test_seesaw_warpgroups import SMEM

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ex_gemm_splitk", ROOT / "examples" / "gemm.py")
gemm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gemm)

TILES = dict(block_M=64, block_N=64, block_K=32, num_stages=2, threads=128)


def lowered(func, arch, configs=None):
    """(the thread-level program, its CUDA source, the warnings the compile gave)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        program = pipelines.cuda(func, arch, SMEM if arch == "sm_90a" else 163 * 1024, configs)
    return program, emit_cuda(program)[0], [f"{w.filename}:{w.lineno}: {w.message}"
                                             for w in seen]


def splitk(M=200, N=136, K=328, split_k=3):
    return gemm.matmul_splitk.__wrapped__(M, N, K, split_k=split_k, **TILES)


def test_sm90a_adds_the_tile_with_tma_stores():
    _, text, seen = lowered(splitk(), "sm_90a")
    assert text.count("tc::tma_store_add_2d(") == 1     # C_shared: one 128-byte box
    assert "tc::atomic_add(" not in text and seen == []
    # published to the async proxy first, read to the end before the block exits
    assert text.index("tc::fence_proxy_async_shared()") < text.index("tc::tma_store_add_2d(")
    assert text.rindex("tc::tma_store_wait<0>()") > text.index("tc::tma_store_add_2d(")


def test_the_choice_is_in_the_ir_dump():
    from tilecraft.backends.cuda.schedule.infer_instructions import infer_instructions
    chosen = infer_instructions(splitk(), "sm_90a").script()
    assert "T.atomic_add(" in chosen and "use_tma=True, instruction='tma'" in chosen


def test_sm80_warns_at_the_users_line_and_runs_element_atomics():
    _, text, seen = lowered(splitk(), "sm_80")
    assert "tc::atomic_add_x2(" in text and "tma_store_add" not in text
    line = line_of(gemm.matmul_splitk, "T.atomic_add(C[by * block_M, bx * block_N], C_shared")
    assert len(seen) == 1 and seen[0].startswith(f"{gemm.__file__}:{line}: ")
    assert "runs as element-wise atomics, not TMA (use_tma=True): TMA stores need sm_90a" \
        in seen[0]


def test_tma_stores_turned_off_keep_element_atomics():
    _, text, seen = lowered(splitk(), "sm_90a", {"tl.disable_tma_store": True})
    assert "tc::atomic_add_x2(" in text and "tma_store_add" not in text and len(seen) == 1


def test_rows_of_odd_length_add_element_by_element():
    _, text, _ = lowered(splitk(N=135), "sm_80")
    assert "tc::atomic_add(" in text and "tc::atomic_add_x2(" not in text


def test_unlike_element_types_are_named():
    @T.prim_func
    def add_f32_into_f16(C: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tile = T.alloc_shared((64, 64), "float32")
            T.fill(tile, 1.0)
            T.atomic_add(C[0, 0], tile, use_tma=True)
    _, text, seen = lowered(add_f32_into_f16, "sm_90a")
    assert "tma_store_add" not in text and len(seen) == 1
    assert "the tile tile is float32 and C is float16: TMA adds like to like" in seen[0]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("M, N, K, split_k", [(200, 136, 328, 3),   # the last split past K
                                              (72, 40, 40, 4),       # splits wholly past K
                                              (70, 35, 64, 2)])      # odd rows: no pairs
def test_the_emulator_adds_into_c(arch, M, N, K, split_k):
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = rng.uniform(-1, 1, (M, N)).astype(np.float16)
    want = c.astype(np.float32) + a.astype(np.float32) @ b.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = E.lower(splitk(M, N, K, split_k), arch)
    tma = arch == "sm_90a" and N % 8 == 0          # TMA needs 16-byte row strides
    assert ("tma_store_add" in emit_cuda(program)[0]) == tma
    assert list(E.run(program, [a, b, c])) == []
    np.testing.assert_allclose(c.astype(np.float32), want, atol=2e-2, rtol=2e-2)
