"""The options of tilecraft.jit / tilecraft.compile besides out_idx and target, with TileLang's
names: what each does here, or a TileError where it cannot be honoured.

- pass_configs: checked key by key (pass_config.py).
- compile_flags: nvcc flags (a string, split as a shell would, or a list), added after those of
  PassConfigKey.TL_DEVICE_COMPILE_FLAGS; they travel in that key, so the autotuner's compile
  workers build with them too. nvcc runs for GPU targets only. A flag that sets the GPU or
  the output kind (-arch, -o, ...) is refused: choose the GPU with target=.
- a program's own T.annotate_pass_configs / T.annotate_compile_flags: under the caller's
  (with_program_options).
- verbose: one line per compiled kernel on stderr (where it runs, the time it took; on a GPU
  target its registers and shared memory).
- debug_root_path: each compiled kernel's source is written into this folder
  (`<kernel>.cu` for a GPU target; the tile IR, `<kernel>.tir.py`, on the interpreter; the
  lowered IR, `<kernel>.lowered.py`, on the emulator).
- execution_backend: None or "auto": kernels launch through the CUDA driver API; TileLang's
  other launchers ("tvm_ffi", "cython", "nvrtc", "ctypes", ...) are refused.
- target_host: None: tilecraft generates no host code, so none other can be honoured.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from .errors import TileError
from .ir.annotations import FUNC_COMPILE_FLAGS, FUNC_PASS_CONFIGS
from .pass_config import PassConfigKey, check_compile_flags, check_pass_configs
from .pass_config_table import split_flags

_OTHER_LAUNCHERS = ("tvm_ffi", "cython", "nvrtc", "ctypes", "dlpack", "torch", "cutedsl")


@dataclass(frozen=True)
class Reporting:
    """What to tell about each compiled kernel: verbose, debug_root_path."""
    verbose: bool = False
    debug_root_path: str | None = None


_FLAGS_KEY = PassConfigKey.TL_DEVICE_COMPILE_FLAGS.value


def checked_configs(pass_configs, compile_flags=None) -> dict:
    """pass_configs checked, with compile_flags appended to TL_DEVICE_COMPILE_FLAGS."""
    configs = check_pass_configs(pass_configs)
    extra = list(check_compile_flags(compile_flags))
    if extra:
        configs[_FLAGS_KEY] = split_flags(configs.get(_FLAGS_KEY)) + extra
    return configs


def with_program_options(func, configs: dict) -> dict:
    """The caller's checked configs under the program's own (T.annotate_pass_configs and
    T.annotate_compile_flags): a config the caller gives wins; the program's flags come
    first on nvcc's line, the caller's after them."""
    own = func.attrs.get(FUNC_PASS_CONFIGS) or {}
    own_flags = list(func.attrs.get(FUNC_COMPILE_FLAGS) or ())
    if not own and not own_flags:
        return configs
    merged = {**check_pass_configs(own), **configs}
    flags = split_flags(own.get(_FLAGS_KEY)) + own_flags + split_flags(configs.get(_FLAGS_KEY))
    if flags:
        merged[_FLAGS_KEY] = flags
    return merged


def checked_reporting(execution_backend=None, target_host=None, verbose=False,
                      debug_root_path=None) -> Reporting:
    """The host-side options checked (TileError for one that cannot be honoured)."""
    if execution_backend not in (None, "auto"):
        if execution_backend in _OTHER_LAUNCHERS:
            raise TileError(f"execution_backend={execution_backend!r} is not supported: "
                            "tilecraft launches kernels through the CUDA driver API from "
                            "Python, not through TileLang's launchers; leave it out or pass "
                            "'auto'")
        raise TileError(f"unknown execution_backend {execution_backend!r}; tilecraft takes "
                        "None or 'auto'")
    if target_host is not None:
        raise TileError(f"target_host={target_host!r} is not supported: tilecraft generates "
                        "no host code (kernels launch through the CUDA driver API); leave it "
                        "out")
    if verbose is not None and not isinstance(verbose, bool):
        raise TileError(f"verbose takes True or False, got {verbose!r}")
    if debug_root_path is not None and not isinstance(debug_root_path, (str, os.PathLike)):
        raise TileError(f"debug_root_path takes a folder path, got {debug_root_path!r}")
    return Reporting(bool(verbose), None if debug_root_path is None else
                     os.fspath(debug_root_path))


def _write(folder: str, name: str, text: str, what: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    except OSError as e:
        raise TileError(f"{what}: cannot write {name} into {folder!r}: {e.strerror}") from None


def _suffix(kernel) -> str:
    return {"cuda": ".cu", "interp": ".tir.py", "emulator": ".lowered.py"}[kernel.backend]


def report(kernel, reporting: Reporting, configs: dict, seconds: float) -> None:
    """Tell about a kernel just compiled, as the options ask."""
    name = kernel.func.name
    if reporting.debug_root_path is not None:
        _write(reporting.debug_root_path, name + _suffix(kernel), kernel.get_kernel_source(),
               "debug_root_path")
    output_dir = configs.get(PassConfigKey.CUDA_KERNELS_OUTPUT_DIR.value)
    if output_dir and kernel.program is not None:
        _write(output_dir, name + ".cu", kernel.program.source, "cuda.kernels_output_dir")
    if reporting.verbose:
        where = kernel.arch if kernel.backend == "cuda" else \
            f"the emulator ({kernel.arch})" if kernel.backend == "emulator" else "the interpreter"
        facts = f": {kernel.n_regs} registers, {kernel.shared_memory} bytes of shared memory" \
            if kernel.program is not None else ""
        print(f"tilecraft: compiled {name} for {where} in {seconds:.2f} s{facts}",
              file=sys.stderr)
