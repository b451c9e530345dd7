"""Compile targets, as values. Only runtime/ asks the machine what it has."""
from __future__ import annotations

from . import knobs
from .errors import TileError

_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
BACKENDS_AVAILABLE = ("interp",)


def resolve(target: str | None) -> str:
    """The backend a kernel runs on for a target name ("auto", "interp", "cuda", "sm_XX")."""
    name = target if target is not None else knobs.target()
    if not isinstance(name, str):
        raise TileError(f"target must be a string such as 'auto' or 'interp', got {name!r}")
    name = name.strip().lower()
    if name == "auto":
        # The CUDA backend is not part of this build yet, so every machine interprets.
        return "interp"
    if name == "interp":
        return "interp"
    if name == "cuda" or name in _ARCHS:
        raise TileError(f"target '{name}': this build of tilecraft has no CUDA backend yet; use "
                        "target='interp' (or 'auto')")
    raise TileError(f"unknown target '{target}'; expected 'auto', 'interp', 'cuda' or one of "
                    f"{', '.join(_ARCHS)}")
