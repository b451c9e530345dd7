"""The part of TileLang's bundled TVM that its kernel scripts reach for, and nothing more.

TileLang ships a copy of TVM (`from tilelang import tvm`, or plain `import tvm` once tilelang
is imported), and its scripts use a few of its names while writing kernels: `DataType(dtype)
.bits`, and in `tirx` (formerly `tir`) typed constants, reinterpretation and selection for bit
unpacking helpers. Those are tilecraft's own dtypes and expressions here. TVM's IR, passes,
build (`tvm.compile`, `tvm.target`) and everything else is not part of tilecraft: naming it
stops on a TileError that says so, never on an AttributeError that reads like a typo.
"""
from __future__ import annotations

from ..errors import TileError
from ..ir.dtypes import dtype as DataType
from . import testing, tirx

tir = tirx  # TVM's name for the module before it became `tirx`

__all__ = ["DataType", "testing", "tir", "tirx"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise TileError(f"tvm.{name} is not part of tilecraft: of TileLang's bundled TVM, tilecraft "
                    f"has DataType, tirx (const, reinterpret, Select, Cast, PrimExpr) and "
                    f"testing.requires_package; its IR, passes and build are tilecraft's own")
