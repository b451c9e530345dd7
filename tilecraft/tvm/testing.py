"""TVM's `testing.requires_package`, which TileLang's example tests put on functions that need
an optional package: the function runs when every named package imports, and is skipped (under
pytest) or refused with a TileError naming the package (elsewhere) when one does not."""
from __future__ import annotations

import functools
import importlib.util

from ..errors import TileError


def requires_package(*packages):
    def decorate(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            missing = [p for p in packages if importlib.util.find_spec(p) is None]
            if missing:
                message = f"{fn.__name__} needs the package {', '.join(missing)}, not installed"
                try:
                    import pytest
                except ImportError:
                    raise TileError(message) from None
                pytest.skip(message)
            return fn(*args, **kwargs)
        return run
    return decorate
