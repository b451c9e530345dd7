"""`import tilelang`, `import tilelang.language as T` and `from tilelang.x import y` resolved to
tilecraft: a finder on sys.meta_path that answers for every `tilelang` module name with the
tilecraft module of the same dotted path, so an unchanged TileLang script runs on tilecraft."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

ALIASED = "tilelang"
TARGET = "tilecraft"


def target_name(fullname: str) -> str:
    """The tilecraft module that stands for a tilelang module name."""
    return TARGET + fullname[len(ALIASED):]


def source_name(fullname: str) -> str:
    """The tilelang name of a tilecraft module (the name the example script wrote)."""
    if fullname == TARGET or fullname.startswith(TARGET + "."):
        return ALIASED + fullname[len(TARGET):]
    return fullname


def spelled(dotted: str) -> str:
    """A tilelang dotted name as scripts write it: T.xxx for the language module's names."""
    prefix = ALIASED + ".language."
    return "T." + dotted[len(prefix):] if dotted.startswith(prefix) else dotted


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, module):
        self.module = module
        self.attrs = {k: module.__dict__.get(k) for k in ("__spec__", "__loader__")}

    def create_module(self, spec):
        return self.module  # the tilecraft module itself, shared under both names

    def exec_module(self, module):
        # Already executed when tilecraft imported it. The import system has just stamped
        # the alias's spec onto it: give the module its own back, so it still knows itself
        # as tilecraft (its relative imports, reloads and pickles depend on that).
        module.__dict__.update(self.attrs)


class TilelangAlias(importlib.abc.MetaPathFinder):
    """Resolves `tilelang[.x.y]` to `tilecraft[.x.y]`. A tilecraft module that does not exist
    is reported under the name the script asked for (ModuleNotFoundError: tilelang.x)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != ALIASED and not fullname.startswith(ALIASED + "."):
            return None
        real = target_name(fullname)
        try:
            module = importlib.import_module(real)
        except ModuleNotFoundError as e:
            if e.name is not None and (e.name == real or real.startswith(e.name + ".")):
                raise ModuleNotFoundError(f"No module named '{fullname}'",
                                          name=fullname) from None
            raise
        spec = importlib.util.spec_from_loader(fullname, _AliasLoader(module),
                                               is_package=hasattr(module, "__path__"))
        return spec


def install() -> TilelangAlias:
    """Put the alias first on sys.meta_path (an installed TileLang is never imported)."""
    for finder in sys.meta_path:
        if isinstance(finder, TilelangAlias):
            return finder
    finder = TilelangAlias()
    sys.meta_path.insert(0, finder)
    return finder
