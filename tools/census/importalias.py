"""`import tilelang`, `import tilelang.language as T` and `from tilelang.x import y` resolved to
tilecraft: a finder on sys.meta_path that answers for every `tilelang` module name with the
tilecraft module of the same dotted path, so an unchanged TileLang script runs on tilecraft.
`import tvm` / `from tvm import x` name TileLang's bundled TVM (the module `tilelang.tvm` is),
and resolve to tilecraft.tvm the same way."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

ALIASED = "tilelang"
TARGET = "tilecraft"
# Each aliased root and the tilecraft module standing for it; the longer target first, so
# that source_name gives tilecraft.tvm back as tvm.
ROOTS = {"tvm": TARGET + ".tvm", ALIASED: TARGET}


def aliased_root(fullname: str) -> str | None:
    """The aliased root a module name starts with, if any."""
    return next((r for r in ROOTS if fullname == r or fullname.startswith(r + ".")), None)


def target_name(fullname: str) -> str:
    """The tilecraft module that stands for a tilelang (or tvm) module name."""
    root = aliased_root(fullname)
    return ROOTS[root] + fullname[len(root):]


def source_name(fullname: str) -> str:
    """The tilelang name of a tilecraft module (the name the example script wrote)."""
    for root, target in ROOTS.items():
        if fullname == target or fullname.startswith(target + "."):
            return root + fullname[len(target):]
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
        if aliased_root(fullname) is None:
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
