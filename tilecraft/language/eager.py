"""The builtins of the eager @tilecraft.jit form, where the decorated function's body is the
kernel program (TileLang's current style):

    @tilecraft.jit
    def add(A, B, block: int = 128):
        N = T.const("N")                    # a size bound from the tensors of each call
        A: T.Tensor[[N], T.float32]
        B: T.Tensor[[N], T.float32]
        C = T.empty((N,), T.float32)        # an output, allocated by the call and returned
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            ...
        return C

T.const and T.empty exist only there (a @T.prim_func takes T.dynamic sizes and out_idx
outputs); T.annotate_pass_configs and T.annotate_compile_flags attach compile options to
either form. The trace that gives them meaning is language/eager_trace.py.
"""
from __future__ import annotations

import re

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir import dtypes as dt
from ..ir.annotations import FUNC_COMPILE_FLAGS, FUNC_PASS_CONFIGS
from ..ir.expr import Expr
from ..pass_config import check_compile_flags, check_pass_configs

_EAGER_ONLY = ("{what} belongs to the eager @tilecraft.jit form, whose body is the kernel "
               "program; {instead}")


def _trace(what: str, instead: str):
    """The eager trace of the body being evaluated, or a TileError saying where `what` goes."""
    b = bld.maybe_active()
    if b is None or b.eager is None:
        raise TileError(_EAGER_ONLY.format(what=what, instead=instead), current_span())
    return b


def const(name: str, dtype="int32"):
    """Sizes bound from the shapes of each call's tensors: `M, N = T.const("M, N")` (or
    "M N"); `T.const("M")` is one. The kernel is specialized for, and cached by, their values."""
    b = _trace("T.const", "a @T.prim_func takes sizes known at call time from "
                          "T.dynamic (or T.symbolic)")
    if not isinstance(name, str):
        raise TileError(f"T.const takes the names as a string, got {type(name).__name__}",
                        current_span())
    names = [n for n in re.split(r"[\s,]+", name) if n]
    bad = [n for n in names if not n.isidentifier()]
    if not names or bad:
        raise TileError(f"T.const needs names separated by commas or spaces, got {name!r}",
                        current_span())
    if len(set(names)) != len(names):
        raise TileError(f"T.const names a size twice in {name!r}", current_span())
    try:
        dtype = dt.dtype(dtype)
    except (ValueError, TypeError) as e:
        raise TileError(f"T.const: {e}", current_span()) from None
    if not dtype.is_int:
        raise TileError(f"T.const: a size has an integer dtype, got {dtype}", current_span())
    made = tuple(b.eager.const(n, dtype, current_span()) for n in names)
    return made[0] if len(made) == 1 else made


def empty(*shape, dtype="float32"):
    """An output tensor of the eager form: `C = T.empty((M, N), T.float16)` (or
    `T.empty(M, N, dtype=...)`). Each call allocates it; the function returns it."""
    b = _trace("T.empty", "a @T.prim_func writes its outputs into parameters that "
                          "@tilecraft.jit(out_idx=...) allocates")
    if not b.outside_device_code:
        raise TileError("T.empty declares an output of the whole function: call it before "
                        "the T.Kernel blocks, not inside one", current_span())
    if len(shape) == 2 and isinstance(shape[0], (tuple, list)) and \
            not isinstance(shape[1], (int, Expr)):
        shape, dtype = shape[0], shape[1]        # T.empty((M, N), dtype)
    elif len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    dims = tuple(shape)
    for i, d in enumerate(dims):
        if isinstance(d, bool) or not isinstance(d, (int, Expr)) or \
                (isinstance(d, Expr) and not d.dtype.is_int):
            raise TileError(f"T.empty: dimension {i} must be an int or a size (T.const, "
                            f"T.dynamic), got {d!r}", current_span())
        if isinstance(d, int) and d < 0:
            raise TileError(f"T.empty: dimension {i} is negative ({d})", current_span())
    try:
        dtype = dt.dtype(dtype)
    except (ValueError, TypeError) as e:
        raise TileError(f"T.empty: {e}", current_span()) from None
    return b.eager.output(dims, dtype, current_span())


def annotate_pass_configs(configs: dict):
    """Pass configs of this function; those given to jit / compile take precedence."""
    b = bld.active("T.annotate_pass_configs", need_kernel=False)
    if not isinstance(configs, dict):
        raise TileError("T.annotate_pass_configs takes a dict {key: value}, got "
                        f"{type(configs).__name__}", current_span())
    try:
        check_pass_configs(configs)
    except TileError as e:
        raise TileError(f"T.annotate_pass_configs: {e.message}", current_span()) from None
    b.func_attrs[FUNC_PASS_CONFIGS] = dict(configs)


def annotate_compile_flags(flags):
    """nvcc flags of this function (a string or a list of them), put before those given to
    jit / compile."""
    b = bld.active("T.annotate_compile_flags", need_kernel=False)
    try:
        checked = check_compile_flags(flags)
    except TileError as e:
        raise TileError(f"T.annotate_compile_flags: {e.message}", current_span()) from None
    b.func_attrs[FUNC_COMPILE_FLAGS] = checked
