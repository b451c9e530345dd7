"""Scalar data types of the tile IR.

A DType is interned by name, so identity and equality agree and dtypes can key dicts.
Names follow TileLang ("float16", "float8_e4m3", ...); common aliases ("half", "float",
"fp16", "float8_e4m3fn") resolve to the canonical name. "tfloat32" (TF32, the tensor cores'
19-bit format) is stored as float32: a torch float32 tensor is passed for a tfloat32 parameter,
and casts between the two change no bits; T.gemm on tfloat32 operands runs TF32 mma. As in TileLang, a DType is also a
string (its canonical name): `T.float16 == "float16"`, `getattr(torch, T.float16)` and
`"%s" % T.int32` work, and `as_torch()` gives the torch dtype.
"""
from __future__ import annotations

import numpy as np
import ml_dtypes

_NUMPY = {
    "bool": np.dtype(np.bool_),
    "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8), "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16), "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64), "tfloat32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}

_ALIASES = {
    "float": "float32", "half": "float16", "double": "float64",
    "fp16": "float16", "fp32": "float32", "fp64": "float64", "bf16": "bfloat16",
    "tf32": "tfloat32",
    "float8_e4m3fn": "float8_e4m3", "e4m3_float8": "float8_e4m3", "e5m2_float8": "float8_e5m2",
    "int": "int32", "uint": "uint32",
}

# The C type each dtype has in generated CUDA; kept here so every backend agrees.
_C_TYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "uint64_t", "float16": "half_t", "bfloat16": "bfloat16_t",
    "float32": "float", "float64": "double", "float8_e4m3": "fp8_e4_t", "float8_e5m2": "fp8_e5_t",
    "tfloat32": "float", "handle": "void*",
}


# torch names its e4m3 type after the finite-only variant ("fn"), which is the one we mean.
_TORCH_NAMES = {"float8_e4m3": "float8_e4m3fn", "tfloat32": "float32"}


class DType(str):
    """One scalar type, and the string of its canonical name. Use `dtype(x)` to obtain one;
    never construct directly."""

    __slots__ = ("name", "kind", "bits")
    _interned: dict[str, "DType"] = {}

    def __new__(cls, name, kind: str | None = None, bits: int | None = None):
        if kind is None:  # `T.dtype("float16")` looks up the interned dtype
            return dtype(name)
        return super().__new__(cls, name)

    def __init__(self, name: str, kind: str | None = None, bits: int | None = None):
        if kind is None:
            return
        self.name, self.kind, self.bits = name, kind, bits

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "uint"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_handle(self) -> bool:
        return self.kind == "handle"

    @property
    def storage(self) -> "DType":
        """The type whose bits hold this one's values in memory (float32 for tfloat32)."""
        return float32 if self.name == "tfloat32" else self

    def holds(self, other: "DType") -> bool:
        """Whether memory of dtype `other` (a tensor passed for a parameter of this type) holds
        values of this type: the same type, or its storage type."""
        return other is self or other is self.storage

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def numpy(self) -> np.dtype:
        if self.name not in _NUMPY:
            raise TypeError(f"dtype {self.name} has no numpy equivalent")
        return _NUMPY[self.name]

    @property
    def c_type(self) -> str:
        return _C_TYPES[self.name]

    def as_torch(self):
        """The torch dtype of this type (imports torch)."""
        from ..errors import TileError
        try:
            import torch
        except ImportError:
            raise TileError(f"{self.name}.as_torch() needs torch, which is not installed") \
                from None
        found = getattr(torch, _TORCH_NAMES.get(self.name, self.name), None)
        if not isinstance(found, torch.dtype):
            raise TileError(f"dtype {self.name} has no torch equivalent")
        return found

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, DType):
            return self is other
        if isinstance(other, str):
            return _lookup(other) is self
        return False

    def __ne__(self, other) -> bool:  # str's own would compare the text, not the type
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self):
        return (dtype, (self.name,))

    def __call__(self, value=0):
        """`T.float32(1.5)` / `T.int32(0)`: a typed constant; `T.int32(expr)` casts expr."""
        from .expr import Expr, cast, const
        if isinstance(value, Expr):
            return cast(value, self)
        return const(value, self)


def _register(name: str, kind: str, bits: int) -> DType:
    d = DType(name, kind, bits)
    DType._interned[name] = d
    return d


for _n in ("int8", "int16", "int32", "int64"):
    _register(_n, "int", int(_n[3:]))
for _n in ("uint8", "uint16", "uint32", "uint64"):
    _register(_n, "uint", int(_n[4:]))
for _n, _b in (("float16", 16), ("bfloat16", 16), ("float32", 32), ("float64", 64),
               ("float8_e4m3", 8), ("float8_e5m2", 8), ("tfloat32", 32)):
    _register(_n, "float", _b)
_register("bool", "bool", 1)
_register("handle", "handle", 64)

SUPPORTED_NAMES = tuple(n for n in DType._interned if n != "handle")


class NamedOnly(str):
    """A TileLang dtype that tilecraft knows by name only (`T.int4`): scripts compare with it
    and list it in annotations, and a buffer or value of it is refused, naming it."""


_NAMED_ONLY = {
    "int4": "4-bit integers (two to a byte)", "uint4": "4-bit unsigned integers (two to a byte)",
}
NAMED_ONLY = {n: NamedOnly(n) for n in _NAMED_ONLY}


def _lookup(name: str) -> DType | None:
    name = str.__str__(name)  # a plain str: the alias tables compare their keys with it
    name = _ALIASES.get(name, name)
    return DType._interned.get(name)


def dtype(x) -> DType:
    """Resolve a dtype given as a DType, a name, a numpy dtype or a torch dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        d = _lookup(x[len("torch."):] if x.startswith("torch.") else x)
        if d is None and str.__str__(x) in _NAMED_ONLY:
            raise ValueError(f"dtype {x} ({_NAMED_ONLY[str.__str__(x)]}) is not supported yet: "
                             f"store such values packed in uint8 / int8 and unpack them with "
                             f"shifts and masks")
        if d is None:
            raise ValueError(f"unknown dtype '{x}'; expected one of: {', '.join(SUPPORTED_NAMES)}")
        return d
    if x is bool:
        return DType._interned["bool"]
    if x is int:
        return DType._interned["int32"]
    if x is float:
        return DType._interned["float32"]
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    if npd is not None:
        for name, candidate in _NUMPY.items():
            if candidate == npd:
                return DType._interned[name]
    text = str(x)
    if text.startswith("torch."):
        return dtype(text[len("torch."):])
    raise ValueError(f"unknown dtype {x!r}; expected one of: {', '.join(SUPPORTED_NAMES)}")


def same_storage(a: DType, b: DType) -> bool:
    """Whether values of a and b are stored alike (a copy between them moves bits unchanged:
    the same type, or tfloat32 and float32)."""
    return a.storage is b.storage


def is_dtype_like(x) -> bool:
    try:
        dtype(x)
        return True
    except (ValueError, TypeError):
        return False


def promote(a: DType, b: DType) -> DType:
    """The type of a binary operation whose operands have types a and b."""
    if a is b:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            return a if a.bits >= b.bits else b
        return a if a.is_float else b
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.is_unsigned else b


def max_value(d: DType):
    d = dtype(d)
    if d.is_float:
        return float(ml_dtypes.finfo(d.numpy).max) if d.bits < 32 or d.name == "bfloat16" \
            else float(np.finfo(d.numpy).max)
    if d.is_bool:
        return True
    return int(np.iinfo(d.numpy).max)


def min_value(d: DType):
    d = dtype(d)
    if d.is_float:
        return -max_value(d)
    if d.is_bool:
        return False
    return int(np.iinfo(d.numpy).min)


int32 = DType._interned["int32"]
int64 = DType._interned["int64"]
float32 = DType._interned["float32"]
float64 = DType._interned["float64"]
boolean = DType._interned["bool"]
handle = DType._interned["handle"]
