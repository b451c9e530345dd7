"""Which element types each atomic supports, per GPU architecture.

T.atomic_add / atomic_max / atomic_min lower to tc::atomic_<kind> (codegen/include/tilecraft/
math.h), whose overloads wrap CUDA's atomicAdd / atomicMax / atomicMin: a type without an
overload (bool, 8- and 16-bit integers, fp8, a 16-bit float max, 64-bit adds) would only fail
in nvcc. The table gives, per kind and element type, the oldest compute capability that has
it (CUDA's own fallbacks included); a destination of any other type, or on an older GPU, is
refused at the atomic's line.
"""
from __future__ import annotations

ATOMIC_DTYPES = {
    "add": {"float32": 20, "float64": 60, "float16": 70, "bfloat16": 80, "int32": 20,
            "uint32": 20},
    # float32 / float64 max and min order the bit patterns with 32- and 64-bit integer atomics.
    "max": {"int32": 20, "uint32": 20, "int64": 35, "float32": 20, "float64": 35},
    "min": {"int32": 20, "uint32": 20, "int64": 35, "float32": 20, "float64": 35},
}

# What to do instead, for the types people reach for first.
_ADVICE = {"float16": "keep the values in a float32 tensor", "bfloat16": "keep the values in a "
           "float32 tensor", "int64": "use int32", "uint64": "use uint32"}


def compute_capability(arch: str) -> int:
    """80 for "sm_80", 90 for "sm_90a"."""
    return int("".join(ch for ch in arch[3:] if ch.isdigit()))


def atomic_unsupported(kind: str, dtype: str, arch: str) -> str | None:
    """Why an atomic `kind` on `dtype` elements cannot run on arch, or None when it can."""
    table = ATOMIC_DTYPES[kind]
    cc = compute_capability(arch)
    oldest = table.get(dtype)
    if oldest is not None and oldest <= cc:
        return None
    here = ", ".join(d for d, c in table.items() if c <= cc)
    advice = _ADVICE.get(dtype, "accumulate into a tensor of one of those types")
    if oldest is not None:
        return (f"an atomic {kind} of {dtype} needs sm_{oldest} or newer, not {arch}; on {arch} "
                f"it takes {here}")
    return f"{arch} has no atomic {kind} of {dtype} (it takes {here}): {advice}"
