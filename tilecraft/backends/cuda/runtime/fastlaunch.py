"""The C side of the launch path (fastlaunch.c), built once per machine and Python version.

A launch makes two driver calls, cuCtxGetCurrent and cuLaunchKernel. Through ctypes each costs
microseconds of argument conversion, which on a slow host is as long as a small kernel runs; a
C function taking Python ints costs a fraction of one. The module links nothing but Python
(it calls the driver's entry points at the addresses ctypes resolved), so any C compiler with
the Python headers builds it: the system's `cc` (or $CC), into the kernel cache folder, keyed
by the source and the interpreter. Where it cannot be built (no compiler, no headers, an
unwritable cache) or TILECRAFT_FAST_LAUNCH=0, `module()` is None and the launcher keeps to
ctypes; the reason is logged once at INFO level.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading

from .... import knobs

NAME = "_tc_fastlaunch"
SOURCES = tuple(os.path.join(os.path.dirname(__file__), name)
                for name in ("fastlaunch.c", "fastcall.c"))
_logger = logging.getLogger("tilecraft.launch")
_lock = threading.Lock()
_state: dict = {}   # "module": the loaded module or None, once tried


def module():
    """The loaded C module, or None where it is switched off or cannot be built here."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                _state["module"] = _load() if knobs.fast_launch() else None
    return _state["module"]


def _load():
    try:
        return _import(_built())
    except (OSError, ImportError, subprocess.SubprocessError, RuntimeError) as err:
        _logger.info("kernels launch through ctypes: the C launch module was not built (%s)",
                     str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)
        return None


def _built() -> str:
    """The module's path in the cache, compiled first when it is not there."""
    source = b""
    for name in SOURCES:
        with open(name, "rb") as f:
            source += f.read()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256(source + sys.version.encode() + sys.executable.encode()).hexdigest()
    folder = os.path.join(knobs.cache_dir(), "fastlaunch")
    path = os.path.join(folder, f"{NAME}-{key[:16]}{suffix}")
    if os.path.exists(path):
        return path
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or $CC) found")
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise RuntimeError(f"no Python headers in {include}")
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=suffix)
    os.close(fd)
    try:
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{include}", *SOURCES,
                               "-o", tmp], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip() or done.stdout.strip()}")
        os.replace(tmp, path)   # another process may have built it meanwhile: same bytes
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _import(path: str):
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
