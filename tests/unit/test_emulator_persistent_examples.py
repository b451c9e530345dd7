"""Every example case of test_emulator_examples, compiled by the sm_90a pipeline with the pass
config tl.enable_persistent_tiles and run on the emulator: warp-specialized kernels launch
EMULATED_SMS blocks that each loop over several tiles of the grid, their producer running into
the next tile while the consumers finish the last one, the ring's rounds carried over tiles. The
results match the interpreter and the checker finds nothing (no race between a tile's epilogue
and the next tile's loads, no deadlock from a wrong phase)."""
import pytest

import tilecraft.backends.cuda.emulator as E

import test_emulator_examples as cases

from test_emulator_examples import (  # noqa: F401  (collected again here, persistent)
    test_attention_sink, test_attention_sink_grouped_query, test_blocksparse_attention,
    test_blocksparse_attention_listed,
    test_flash_attention, test_gemm,
    test_mla_decode, test_vertical_slash_sparse_attention)

PERSISTENT = "tl.enable_persistent_tiles"


@pytest.fixture(autouse=True)
def persistent(monkeypatch, request):
    monkeypatch.setattr(cases, "EMULATOR_TARGET", "emulator:sm_90a")
    kinds = []
    original = E.lower

    def lower(func, arch="sm_80", configs=None):
        lowered = original(func, arch, {**(configs or {}), PERSISTENT: True})
        kinds.extend((bool(k.attrs.get("producer_threads")), k.attrs.get("persistent_blocks"))
                     for k in lowered.kernels())
        return lowered
    monkeypatch.setattr(E, "lower", lower)
    yield
    if not kinds:   # the case expected a compile error
        return
    # Every warp-specialized kernel is persistent (one block per emulated SM); kernels whose
    # loops are not pipelined deep enough for a producer stay one tile per block.
    assert all(blocks == (0 if specialized else None)
                         for specialized, blocks in kinds), kinds
    if any(specialized for specialized, _ in kinds):
        RAN_PERSISTENT.add(request.node.originalname)


RAN_PERSISTENT = set()


def test_zz_the_paper_kernels_ran_persistent():
    """Runs after the cases above (pytest keeps file order)."""
    if len(RAN_PERSISTENT) == 0:
        pytest.skip("run with the cases above")
    print(sorted(RAN_PERSISTENT))
    assert {"test_gemm", "test_flash_attention", "test_mla_decode"} <= RAN_PERSISTENT
