"""Every environment variable tilecraft reads, in one place (all prefixed TILECRAFT_)."""
from __future__ import annotations

import os


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def target() -> str:
    """TILECRAFT_TARGET: the default compile target ("auto" unless set)."""
    return os.environ.get("TILECRAFT_TARGET", "").strip() or "auto"


def debug() -> bool:
    """TILECRAFT_DEBUG=1: show tilecraft's own traceback with errors."""
    return _flag("TILECRAFT_DEBUG")


def dump_ir_dir() -> str | None:
    """TILECRAFT_DUMP_IR=dir: write the IR after every pass into dir."""
    return os.environ.get("TILECRAFT_DUMP_IR") or None


def cache_dir() -> str:
    """TILECRAFT_CACHE_DIR: where compiled kernels are kept (default ~/.cache/tilecraft)."""
    return os.environ.get("TILECRAFT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tilecraft")


def cache_disabled() -> bool:
    """TILECRAFT_DISABLE_CACHE=1: never read or write the disk cache."""
    return _flag("TILECRAFT_DISABLE_CACHE")


def autotune_gpus() -> str:
    """TILECRAFT_AUTOTUNE_GPUS=n: measure tuning candidates on at most n GPUs (default: every
    visible GPU of the tuned one's model; 1 measures in the calling process)."""
    return os.environ.get("TILECRAFT_AUTOTUNE_GPUS", "").strip()


def clean_errors() -> bool:
    """TILECRAFT_CLEAN_ERRORS=1: at import, install the hook that prints an uncaught TileError
    as a compiler message, without the traceback (errors.install_excepthook)."""
    return _flag("TILECRAFT_CLEAN_ERRORS")


def compiler() -> str:
    """TILECRAFT_COMPILER=nvcc|nvrtc: which compiler builds cubins ("": nvcc where found, else
    NVRTC)."""
    return os.environ.get("TILECRAFT_COMPILER", "").strip().lower()


def nvrtc_library() -> str | None:
    """TILECRAFT_NVRTC=path: the NVRTC library to load instead of searching for one."""
    return os.environ.get("TILECRAFT_NVRTC") or None


def log_level() -> str | None:
    """TILECRAFT_LOG_LEVEL=DEBUG|INFO|WARNING|ERROR: the level of tilecraft's loggers at import
    (tilecraft.set_log_level changes it later)."""
    return os.environ.get("TILECRAFT_LOG_LEVEL", "").strip() or None


def fast_launch() -> bool:
    """TILECRAFT_FAST_LAUNCH=0: launch kernels through ctypes alone, not through the small C
    module built once per machine (runtime/fastlaunch.py); on by default."""
    return os.environ.get("TILECRAFT_FAST_LAUNCH", "").strip().lower() not in (
        "0", "false", "no", "off")
