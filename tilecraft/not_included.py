"""TileLang modules tilecraft does not have: naming one is a clear error that says what it is.

`tilelang.cuda` (TileLang's emitters of
CUDA intrinsics for hand-written kernels), `tilelang.rocm`, `tilelang.tools.cuda` (iket,
intra-kernel event tracing) and `tilelang.language.dtypes` (its dtype module's internals) have
no counterpart: tilecraft is its own compiler, with neither
TVM's IR nor its macro library (of `tilelang.tvm` it has the few names kernel scripts use:
tilecraft/tvm). A script that reaches one by attribute (`tilecraft.cuda`, `from
tilecraft import rocm`) or by import (`import tilecraft.cuda.intrinsics`) stops on a TileError
that names it, instead of an AttributeError or ModuleNotFoundError that reads like a typo.
"""
from __future__ import annotations

import sys

from .errors import TileError

MODULES = {
    "cuda": "TileLang's emitters of CUDA intrinsics (mma / ldmatrix layouts and macros) for "
            "hand-written kernels; T.gemm, T.copy and the layout functions of tilecraft.layout "
            "cover what they are used for",
    "rocm": "TileLang's AMD backend",
    "tools.cuda": "iket, TileLang's intra-kernel event tracing",
    "language.dtypes": "the module behind TileLang's dtype objects, with its private tables; "
                       "T.float16, T.dtype(...) and tilecraft.DataType are tilecraft's dtypes",
}


def refuse(name: str):
    """Raise the TileError for TileLang module `name` (a key of MODULES)."""
    raise TileError(f"tilelang.{name} is not part of tilecraft ({MODULES[name]})")


def module_getattr(package: str, prefix: str = ""):
    """A module __getattr__ (PEP 562) for `package` that refuses the MODULES under it."""
    def __getattr__(name):
        if prefix + name in MODULES:
            refuse(prefix + name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}", name=name,
                             obj=sys.modules[package])
    return __getattr__
