"""Every example case of test_emulator_examples, compiled by the sm_90a pipeline instead of the
sm_80 one and run on the emulator: where a gemm fits wgmma it runs on wgmma, and pipelined
loops whose copies TMA can do become warp-specialized (the others keep mma.sync / cp.async).
The results match the interpreter and the checker finds nothing.

They compile for target="emulator:sm_90a"."""
import pytest

import tilecraft.backends.cuda.emulator as E

import test_emulator_examples as cases

from test_emulator_examples import (  # noqa: F401  (collected again here, on sm_90a)
    test_attention_sink, test_attention_sink_grouped_query, test_blocksparse_attention,
    test_blocksparse_attention_listed,
    test_chunk_gated_delta_net, test_conv2d,
    test_dequant_gemm, test_dequant_gemv, test_dequant_gemv_fast, test_flash_attention,
    test_flash_attention_bwd,
    test_gemm, test_mla_decode, test_vertical_slash_sparse_attention)


@pytest.fixture(autouse=True)
def sm90a(monkeypatch):
    monkeypatch.setattr(cases, "EMULATOR_TARGET", "emulator:sm_90a")
    lowered = []
    original = E.lower

    def lower(func, arch="sm_80", configs=None):
        lowered.append(arch)
        return original(func, arch, configs)
    monkeypatch.setattr(E, "lower", lower)
    yield
    assert lowered and set(lowered) == {"sm_90a"}, lowered
