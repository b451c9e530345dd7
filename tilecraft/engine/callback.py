"""`register_cuda_postproc_callback`: a function that rewrites the CUDA source of every kernel
compiled after it is registered, before nvcc sees it (TileLang's hook for hand-edits of the
generated code: `def postproc(code, target): return code`).

One callback is active at a time (a new one replaces it, as in TileLang; override=False keeps
the one there). Its source takes part in the program cache's key, so a kernel compiled
with a different callback, or none, is never one from the cache."""
from __future__ import annotations

from ..code_hash import source_hash
from ..errors import TileError

_active: list = []   # at most one callable


def register_cuda_postproc_callback(func=None, override: bool = True):
    """Register func(code: str, target) -> str; usable as a decorator, with or without
    arguments."""
    def register(f):
        if not callable(f):
            raise TileError(f"register_cuda_postproc_callback takes a function, got "
                            f"{type(f).__name__}")
        if _active and not override:
            return f
        _active[:] = [f]
        return f
    return register(func) if func is not None else register


def clear_cuda_postproc_callback():
    """Compile without a callback again."""
    _active.clear()


def identity() -> str | None:
    """What the active callback is, for cache keys (its source, or its code's bytes)."""
    if not _active:
        return None
    return source_hash(_active[0])


def postprocess(source: str, arch: str) -> str:
    """source after the active callback (unchanged without one)."""
    if not _active:
        return source
    out = _active[0](source, arch)
    if not isinstance(out, str):
        raise TileError(f"the CUDA post-processing callback {_active[0].__name__} returned a "
                        f"{type(out).__name__}, not the source text")
    return out
