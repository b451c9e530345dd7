"""The pass configs and jit options that reach nvcc: compile_flags and
TL_DEVICE_COMPILE_FLAGS are on its command line, TL_PTXAS_REGISTER_USAGE_LEVEL goes to ptxas,
TL_ENABLE_PTXAS_VERBOSE_OUTPUT prints ptxas's report, cuda.kernels_output_dir and
debug_root_path receive the CUDA source, verbose names the registers. Needs nvcc, no GPU."""
import pytest

from tilecraft.backends.cuda.runtime import has_nvcc

if not has_nvcc():
    pytest.skip("nvcc is not installed", allow_module_level=True)

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft import PassConfigKey  # noqa: E402
from tilecraft.errors import TileError  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    # nvcc must run: a program cached by an earlier run would not show its flags' effects
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))


def scale():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = T.exp(A[bx * 128 + i]) * 2
    return main


def test_flags_reach_nvcc():
    with pytest.raises(TileError, match="nvcc failed"):
        tilecraft.compile(scale(), target="sm_80", compile_flags=["--no-such-nvcc-flag"])
    with pytest.raises(TileError, match="nvcc failed"):
        tilecraft.compile(scale(), target="sm_80", pass_configs={
            PassConfigKey.TL_DEVICE_COMPILE_FLAGS: "--no-such-nvcc-flag"})
    kernel = tilecraft.compile(scale(), target="sm_80", compile_flags="-DUNUSED=1 -lineinfo",
                               pass_configs={PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL: 3})
    assert kernel.n_regs > 0


def test_the_command_line(monkeypatch):
    from tilecraft.backends.cuda.runtime import program
    seen = []
    real = program.compile_cubin

    def spy(source, arch, flags=()):
        seen.append(list(flags))
        return real(source, arch, flags=flags)

    monkeypatch.setattr(program, "compile_cubin", spy)
    tilecraft.compile(scale(), target="sm_80", compile_flags=["-DTC_TEST_B=2"], pass_configs={
        PassConfigKey.TL_DISABLE_FAST_MATH: False,
        PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL: 4,
        PassConfigKey.TL_DEVICE_COMPILE_FLAGS: "-DTC_TEST_A=1"})
    assert seen == [["--use_fast_math", "-Xptxas", "--register-usage-level=4", "-DTC_TEST_A=1",
                     "-DTC_TEST_B=2"]]
    tilecraft.compile(scale(), target="sm_80", pass_configs={
        PassConfigKey.TL_DISABLE_FAST_MATH: True})
    assert seen[-1] == []


def test_ptxas_report_and_sources(tmp_path, capsys):
    out, dbg = tmp_path / "cu", tmp_path / "dbg"
    kernel = tilecraft.compile(scale(), target="sm_80", verbose=True, debug_root_path=dbg,
                               pass_configs={PassConfigKey.TL_ENABLE_PTXAS_VERBOSE_OUTPUT: True,
                                             PassConfigKey.CUDA_KERNELS_OUTPUT_DIR: str(out)})
    printed = capsys.readouterr()
    assert "ptxas info" in printed.out and "Used" in printed.out
    assert "compiled main for sm_80 in" in printed.err and \
        f"{kernel.n_regs} registers" in printed.err
    for folder in (out, dbg):
        assert (folder / "main.cu").read_text() == kernel.get_kernel_source()
    # made again from the cache, it still reports what ptxas said
    tilecraft.compile(scale(), target="sm_80",
                      pass_configs={PassConfigKey.TL_ENABLE_PTXAS_VERBOSE_OUTPUT: True})
    assert "ptxas info" in capsys.readouterr().out
