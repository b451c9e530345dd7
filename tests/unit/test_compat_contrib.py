"""tilecraft.contrib.nvcc and tilecraft.language.fp8: the host-side queries TileLang's example
scripts make before they build a kernel, answered for the arch the kernels compile for."""
import pytest

import tilecraft.language as T
from tilecraft.contrib import nvcc
from tilecraft.errors import TileError
from tilecraft.language.fp8 import determine_fp8_type


def test_compute_version_of_a_named_arch_and_of_the_target_knob(monkeypatch):
    assert nvcc.get_target_compute_version("sm_90a") == "9.0"
    assert nvcc.get_target_compute_version("sm_86") == "8.6"
    monkeypatch.setenv("TILECRAFT_TARGET", "sm_80")
    assert nvcc.get_target_compute_version() == "8.0"
    assert nvcc.parse_compute_version("9.0") == (9, 0)
    assert nvcc.have_tensorcore("8.0") and not nvcc.have_tma()
    monkeypatch.setenv("TILECRAFT_TARGET", "emulator:sm_90a")
    assert nvcc.have_tma() and nvcc.have_bf16("9.0")


def test_compute_version_without_a_gpu_names_the_way_out(monkeypatch):
    monkeypatch.setenv("TILECRAFT_TARGET", "interp")
    from tilecraft.backends.cuda.runtime import device
    if device.has_cuda_device():
        pytest.skip("this machine has a GPU")
    with pytest.raises(TileError, match="set TILECRAFT_TARGET=sm_90a"):
        nvcc.get_target_compute_version()


def test_fp8_type_of_a_format_name():
    assert determine_fp8_type() is T.float8_e4m3fn
    assert determine_fp8_type("e5m2") is T.float8_e5m2
    with pytest.raises(TileError, match="must be 'e4m3' or 'e5m2'"):
        determine_fp8_type("e3m4")


def test_datatype_gives_the_bits_of_a_dtype_name():
    import tilecraft
    assert tilecraft.DataType("float16").bits == 16 and tilecraft.DataType(T.int8).bits == 8
