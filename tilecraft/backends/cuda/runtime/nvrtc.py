"""NVRTC, the CUDA runtime compiler library, driven through ctypes: CUDA C++ text in, cubin bytes
and ptxas facts out, in this process, for machines that have no nvcc.

A GPU machine with torch installed from its CUDA wheels has the library already (the
`nvidia-cuda-nvrtc` wheel torch depends on; `pip install nvidia-cuda-nvrtc` otherwise), and
the CUDA headers the generated code includes (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) in the
`nvidia-cuda-runtime` wheel beside it; a CUDA toolkit provides both too. nvcc stays the compiler
where it is found (toolchain.compiler). The options are nvcc's for the same build: the target
arch (a cubin, no PTX), C++17, line info, ptxas's verbose report (parsed as nvcc's is), fast
math when asked, the user's compile_flags as given.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

from .... import knobs
from ....errors import TileError

_SOURCE_NAME = b"kernel.cu"
_state: dict = {}


def _site_dirs() -> list:
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]


def _library_candidates() -> list:
    found = []
    explicit = knobs.nvrtc_library()
    if explicit:
        return [explicit]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            found += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")), reverse=True)
    for site in _site_dirs():
        for pattern in ("nvidia/cu*/lib/libnvrtc.so.*", "nvidia/cuda_nvrtc/lib/libnvrtc.so.*"):
            found += sorted(glob.glob(os.path.join(site, pattern)), reverse=True)
    found += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    return [f for f in found if "builtins" not in os.path.basename(f)]


def library():
    """The loaded NVRTC library, or None where none can be loaded."""
    if "lib" not in _state:
        _state["lib"] = _state["path"] = None
        for candidate in _library_candidates():
            try:
                _state["lib"] = ctypes.CDLL(candidate)
                _state["path"] = candidate
                break
            except OSError:
                continue
    return _state["lib"]


def available() -> bool:
    return library() is not None


def version() -> str:
    """"major.minor" of the loaded library (part of every cache key)."""
    lib = _checked_library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return f"{major.value}.{minor.value}"


def identity() -> str:
    """The release and the library file, as a cache key part."""
    release = version()         # loads the library, setting its path
    path = _state["path"]
    return f"nvrtc {release} {os.path.realpath(path) if os.path.exists(path) else path}"


def cuda_include_dirs() -> list:
    """Folders holding cuda_fp16.h: a toolkit's include folder, or the CUDA runtime wheel's."""
    dirs = []
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            dirs.append(os.path.join(root, "include"))
    for site in _site_dirs():
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "include")))
        dirs.append(os.path.join(site, "nvidia", "cuda_runtime", "include"))
    return [d for d in dirs if os.path.exists(os.path.join(d, "cuda_fp16.h"))][:1]


def options(arch: str, include_dirs, flags, fast_math: bool) -> list:
    """NVRTC's options for the build nvcc_command describes."""
    out = [f"--gpu-architecture={arch}", "-std=c++17", "-lineinfo", "--ptxas-options=-v"]
    out += [f"-I{d}" for d in (*include_dirs, *cuda_include_dirs())]
    if fast_math:
        out.append("--use_fast_math")
    out += list(flags)
    return out


class CompileFailed(Exception):
    """The source did not compile; log: NVRTC's diagnostics."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


def compile_source(source: str, arch: str, opts: list) -> tuple:
    """(cubin bytes, log) of source built with NVRTC; CompileFailed with the log when it does
    not compile, TileError when the library itself fails."""
    lib = _checked_library()
    program = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), _SOURCE_NAME,
                                       0, None, None), "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in opts]
        array = (ctypes.c_char_p * len(encoded))(*encoded)
        status = lib.nvrtcCompileProgram(program, len(encoded), array)
        log = _log(lib, program)
        if status != 0:
            raise CompileFailed(log or _error_name(lib, status))
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return cubin.raw[:size.value], log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def _log(lib, program) -> str:
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)) != 0 or size.value <= 1:
        return ""
    text = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, text)
    return text.value.decode(errors="replace").strip()


def _checked_library():
    lib = library()
    if lib is None:
        raise TileError("NVRTC is not installed: pip install nvidia-cuda-nvrtc (or install a "
                        "CUDA toolkit, whose nvcc tilecraft then uses)")
    return lib


def _error_name(lib, status: int) -> str:
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    name = lib.nvrtcGetErrorString(status)
    return name.decode() if name else f"error {status}"


def _check(lib, status: int, what: str):
    if status != 0:
        raise TileError(f"{what} failed: {_error_name(lib, status)}")
