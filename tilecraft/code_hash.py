"""What a Python function is, for cache keys: the hash of its source text."""
from __future__ import annotations

import hashlib
import inspect


def source_hash(fn) -> str:
    """SHA-256 of a function's source text (its bytecode and constants when the source is not
    available, e.g. for code made by exec)."""
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts)) if code is not None else repr(fn)
    return hashlib.sha256(text.encode()).hexdigest()
