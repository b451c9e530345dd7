"""The CUDA compiler: nvcc where one is found, else the NVRTC library (runtime/nvrtc.py), or the
one TILECRAFT_COMPILER names; a clear error with neither. Where NVRTC is installed (here or
through TILECRAFT_NVRTC), the example GEMM builds with it for sm_80 and sm_90a as with nvcc,
its ptxas report read the same way, and a compile error points at the Python line."""
import importlib.util
from pathlib import Path

import pytest

import tilecraft
from tilecraft.backends.cuda.runtime import cache, nvrtc, toolchain
from tilecraft.errors import TileError

ROOT = Path(__file__).resolve().parents[2]
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")


def _gemm(arch):
    spec = importlib.util.spec_from_file_location("gemm_for_nvrtc", ROOT / "examples" / "gemm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.matmul.__wrapped__(512, 384, 256, block_M=128, block_N=128, block_K=64,
                                     num_stages=3, threads=256 if arch == "sm_90a" else 128)


def test_the_compiler_is_nvcc_then_nvrtc(monkeypatch):
    monkeypatch.delenv("TILECRAFT_COMPILER", raising=False)
    monkeypatch.setattr(toolchain, "has_nvcc", lambda: True)
    monkeypatch.setattr(nvrtc, "available", lambda: True)
    assert toolchain.compiler() == "nvcc"
    monkeypatch.setattr(toolchain, "has_nvcc", lambda: False)
    assert toolchain.compiler() == "nvrtc"
    monkeypatch.setattr(nvrtc, "available", lambda: False)
    with pytest.raises(TileError, match="no CUDA compiler found.*nvidia-cuda-nvrtc"):
        toolchain.compiler()
    monkeypatch.setenv("TILECRAFT_COMPILER", "nvrtc")
    assert toolchain.compiler() == "nvrtc"
    monkeypatch.setenv("TILECRAFT_COMPILER", "clang")
    with pytest.raises(TileError, match="expected 'nvcc' or 'nvrtc'"):
        toolchain.compiler()


def test_nvrtc_options_follow_the_nvcc_build():
    opts = nvrtc.options("sm_90a", [toolchain.INCLUDE_DIR], ["-DX=1"], True)
    assert opts[:4] == ["--gpu-architecture=sm_90a", "-std=c++17", "-lineinfo",
                        "--ptxas-options=-v"]
    assert f"-I{toolchain.INCLUDE_DIR}" in opts and "--use_fast_math" in opts
    assert opts[-1] == "-DX=1"


def test_a_missing_library_is_named(monkeypatch):
    monkeypatch.setattr(nvrtc, "library", lambda: None)
    with pytest.raises(TileError, match="pip install nvidia-cuda-nvrtc"):
        nvrtc.version()


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_gemm_builds_with_nvrtc(monkeypatch, tmp_path, arch):
    monkeypatch.setenv("TILECRAFT_COMPILER", "nvrtc")
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    kernel = tilecraft.compile(_gemm(arch), out_idx=[-1], target=arch)
    assert kernel.n_regs > 0 and kernel.n_spills == 0
    assert "NVRTC" not in kernel.get_kernel_source()


@needs_nvrtc
def test_cache_keys_tell_the_compilers_apart(monkeypatch):
    monkeypatch.setenv("TILECRAFT_COMPILER", "nvrtc")
    with_nvrtc = cache.cache_key("src", "sm_90a")
    assert toolchain.compiler_version().startswith("nvrtc ")
    if toolchain.has_nvcc():
        monkeypatch.setenv("TILECRAFT_COMPILER", "nvcc")
        assert cache.cache_key("src", "sm_90a") != with_nvrtc


@needs_nvrtc
def test_an_nvrtc_error_points_at_the_python_line(monkeypatch):
    monkeypatch.setenv("TILECRAFT_COMPILER", "nvrtc")
    source = ('#include "tilecraft/tc.h"\n'
              'extern "C" __global__ void k(float* x) {\n'
              '  // kernel_file.py:42\n'
              '  x[0] = undefined_name;\n'
              '}\n')
    with pytest.raises(TileError) as caught:
        toolchain.compile_cubin(source, "sm_80")
    text = str(caught.value)
    assert "NVRTC failed for sm_80" in text and "undefined_name" in text
    assert "kernel_file.py:42" in text


def test_a_gpu_before_ampere_is_refused_by_name(monkeypatch):
    from tilecraft import placement
    from tilecraft.backends.cuda.runtime import device
    monkeypatch.setattr(placement, "_gpu_available", lambda: True)
    monkeypatch.setattr(device, "current_arch", lambda d=None: "sm_75")
    for target in ("auto", "cuda"):
        with pytest.raises(TileError, match="the GPU here is sm_75.*before Ampere"):
            placement.resolve(target)
    monkeypatch.setattr(device, "current_arch", lambda d=None: "sm_90a")
    assert placement.resolve("auto") == ("cuda", "sm_90a")


def test_auto_says_when_a_gpu_goes_unused(monkeypatch):
    import sys
    from tilecraft import placement
    from tilecraft.backends.cuda.runtime import device
    monkeypatch.setattr(device, "has_cuda_device", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", None)      # import torch fails
    with pytest.warns(RuntimeWarning, match="has an NVIDIA GPU, but torch is not installed"):
        assert placement.resolve("auto") == ("interp", None)
