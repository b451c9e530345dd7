"""nvcc -> cubin and the kernel cache. Needs nvcc, no GPU."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import pytest

from tilecraft.errors import TileError
from tilecraft.backends.cuda.runtime import toolchain
from tilecraft.backends.cuda.runtime.cache import KernelCache, cache_key
from tilecraft.backends.cuda.runtime.toolchain import CompiledCubin, KernelInfo

if not toolchain.has_nvcc():
    pytest.skip("nvcc is not installed", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
ELF_MAGIC = b"\x7fELF"

KERNELS = textwrap.dedent("""\
    // model.py:10
    extern "C" __global__ void vadd(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ c, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      // model.py:12
      if (i < n) c[i] = a[i] + b[i];
    }

    // model.py:20
    extern "C" __global__ void reverse_tile(const float* __restrict__ x, float* __restrict__ y,
                                            int n) {
      extern __shared__ float tile[];
      __shared__ float scale[32];
      if (threadIdx.x < 32) scale[threadIdx.x] = 2.0f;
      int base = blockIdx.x * blockDim.x;
      int i = base + threadIdx.x;
      tile[threadIdx.x] = i < n ? x[i] : 0.0f;
      __syncthreads();
      int j = base + blockDim.x - 1 - threadIdx.x;
      if (j < n) y[j] = tile[threadIdx.x] * scale[threadIdx.x % 32];
    }
    """)


@pytest.fixture(scope="module", params=["sm_80", "sm_90a"])
def compiled(request):
    return toolchain.compile_cubin(KERNELS, request.param)


def test_cubin_is_an_elf_with_ptxas_facts(compiled):
    assert compiled.cubin[:4] == ELF_MAGIC
    assert set(compiled.kernel_names) == {"vadd", "reverse_tile"}
    for info in compiled.kernels.values():
        assert info.registers > 0
        assert info.spill_bytes == 0 and info.stack_frame_bytes == 0
    assert compiled.kernels["vadd"].shared_bytes == 0
    assert compiled.kernels["reverse_tile"].shared_bytes == 32 * 4  # static only
    assert compiled.kernels["reverse_tile"].barriers == 1


def test_arch_goes_into_gencode(compiled):
    number = compiled.arch[3:]
    assert f"-gencode=arch=compute_{number},code=sm_{number}" in compiled.flags
    assert {"-cubin", "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v"} <= set(compiled.flags)
    assert f"-I{toolchain.INCLUDE_DIR}" in compiled.flags


def test_gencode_names():
    assert toolchain.gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"
    assert toolchain.gencode("sm_89") == "-gencode=arch=compute_89,code=sm_89"
    for bad in ("sm80", "compute_80", "sm_8", "", None):
        with pytest.raises(TileError, match="unknown CUDA arch"):
            toolchain.gencode(bad)


def test_fast_math_and_extra_flags_reach_nvcc():
    args = toolchain.nvcc_command("sm_80", include_dirs=("/opt/x",), flags=("-DFOO=1",),
                                  fast_math=True)
    assert "--use_fast_math" in args and "-I/opt/x" in args and args[-1] == "-DFOO=1"
    assert "--use_fast_math" not in toolchain.nvcc_command("sm_80")


def test_nvcc_version_is_a_release_number():
    version = toolchain.nvcc_version()
    assert version[0].isdigit() and version.count(".") >= 1


def test_ptxas_log_parsing_keeps_entries_only():
    log = textwrap.dedent("""\
        ptxas info    : 0 bytes gmem
        ptxas info    : Function properties for helper
            8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Compiling entry function '_Z4heavyPf' for 'sm_80'
        ptxas info    : Function properties for _Z4heavyPf
            96 bytes stack frame, 40 bytes spill stores, 44 bytes spill loads
        ptxas info    : Used 255 registers, used 1 barriers, 16384 bytes smem, 360 bytes cmem[0]
        ptxas info    : Compiling entry function 'light' for 'sm_80'
        ptxas info    : Function properties for light
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 8 registers, 352 bytes cmem[0]
        """)
    kernels = toolchain.parse_ptxas_info(log)
    assert set(kernels) == {"_Z4heavyPf", "light"}
    assert kernels["_Z4heavyPf"] == KernelInfo("_Z4heavyPf", registers=255, shared_bytes=16384,
                                               spill_store_bytes=40, spill_load_bytes=44,
                                               stack_frame_bytes=96, barriers=1)
    assert kernels["light"] == KernelInfo("light", registers=8)


def test_ptxas_log_parsing_keeps_why_wgmma_were_serialized():
    """ptxas's own words (CUDA 13.0) for a kernel whose wgmma it issues one at a time."""
    log = textwrap.dedent("""\
        ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are \
serialized due to program dependence on compiler-inserted WG.AR in divergent path in the \
function 'seesaw'
        ptxas info    : (C7519) warpgroup.arrive is injected in around line 489 by compiler to \
allow use of registers in GMMA in function 'seesaw'
        ptxas info    : Compiling entry function 'seesaw' for 'sm_90a'
        ptxas info    : Function properties for seesaw
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 168 registers, used 16 barriers
        ptxas info    : Compiling entry function 'pipelined' for 'sm_90a'
        ptxas info    : Used 90 registers, used 2 barriers
        ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are \
serialized due to the presence of Extern calls in the function 'helper'
        """)
    kernels = toolchain.parse_ptxas_info(log)
    assert set(kernels) == {"seesaw", "pipelined"}  # not the helper, which is no entry
    assert kernels["seesaw"].wgmma_serialized == (
        "program dependence on compiler-inserted WG.AR in divergent path")
    assert kernels["seesaw"].registers == 168 and kernels["seesaw"].barriers == 16
    assert kernels["pipelined"].wgmma_serialized == ""  # an injected arrive alone is harmless

    from tilecraft.backends.cuda.runtime.program import warn_serialized_wgmma
    with pytest.warns(UserWarning, match=r"wgmma of seesaw one at a time \(program dependence"):
        warn_serialized_wgmma(kernels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_serialized_wgmma({"pipelined": kernels["pipelined"]})


def test_compile_error_shows_nvcc_line_and_python_origin():
    source = KERNELS + textwrap.dedent("""\
        // model.py:31
        extern "C" __global__ void broken(float* out) {
          out[0] = undefined_value + 1.0f;
        }
        """)
    with pytest.raises(TileError) as caught:
        toolchain.compile_cubin(source, "sm_80")
    message = caught.value.message
    assert "nvcc failed for sm_80" in message
    assert 'identifier "undefined_value" is undefined' in message
    assert "kernel.cu(" in message
    assert "(generated from model.py:31)" in message
    assert "ptxas info" not in message


def test_ptx_of_names_the_target():
    ptx = toolchain.ptx_of(KERNELS, "sm_80")
    assert ".target sm_80" in ptx and ".entry vadd" in ptx


# ---- the cache --------------------------------------------------------------------------------

def fake_cubin(tag: str = "") -> CompiledCubin:
    return CompiledCubin(cubin=ELF_MAGIC + b"fake" + tag.encode(), arch="sm_80",
                         kernels={"vadd": KernelInfo("vadd", registers=12)}, log="ptxas info",
                         flags=("-cubin",))


class Counting:
    def __init__(self, tag=""):
        self.calls, self.tag = 0, tag

    def __call__(self, source, arch, flags):
        self.calls += 1
        return fake_cubin(self.tag)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "kernels"
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(directory))
    monkeypatch.delenv("TILECRAFT_DISABLE_CACHE", raising=False)
    return directory


def test_second_request_is_a_hit(cache_dir):
    cache, compile_fn = KernelCache(), Counting()
    first = cache.get_or_compile("src", "sm_80", ("-O3",), {"ir": "x"}, compile_fn)
    second = cache.get_or_compile("src", "sm_80", ("-O3",), {"ir": "x"}, compile_fn)
    assert compile_fn.calls == 1 and second is first
    fresh = KernelCache().get_or_compile("src", "sm_80", ("-O3",), {"ir": "x"}, compile_fn)
    assert compile_fn.calls == 1 and fresh == first  # from disk, in a new memory cache


@pytest.mark.parametrize("change", [dict(source="src2"), dict(arch="sm_90a"),
                                    dict(flags=("-O3", "--use_fast_math")),
                                    dict(extra={"ir": "y"})])
def test_any_input_change_is_a_miss(cache_dir, change):
    cache, compile_fn = KernelCache(), Counting()
    base = dict(source="src", arch="sm_80", flags=("-O3",), extra={"ir": "x"})
    cache.get_or_compile(**base, compile_fn=compile_fn)
    cache.get_or_compile(**{**base, **change}, compile_fn=compile_fn)
    assert compile_fn.calls == 2
    assert cache_key(**base) != cache_key(**{**base, **change})


def test_an_edited_header_is_a_miss(cache_dir, monkeypatch, tmp_path):
    # Generated sources include the header library by name: editing a header changes nothing
    # in the source text, yet the cubin built from the old header must not be served.
    import shutil
    from tilecraft.backends.cuda.runtime import cache as cache_module, toolchain
    headers = tmp_path / "include"
    shutil.copytree(toolchain.INCLUDE_DIR, headers)
    monkeypatch.setattr(toolchain, "INCLUDE_DIR", str(headers))
    monkeypatch.setattr(cache_module, "_headers", [])
    before = cache_key("src", "sm_90a")
    with open(headers / "tilecraft" / "sync.h", "a") as f:
        f.write("\n// edited\n")
    monkeypatch.setattr(cache_module, "_headers", [])
    assert cache_key("src", "sm_90a") != before


def test_disk_entry_layout(cache_dir):
    KernelCache().get_or_compile("src", "sm_80", (), {"config": [1, 2]}, Counting())
    key = cache_key("src", "sm_80", (), {"config": [1, 2]})
    entry = cache_dir / key[:2] / key
    assert sorted(os.listdir(entry)) == ["kernel.cu", "kernel.cubin", "meta.json"]
    assert (entry / "kernel.cu").read_text() == "src"
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["kernels"]["vadd"]["registers"] == 12 and meta["extra"] == {"config": [1, 2]}
    assert [p for p in (cache_dir / key[:2]).iterdir() if p.name.startswith(".")] == []


def test_real_compile_round_trips_through_disk(cache_dir):
    first = KernelCache().get_or_compile(KERNELS, "sm_80", (), {"case": "roundtrip"})
    again = KernelCache().get_or_compile(KERNELS, "sm_80", (), {"case": "roundtrip"},
                                         compile_fn=pytest.fail)
    assert again == first and again.kernels["vadd"].registers > 0


def test_damaged_entry_is_rebuilt(cache_dir):
    KernelCache().get_or_compile("src", "sm_80", (), None, Counting())
    key = cache_key("src", "sm_80", (), None)
    (cache_dir / key[:2] / key / "kernel.cubin").write_bytes(b"garbage")
    compile_fn = Counting("new")
    rebuilt = KernelCache().get_or_compile("src", "sm_80", (), None, compile_fn)
    assert compile_fn.calls == 1 and rebuilt.cubin.endswith(b"new")
    assert (cache_dir / key[:2] / key / "kernel.cubin").read_bytes() == rebuilt.cubin


def test_disabled_cache_and_bypass_always_compile(cache_dir, monkeypatch):
    compile_fn = Counting()
    cache = KernelCache()
    cache.get_or_compile("src", "sm_80", (), None, compile_fn, bypass=True)
    cache.get_or_compile("src", "sm_80", (), None, compile_fn, bypass=True)
    monkeypatch.setenv("TILECRAFT_DISABLE_CACHE", "1")
    cache.get_or_compile("src", "sm_80", (), None, compile_fn)
    cache.get_or_compile("src", "sm_80", (), None, compile_fn)
    assert compile_fn.calls == 4 and not cache_dir.exists()


def test_clear_forgets_everything(cache_dir):
    cache = KernelCache()
    cache.get_or_compile("src", "sm_80", (), None, Counting())
    (cache_dir / "not-ours.txt").write_text("keep")
    cache.clear()
    assert os.listdir(cache_dir) == ["not-ours.txt"]
    compile_fn = Counting()
    cache.get_or_compile("src", "sm_80", (), None, compile_fn)
    assert compile_fn.calls == 1


def test_extra_must_be_json():
    with pytest.raises(TypeError, match="not JSON data"):
        cache_key("src", "sm_80", (), {"fn": object()})


# Each child process asks for the same entry; WAIT_UNTIL makes concurrent writers overlap.
CHILD = textwrap.dedent("""\
    import sys, time
    from tilecraft.backends.cuda.runtime.cache import KernelCache
    from tilecraft.backends.cuda.runtime.toolchain import CompiledCubin, KernelInfo
    mode, wait_until = sys.argv[1], float(sys.argv[2])

    def compile_fn(source, arch, flags):
        if mode == "must-hit":
            raise SystemExit("compiled although the entry is on disk")
        time.sleep(max(0.0, wait_until - time.time()))
        return CompiledCubin(b"\\x7fELF" + b"child", "sm_80", {"k": KernelInfo("k", 3)}, "", ())

    result = KernelCache().get_or_compile("shared source", "sm_80", (), None, compile_fn)
    assert result.cubin == b"\\x7fELF" + b"child", result.cubin
    print("ok")
    """)


def run_children(modes, cache_dir, wait_until=0.0):
    env = {**os.environ, "TILECRAFT_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, mode, str(wait_until)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for mode in modes]
    return [(child.wait(timeout=120), *child.communicate()) for child in children]


def test_concurrent_writers_leave_one_valid_entry_and_new_process_hits(cache_dir):
    import time
    results = run_children(["write", "write"], cache_dir, wait_until=time.time() + 2.0)
    for code, out, err in results:
        assert code == 0 and out.strip() == "ok", err
    key = cache_key("shared source", "sm_80", (), None)
    shard = cache_dir / key[:2]
    assert [p.name for p in shard.iterdir()] == [key]  # no staging folders left behind
    (code, out, err), = run_children(["must-hit"], cache_dir)
    assert code == 0 and out.strip() == "ok", err
