"""T.copy(..., eviction_policy=...): evict_first / evict_last ride on TMA loads and stores and on
16-byte cp.async copies as an L2 cache hint; evict_normal is the plain instruction; a copy
lowered to instructions without a hinted form warns at the user's line instead of dropping the
hint unsaid; the emulator runs hinted kernels to the same numbers."""
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import tilecraft.backends.cuda.emulator as E
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines

from test_emulator_checker import line_of
from test_seesaw_warpgroups import SMEM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402

TILES = dict(bm=64, bn=64, bk=32, dtype="float16", accum="float32", threads=128)


def hinted_gemm(eviction, M=96, N=80, K=72, num_stages=3):
    return kernels.gemm(M, N, K, TILES["bm"], TILES["bn"], TILES["bk"], TILES["dtype"],
                        TILES["accum"], threads=TILES["threads"], num_stages=num_stages,
                        eviction=eviction)


def source(func, arch, configs=None):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        text = emit_cuda(pipelines.cuda(func, arch, SMEM if arch == "sm_90a" else 163 * 1024,
                                        configs))[0]
    return text, [f"{w.filename}:{w.lineno}: {w.message}" for w in seen]


def test_tma_loads_and_the_staged_store_carry_the_hint_on_sm90a():
    text, seen = source(hinted_gemm("evict_first"), "sm_90a")
    assert text.count("tc::tma_load_2d_hint(") == 1      # A: one box, 64-byte rows
    assert "tc::tma_load_2d(" in text                    # B asked for nothing
    assert "tc::l2_evict_first()" in text and "l2_evict_last" not in text
    assert "tc::tma_store_2d_hint(" in text and seen == []


def test_cp_async_carries_the_hint_on_sm80_and_the_vector_store_warns():
    text, seen = source(hinted_gemm("evict_last"), "sm_80")
    assert "tc::cp_async_cg_16_hint(" in text and "tc::l2_evict_last()" in text
    assert "tc::cp_async_cg_16(" in text                 # B's copies
    # C leaves in 32-bit pairs from registers: no hinted form, so it says so, at C's line
    assert len(seen) == 1 and "T.copy from C_f (local.fragment) to C (global)" in seen[0]
    line = line_of(kernels.gemm, "T.copy(C_f, C[by * bm, bx * bn], eviction_policy=eviction)")
    assert seen[0].startswith(f"{kernels.__file__}:{line}: ")
    assert "eviction_policy='evict_last'" in seen[0]


def test_evict_normal_is_the_plain_instruction():
    text, seen = source(hinted_gemm("evict_normal"), "sm_90a")
    assert "_hint(" not in text and "l2_evict" not in text and seen == []


def test_a_bad_policy_is_refused_at_its_line():
    with pytest.raises(Exception, match="eviction_policy must be evict_normal, evict_first or"):
        hinted_gemm("evict_sometimes")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_emulator_runs_hinted_copies_to_the_same_numbers(arch):
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (96, 72)).astype(np.float16)
    b = rng.uniform(-1, 1, (72, 80)).astype(np.float16)
    c = np.full((96, 80), np.nan, np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = E.lower(hinted_gemm("evict_first"), arch)
    assert "_hint(" in emit_cuda(lowered)[0]
    assert list(E.run(lowered, [a, b, c])) == []
    np.testing.assert_allclose(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               atol=2e-2, rtol=2e-2)
