"""The TileLang names an example's source refers to (`T.xxx`, `tilelang.a.b`, `from
tilelang.x import y`), read from its syntax tree, and which of them tilecraft lacks. A run
stops at its first failure; this static list shows every missing name a file uses, so that
the census can say how many kernels each would still block after the first is supplied."""
from __future__ import annotations

import ast
import importlib

from tilecraft.errors import TileError

from .importalias import aliased_root, spelled, target_name


def _aliases(tree) -> dict:
    """Local name -> the tilelang module it stands for."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if aliased_root(a.name):
                    root = a.name.split(".")[0]
                    names[a.asname or root] = a.name if a.asname else root
        elif isinstance(node, ast.ImportFrom) and aliased_root(node.module or ""):
            for a in node.names:
                if a.name != "*":
                    names.setdefault(a.asname or a.name, f"{node.module}.{a.name}")
    return names


def referenced(text: str) -> set:
    """Dotted tilelang names the source refers to (spelled from the tilelang root)."""
    tree = ast.parse(text)
    aliases = _aliases(tree)
    found = {full for full in aliases.values()}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, inner = [], node
        while isinstance(inner, ast.Attribute):
            chain.append(inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name) and inner.id in aliases:
            found.add(".".join([aliases[inner.id]] + list(reversed(chain))))
    return found


def first_missing(dotted: str) -> str | None:
    """The shortest prefix of a tilelang dotted name that tilecraft does not provide."""
    parts = dotted.split(".")
    obj, i = None, 1
    while i <= len(parts):  # the longest importable module prefix first
        try:
            obj = importlib.import_module(target_name(".".join(parts[:i])))
            i += 1
        except (ImportError, TileError):  # TileError: a module tilecraft refuses by name
            break
    if obj is None:
        return parts[0]
    for j in range(i - 1, len(parts)):  # parts[i - 1] is no module: attributes from there on
        try:
            obj = getattr(obj, parts[j])
        except (AttributeError, TileError):
            return ".".join(parts[:j + 1])
    return None


def missing_names(text: str) -> list:
    """The names tilecraft lacks among those the source refers to, sorted."""
    return sorted({spelled(m) for m in map(first_missing, referenced(text)) if m})
