"""TileLang's `carver.arch` (CUDA, get_arch, the arch predicates, the `driver` device queries)
and `tools.Analyzer`, as its examples use them: described from tilecraft's GPU table without
a GPU, from the device where there is one (faked here), and refused for what is not an NVIDIA
GPU."""
import pytest

import tilecraft.language as T
from tilecraft.backends.cuda.runtime import device as dev
from tilecraft.backends.cuda.runtime.device import DeviceProperties
from tilecraft.carver import arch
from tilecraft.carver.arch import CUDA, driver
from tilecraft.errors import TileError
from tilecraft.target import H100
from tilecraft.tools import AnalysisResult, Analyzer


def test_named_gpus_need_no_device():
    h100 = CUDA("nvidia/nvidia-h100")
    assert h100.target is H100 and repr(h100) == "CUDA(h100)"
    assert (h100.sm_version, h100.compute_capability, h100.compute_max_core) == (90, "90", 132)
    assert h100.smem_cap == 227 * 1024 and h100.reg_cap == 65536 and h100.warp_size == 32
    assert h100.l2_cache_size_bytes == 50 * 1024 * 1024 and h100.platform == "CUDA"
    assert CUDA("nvidia/geforce-rtx-4090").sm_version == 89
    assert CUDA("cuda -arch=sm_80").target.name == "a100"
    assert CUDA("h200").target.name == "h200"
    assert arch.is_hopper_arch(h100) and not arch.is_ampere_arch(h100)
    a100 = arch.get_arch("a100")
    assert arch.is_ampere_arch(a100) and arch.has_mma_support(a100)
    assert arch.is_tensorcore_supported_precision("float16", "float32", a100)
    assert not arch.is_tensorcore_supported_precision("float8_e4m3", "float32", a100)
    assert arch.is_tensorcore_supported_precision(T.float8_e4m3, "float32", h100)


def test_what_is_not_an_nvidia_gpu_is_refused():
    with pytest.raises(TileError, match="unknown GPU"):
        CUDA("v100")
    with pytest.raises(TileError, match="CDNA: AMD CDNA devices are not supported"):
        arch.get_arch("hip")
    with pytest.raises(TileError, match="CPU: CPU devices are not supported"):
        arch.CPU("llvm")


FAKE = DeviceProperties(name="NVIDIA H100 PCIe", arch="sm_90a", compute_capability=(9, 0),
                        sm_count=114, max_threads_per_block=1024,
                        smem_per_block_optin=227 * 1024, smem_per_sm=228 * 1024,
                        registers_per_sm=65536, registers_per_block=65536,
                        l2_bytes=50 * 1024 * 1024, clock_khz=1755000,
                        memory_clock_khz=1593000, memory_bus_bits=5120)


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(dev, "has_cuda_device", lambda: True)
    monkeypatch.setattr(dev, "device_properties", lambda device=None: FAKE)
    attributes = {8: 48 * 1024, 108: 44 * 1024 * 1024}
    monkeypatch.setattr(dev, "device_attribute", lambda which, device=None: attributes[which])


def test_the_current_gpu(fake_gpu):
    here = arch.auto_infer_current_arch()
    assert here.compute_max_core == 114 and here.sm_version == 90   # the device's SM count
    assert here.target.smem_per_block == H100.smem_per_block      # the table's per-arch facts
    assert driver.get_num_sms() == 114 and driver.get_device_name() == "NVIDIA H100 PCIe"
    assert driver.get_shared_memory_per_block() == 48 * 1024
    assert driver.get_shared_memory_per_block(format="kb") == 48
    assert driver.get_max_dynamic_shared_size_bytes(format="kb") == 228
    assert driver.get_persisting_l2_cache_max_size() == 44 * 1024 * 1024
    assert driver.get_registers_per_block() == 65536
    assert driver.get_device_attribute(8) == 48 * 1024
    assert driver.get_cuda_device_properties() is FAKE
    with pytest.raises(TileError, match="format must be one of bytes, kb, mb"):
        driver.get_shared_memory_per_block(format="gb")


def test_no_gpu_no_current_arch(monkeypatch):
    monkeypatch.setattr(dev, "has_cuda_device", lambda: False)
    assert driver.get_cuda_device_properties() is None
    with pytest.raises(TileError, match="CUDA\\('cuda'\\) describes the current GPU, and there "
                                        "is none here"):
        CUDA("cuda")
    with pytest.raises(TileError, match="no CUDA device"):
        driver.get_num_sms()


def test_analyzer_counts_a_gemm(example):
    matmul = example("gemm").matmul   # the GEMM of examples/gemm.py: 128 x 128 tiles
    M = N = K = 1024
    result = Analyzer.analysis(matmul.get_tir(M, N, K), CUDA("h100"))
    assert isinstance(result, AnalysisResult)
    # the gemm's 2 M N K, plus one conversion per output element (float32 -> float16)
    assert result.total_flops == 2 * M * N * K + M * N
    # A and B are read once per block column / row (8 of each), C written once
    assert result.total_global_bytes == 8 * M * K * 2 + 8 * K * N * 2 + M * N * 2
    assert result.estimated_time > result.total_flops / 989.4e12   # above the datasheet peak
    assert result.tflops == pytest.approx(result.total_flops / result.estimated_time / 1e12)
    assert result.bandwidth_GBps == H100.hbm_bw / 1e9
    # halving the tile doubles the reloads of A and B
    small = Analyzer.analysis(matmul.get_tir(M, N, K, block_M=64, block_N=64), "h100")
    assert small.total_global_bytes == 16 * M * K * 2 + 16 * K * N * 2 + M * N * 2
    with pytest.raises(TileError, match="takes a specialized @T.prim_func"):
        Analyzer.analysis(matmul, "h100")
    with pytest.raises(TileError, match="unknown target"):
        Analyzer.analysis(matmul.get_tir(M, N, K), "tpu")
