"""Compiled kernels, kept in memory and on disk under a content-addressed key.

nvcc costs about half a second per kernel; a program that builds the same kernel again (in the
same process or the next run) should not pay it twice. The key is the SHA-256 of everything the
cubin depends on (docs/design.md decision 8): the CUDA source, the arch, the nvcc flags, tilecraft's
version, the contents of the header library it includes, nvcc's version, and whatever the caller adds in `extra` (the kernel IR text and its
config), so a change in any of them is a miss, never a stale hit.

On disk an entry is a folder `<dir>/<key[:2]>/<key>/` with `kernel.cubin`, `kernel.cu` (for
reading) and `meta.json` (ptxas facts per kernel, the log, `extra`). A writer fills a private
temporary folder beside it and renames it into place, so readers in other processes see a whole
entry or none; when two processes race, the first rename wins and the second drops its copy.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import warnings

from .... import knobs
from .toolchain import CompiledCubin, KernelInfo, compile_cubin, compiler_version

_CUBIN, _SOURCE, _META = "kernel.cubin", "kernel.cu", "meta.json"
_SHARD = re.compile(r"^[0-9a-f]{2}$")


def write_atomically(path: str, data: bytes) -> None:
    """Write data to path so that a reader sees the old file or the whole new one (a temporary
    file in the same folder, then a rename). Raises OSError and leaves no temporary behind."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _compile_cubin(source: str, arch: str, flags: tuple) -> CompiledCubin:
    return compile_cubin(source, arch, flags=flags)


def _not_json(value):
    raise TypeError(f"cache key part {value!r} ({type(value).__name__}) is not JSON data; pass "
                    "strings, numbers, lists and dicts in `extra`")


_headers: list = []


def headers_digest() -> str:
    """SHA-256 of the header library's files (names and contents). Generated sources include
    the headers by name, so an edited header with an unchanged source must still miss."""
    if not _headers:
        from .toolchain import INCLUDE_DIR
        h = hashlib.sha256()
        for folder, dirs, files in os.walk(INCLUDE_DIR):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, INCLUDE_DIR).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read() + b"\0")
        _headers.append(h.hexdigest())
    return _headers[0]


def cache_key(source: str, arch: str, flags=(), extra=None) -> str:
    """The content address of a compilation: SHA-256 over everything the cubin depends on."""
    from .... import __version__
    parts = {"source": source, "arch": arch, "flags": list(flags), "tilecraft": __version__,
             "headers": headers_digest(), "nvcc": compiler_version(),
             "extra": extra if extra is not None else {}}
    text = json.dumps(parts, sort_keys=True, default=_not_json)
    return hashlib.sha256(text.encode()).hexdigest()


class KernelCache:
    """Memory in front of disk. `directory=None` follows TILECRAFT_CACHE_DIR at each call."""

    def __init__(self, directory: str | None = None):
        self._directory = directory
        self._memory: dict = {}
        self._lock = threading.Lock()

    @property
    def directory(self) -> str:
        return self._directory or knobs.cache_dir()

    def entry_dir(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key)

    def get_or_compile(self, source: str, arch: str, flags=(), extra=None, compile_fn=None, *,
                       bypass: bool = False) -> CompiledCubin:
        """The cached build of `source`, or `compile_fn(source, arch, flags)` stored for next time.

        With `bypass` (the caller is dumping IR) or TILECRAFT_DISABLE_CACHE set, nothing is read
        or written: every call compiles.
        """
        flags = tuple(flags)
        compile_fn = compile_fn or _compile_cubin
        if bypass or knobs.cache_disabled():
            return compile_fn(source, arch, flags)
        key = cache_key(source, arch, flags, extra)
        hit = self._memory.get(key)
        if hit is not None:
            return hit
        compiled = self._load(key)
        if compiled is None:
            compiled = compile_fn(source, arch, flags)
            self._store(key, compiled, source, extra)
        with self._lock:
            return self._memory.setdefault(key, compiled)

    def clear(self) -> None:
        """Forget every entry, in memory and on disk (only the cache's own shard folders)."""
        with self._lock:
            self._memory.clear()
        root = self.directory
        if not os.path.isdir(root):
            return
        for name in os.listdir(root):
            if _SHARD.match(name):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    # ---- disk ----

    def _load(self, key: str) -> CompiledCubin | None:
        folder = self.entry_dir(key)
        try:
            with open(os.path.join(folder, _META)) as f:
                meta = json.load(f)
            with open(os.path.join(folder, _CUBIN), "rb") as f:
                cubin = f.read()
        except (OSError, ValueError):
            return None
        if meta.get("key") != key or hashlib.sha256(cubin).hexdigest() != meta.get("cubin_sha256"):
            return None  # damaged by hand or by a full disk: rebuild, and _store replaces it
        kernels = {name: KernelInfo.from_json(info) for name, info in meta["kernels"].items()}
        return CompiledCubin(cubin=cubin, arch=meta["arch"], kernels=kernels, log=meta["log"],
                             flags=tuple(meta["flags"]))

    def _store(self, key: str, compiled: CompiledCubin, source: str, extra) -> None:
        final = self.entry_dir(key)
        parent = os.path.dirname(final)
        meta = {"key": key, "arch": compiled.arch, "flags": list(compiled.flags),
                "kernels": {name: info.to_json() for name, info in compiled.kernels.items()},
                "log": compiled.log, "extra": extra,
                "cubin_sha256": hashlib.sha256(compiled.cubin).hexdigest()}
        try:
            os.makedirs(parent, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=parent)
        except OSError as err:
            warnings.warn(f"tilecraft: cannot write the kernel cache at {self.directory}: {err}")
            return
        try:
            with open(os.path.join(staging, _CUBIN), "wb") as f:
                f.write(compiled.cubin)
            with open(os.path.join(staging, _SOURCE), "w") as f:
                f.write(source)
            with open(os.path.join(staging, _META), "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True, default=_not_json)
            self._publish(staging, final, key)
        except OSError as err:
            warnings.warn(f"tilecraft: cannot write the kernel cache at {self.directory}: {err}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already when the rename won

    def _publish(self, staging: str, final: str, key: str) -> None:
        try:
            os.rename(staging, final)
            return
        except OSError:
            if self._load(key) is not None:
                return  # another process published the same entry first
        # What sits there is damaged: move it aside (atomically) and publish ours.
        condemned = tempfile.mkdtemp(prefix=f".{key[:16]}-old-", dir=os.path.dirname(final))
        try:
            os.rename(final, os.path.join(condemned, "entry"))
            os.rename(staging, final)
        except OSError:
            pass  # a concurrent writer fixed it meanwhile
        finally:
            shutil.rmtree(condemned, ignore_errors=True)


default_cache = KernelCache()


def get_or_compile(source: str, arch: str, flags=(), extra=None, compile_fn=None, *,
                   bypass: bool = False) -> CompiledCubin:
    """`KernelCache.get_or_compile` on the process-wide cache (TILECRAFT_CACHE_DIR)."""
    return default_cache.get_or_compile(source, arch, flags, extra, compile_fn, bypass=bypass)


def clear() -> None:
    """Empty the process-wide cache, in memory and on disk."""
    default_cache.clear()
