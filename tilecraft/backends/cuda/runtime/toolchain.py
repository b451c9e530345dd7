"""The system nvcc, driven by subprocess: CUDA C++ text in, cubin bytes and ptxas facts out.

Device code is built with `nvcc -cubin` and no host code at all (docs/design.md decision 2): that is
about three times faster than building a shared library, and the cubin is loaded with the
driver API by `launcher.py`. `-Xptxas -v` makes ptxas report registers, static shared memory,
spills and stack frame per kernel; those numbers are parsed here so tests and the autotuner can
reject kernels that spill without running them. ptxas also says when it had to wait for each
wgmma before issuing the next (it does so when it cannot prove the accumulator registers safe,
e.g. a wgmma's registers live across a branch on a value it thinks may differ between threads);
that reason is kept too, since such a kernel runs its tensor cores one instruction at a time.

The generated source carries `// file.py:line` comments from the emitter. When nvcc rejects the
source, each diagnostic is shown with the nearest such comment above the offending line, so a
compile error still points at the user's Python.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field

from .... import knobs
from ....errors import TileError
from ....target import parse_arch

INCLUDE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "codegen", "include")

COMMON_FLAGS = ("-O3", "-std=c++17", "-lineinfo")
PTXAS_VERBOSE = ("-Xptxas", "-v")          # makes ptxas print the per-kernel facts parsed below
FAST_MATH_FLAG = "--use_fast_math"

_SOURCE_NAME = "kernel.cu"
_MAX_DIAGNOSTIC_LINES = 60


@dataclass(frozen=True)
class KernelInfo:
    """What ptxas reported for one entry function."""
    name: str
    registers: int = 0
    shared_bytes: int = 0          # static shared memory; dynamic comes at launch
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_frame_bytes: int = 0
    barriers: int = 0
    wgmma_serialized: str = ""     # ptxas's reason when it serialized the wgmma, else empty

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "KernelInfo":
        return cls(**data)


@dataclass(frozen=True)
class CompiledCubin:
    """A cubin with the facts the launcher and the cost model need about its kernels."""
    cubin: bytes
    arch: str
    kernels: dict = field(default_factory=dict)   # entry name -> KernelInfo
    log: str = ""                                 # nvcc/ptxas output, warnings included
    flags: tuple = ()

    @property
    def kernel_names(self) -> tuple:
        return tuple(self.kernels)


# ---- locating nvcc ------------------------------------------------------------------------

def find_nvcc() -> str:
    """Path of nvcc: $CUDA_HOME/bin, $CUDA_PATH/bin, then PATH, then /usr/local/cuda/bin."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            candidates.append(os.path.join(root, "bin", "nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(on_path)
    candidates.append("/usr/local/cuda/bin/nvcc")
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise TileError("nvcc not found: set CUDA_HOME (or CUDA_PATH) to a CUDA toolkit, or put nvcc "
                    "on PATH; looked in " + ", ".join(candidates))


def has_nvcc() -> bool:
    try:
        find_nvcc()
        return True
    except TileError:
        return False


_versions: dict = {}


def nvcc_version() -> str:
    """The toolkit release nvcc reports, e.g. "13.0.88" (part of every cache key)."""
    nvcc = find_nvcc()
    if nvcc not in _versions:
        out = _run([nvcc, "--version"], cwd=None, timeout=60, what="nvcc --version").stdout
        match = re.search(r"release [\d.]+, V([\d.]+)", out)
        _versions[nvcc] = match.group(1) if match else out.strip().splitlines()[-1]
    return _versions[nvcc]


# ---- compiling ----------------------------------------------------------------------------

def gencode(arch: str) -> str:
    """`-gencode` for an arch name; "sm_90a" keeps its suffix in both the virtual and real arch."""
    number, suffix = parse_arch(arch)
    return f"-gencode=arch=compute_{number}{suffix},code=sm_{number}{suffix}"


def nvcc_command(arch: str, *, output_kind: str = "-cubin", include_dirs=(), flags=(),
                 fast_math: bool = False) -> list:
    """The nvcc arguments (after the executable) for a source file named kernel.cu."""
    command = [output_kind, *COMMON_FLAGS, gencode(arch)]
    if output_kind == "-cubin":
        command.extend(PTXAS_VERBOSE)
    for directory in (INCLUDE_DIR, *include_dirs):
        command.append(f"-I{directory}")
    if fast_math:
        command.append(FAST_MATH_FLAG)
    command.extend(flags)
    return command


def compiler() -> str:
    """"nvcc" or "nvrtc": TILECRAFT_COMPILER when set, else nvcc where one is found, else the
    NVRTC library (nvrtc.py); a TileError when there is neither."""
    from . import nvrtc
    asked = knobs.compiler()
    if asked in ("nvcc", "nvrtc"):
        return asked
    if asked:
        raise TileError(f"TILECRAFT_COMPILER={asked!r}: expected 'nvcc' or 'nvrtc'")
    if has_nvcc():
        return "nvcc"
    if nvrtc.available():
        return "nvrtc"
    raise TileError("no CUDA compiler found: neither nvcc (set CUDA_HOME to a CUDA toolkit, or "
                    "put nvcc on PATH) nor the NVRTC library (pip install nvidia-cuda-nvrtc "
                    "nvidia-cuda-runtime)")


def compiler_version() -> str:
    """Which compiler, and which release of it, builds cubins here (part of every cache key)."""
    if compiler() == "nvrtc":
        from . import nvrtc
        return nvrtc.identity()
    return nvcc_version()


def compile_cubin(source: str, arch: str, *, include_dirs=(), flags=(), fast_math: bool = False,
                  timeout: float = 120) -> CompiledCubin:
    """Compile CUDA C++ text to a cubin for one arch with nvcc, or with NVRTC where there is no
    nvcc; raise TileError with the compiler's diagnostics tied to the Python lines."""
    if compiler() == "nvrtc":
        from . import nvrtc
        args = nvrtc.options(arch, (INCLUDE_DIR, *include_dirs), flags, fast_math)
        try:
            output, log = nvrtc.compile_source(source, arch, args)
        except nvrtc.CompileFailed as failed:
            raise TileError(f"NVRTC failed for {arch}:\n"
                            + explain_diagnostics(failed.log, source)) from None
    else:
        args = nvcc_command(arch, include_dirs=include_dirs, flags=flags, fast_math=fast_math)
        output, log = _compile(source, arch, args, "kernel.cubin", timeout)
    return CompiledCubin(cubin=output, arch=arch, kernels=parse_ptxas_info(log), log=log,
                         flags=tuple(args))


def ptx_of(source: str, arch: str, *, include_dirs=(), flags=(), fast_math: bool = False,
           timeout: float = 120) -> str:
    """The PTX nvcc generates for the source (for reading, not for loading)."""
    args = nvcc_command(arch, output_kind="-ptx", include_dirs=include_dirs, flags=flags,
                        fast_math=fast_math)
    output, _ = _compile(source, arch, args, "kernel.ptx", timeout)
    return output.decode()


def _compile(source: str, arch: str, args: list, output_name: str, timeout: float):
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="tilecraft-nvcc-") as work:
        with open(os.path.join(work, _SOURCE_NAME), "w") as f:
            f.write(source)
        command = [nvcc, *args, "-o", output_name, _SOURCE_NAME]
        result = _run(command, cwd=work, timeout=timeout, what=f"nvcc for {arch}")
        log = (result.stdout + result.stderr).strip()
        if result.returncode != 0:
            raise TileError(f"nvcc failed for {arch} (exit {result.returncode}):\n"
                            + explain_diagnostics(log, source))
        with open(os.path.join(work, output_name), "rb") as f:
            return f.read(), log


def _run(command: list, *, cwd, timeout: float, what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TileError(f"{what} took longer than {timeout:g} s and was stopped") from None
    except OSError as err:
        raise TileError(f"{what} could not be started: {err}") from None


# ---- reading nvcc's output ----------------------------------------------------------------

_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized (?:due to )?(.+?) in "
                         r"(?:the )?function '([^']+)'")


def parse_ptxas_info(log: str) -> dict:
    """Entry name -> KernelInfo from `-Xptxas -v` output (non-entry functions are left out)."""
    facts: dict = {}
    serialized: dict = {}  # ptxas may say so before it names the entry
    entry = properties_of = None
    for line in log.splitlines():
        if m := _SERIALIZED.search(line):
            serialized[m.group(2)] = m.group(1)
        elif m := _ENTRY.search(line):
            entry = m.group(1)
            facts.setdefault(entry, {"name": entry})
        elif m := _PROPERTIES.search(line):
            properties_of = m.group(1)
        elif (m := _FRAME.search(line)) and properties_of == entry and entry is not None:
            facts[entry].update(stack_frame_bytes=int(m.group(1)),
                                spill_store_bytes=int(m.group(2)),
                                spill_load_bytes=int(m.group(3)))
        elif (m := _USED.search(line)) and entry is not None:
            rest = m.group(2)
            smem, barriers = _SMEM.search(rest), _BARRIERS.search(rest)
            facts[entry].update(registers=int(m.group(1)),
                                shared_bytes=int(smem.group(1)) if smem else 0,
                                barriers=int(barriers.group(1)) if barriers else 0)
    return {name: KernelInfo(**f, wgmma_serialized=serialized.get(name, ""))
            for name, f in facts.items()}


_DIAGNOSTIC_AT = re.compile(re.escape(_SOURCE_NAME) + r"\((\d+)\)")
_ORIGIN = re.compile(r"//\s*(\S+\.py:\d+(?::\d+)?)")
_NOISE = re.compile(r"^(ptxas info|\s+\d+ bytes stack frame)")


def explain_diagnostics(log: str, source: str) -> str:
    """nvcc's diagnostics minus the ptxas statistics, each tied to its Python origin line."""
    source_lines = source.splitlines()
    out = []
    for line in log.splitlines():
        if _NOISE.match(line):
            continue
        out.append(line.rstrip())
        at = _DIAGNOSTIC_AT.search(line)
        if at:
            origin = _origin_of(source_lines, int(at.group(1)))
            if origin:
                out.append(f"    (generated from {origin})")
    if len(out) > _MAX_DIAGNOSTIC_LINES:
        hidden = len(out) - _MAX_DIAGNOSTIC_LINES
        out = out[:_MAX_DIAGNOSTIC_LINES] + [f"... ({hidden} more lines)"]
    return "\n".join(out) if out else "(nvcc printed nothing)"


def _origin_of(source_lines: list, line_number: int) -> str | None:
    """The nearest `// file.py:line` comment at or above a 1-based source line."""
    for index in range(min(line_number, len(source_lines)) - 1, -1, -1):
        match = _ORIGIN.search(source_lines[index])
        if match:
            return match.group(1)
    return None
