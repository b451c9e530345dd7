"""stage_epilogue (sm_90a): a gemm accumulator stored to global memory after the pipelined loop goes
through a shared tile in the loop's dead bytes (16-byte coalesced global stores), never growing
the kernel's shared memory; where the loop's tiles are too small to hold it, or with
tl.disable_epilogue_staging, the accumulator is stored from registers. The emulator tests of the
GEMM examples run the staged epilogue against numpy."""
import os
import sys

import pytest

from tilecraft.carver.recommend import underlying
from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.backends.cuda import pipeline as pipelines

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from gemm import matmul  # noqa: E402

OFF = {"tl.disable_epilogue_staging": True}


def _lower(arch, configs=None, **cfg):
    return pipelines.cuda(underlying(matmul)(1000, 768, 520, **cfg), arch, 227 * 1024, configs)


def _smem(func):
    return max(k.attrs["smem_bytes"] for k in func.kernels())


@pytest.mark.parametrize("cfg", [
    dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=4),
    dict(block_M=128, block_N=128, block_K=64, threads=256, num_stages=2, swizzle_panel=4)])
def test_accumulator_goes_through_the_dead_ring(cfg):
    arch = "sm_90a"
    staged, plain = _lower(arch, **cfg), _lower(arch, OFF, **cfg)
    text, plain_text = emit_cuda(staged)[0], emit_cuda(plain)[0]
    assert "C_local_staged" in text and "tc::tma_store_2d(" in text
    # without TMA stores the staged tile leaves in 16-byte stores by every thread
    threads = emit_cuda(_lower(arch, {"tl.disable_tma_store": True}, **cfg))[0]
    assert "C_local_staged" in threads and "tc::st_global_128(" in threads
    assert "C_local_staged" not in plain_text
    assert _smem(staged) == _smem(plain)  # the staging tile took the ring's bytes


def test_no_staging_when_the_ring_is_smaller_than_the_tile():
    # Ring: (128x16 + 16x128) halves x 2 stages = 16 KiB; C tile: 128x128 halves = 32 KiB.
    func = _lower("sm_90a", block_M=128, block_N=128, block_K=16, threads=128, num_stages=2)
    assert "C_local_staged" not in emit_cuda(func)[0]


def test_mma_sync_path_stores_from_registers():
    func = _lower("sm_80", block_M=128, block_N=128, block_K=32, threads=128, num_stages=3)
    assert "C_local_staged" not in emit_cuda(func)[0]
