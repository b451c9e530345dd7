"""TileLang's `tilelang.env` names for tilecraft's settings (knobs.py reads the environment),
and its top-level set_log_level. `TILELANG_CACHE_DIR` is where compiled kernels and tuning results are kept (tilecraft's
TILECRAFT_CACHE_DIR, default ~/.cache/tilecraft), read when asked; `disable_cache()` /
`enable_cache()` / `is_cache_enabled()` turn the disk cache off and on for this process and
the compile and measuring processes it starts (through TILECRAFT_DISABLE_CACHE)."""
from __future__ import annotations

import logging
import os

from . import knobs
from .errors import TileError

_DISABLE = "TILECRAFT_DISABLE_CACHE"

# TileLang's name -> the function of knobs that answers it
_SETTINGS = {"TILELANG_CACHE_DIR": knobs.cache_dir}


def disable_cache() -> None:
    """Neither read nor write compiled programs and tuning results on disk from now on."""
    os.environ[_DISABLE] = "1"


def enable_cache() -> None:
    """Use the disk cache again (unless TILECRAFT_DISABLE_CACHE was set before)."""
    os.environ.pop(_DISABLE, None)


def is_cache_enabled() -> bool:
    return not knobs.cache_disabled()


def set_log_level(level) -> None:
    """The level ("WARNING", logging.INFO, ...) of tilecraft's loggers (the autotuner logs
    skipped candidates)."""
    try:
        logging.getLogger("tilecraft").setLevel(level.upper() if isinstance(level, str) else level)
    except (ValueError, TypeError):
        raise TileError(f"set_log_level: unknown level {level!r}; give DEBUG, INFO, WARNING, "
                        "ERROR or CRITICAL (or a logging level number)") from None


def __getattr__(name: str):
    if name in _SETTINGS:
        return _SETTINGS[name]()
    raise AttributeError(f"tilecraft.env has no {name!r}; its TileLang names are "
                         f"{', '.join(sorted(_SETTINGS))} and disable_cache, enable_cache, "
                         "is_cache_enabled (tilecraft's own settings: docs/settings.md)")
