"""Lowered (thread-level) IR -> CUDA C++ text over our header library.

What the emitter expects, i.e. what the lowering passes produce:
- every Kernel has `thread_var` (the flat thread index) and no tile ops or parallel loops left;
- shared buffers are 1-d and placed in the dynamic arena at func.attrs["smem_offsets"];
- fragment buffers have become per-thread "local" arrays indexed by compile-time constants;
- intrinsics are Call nodes named "tc::..." (header functions) evaluated for their effect.
Each kernel is an `extern "C" __global__` function taking every tensor parameter as a pointer,
then the scalar parameters, then the symbolic sizes, in that order (see kernel_signature).
"""
from __future__ import annotations

import math

import numpy as np

from ....arith.bounds import bound_of
from ....ir.linear import simplify as linear_simplify
from ....errors import TileError
from ....grid_limits import folded, folded_extents
from .pairs import emit_pairs
from .reserved_names import c_identifier
from ....ir.buffer import GLOBAL, LOCAL, LOCAL_VAR, Buffer, is_shared
from ....ir.expr import Binary, BufferLoad, Call, Cast, Const, Select, Unary, Var
from ....ir.stmt import (PERSISTENT_TILES, Allocate, BufferStore, Evaluate, For, IfThenElse, Kernel,
                       PrimFunc, SeqStmt)
from ....ir.visitor import walk
from ....ir.annotations import (IMPORT_SOURCE_CALL, CLUSTER_DIMS, MIN_BLOCKS_PER_SM,
                                PERSISTENT_BLOCKS, PRODUCER_THREADS, SMEM_ARENA, TENSOR_MAPS,
                                UNROLL_FACTOR, USE_SWIZZLE, WARPGROUP_THREAD)
from ..intrinsics import (BIASED_INT_TO_FLOAT, BIASED_INT_TO_HALF, BIT_CAST, CVT, MAX, MIN,
                          NAMESPACE, RASTERIZE, RASTERIZE_CLUSTERED)

_MIN_MAX = {"min": MIN, "max": MAX}
_NATIVE = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float32", "float64"}
_F32_MATH = {"exp": "expf", "exp2": "exp2f", "exp10": "exp10f", "log": "logf", "log2": "log2f",
             "log10": "log10f", "log1p": "log1pf", "sqrt": "sqrtf", "rsqrt": "rsqrtf",
             "sin": "sinf", "cos": "cosf", "tan": "tanf", "tanh": "tanhf", "erf": "erff",
             "floor": "floorf", "ceil": "ceilf", "round": "roundf", "trunc": "truncf",
             "abs": "fabsf", "pow": "powf", "fmod": "fmodf"}
# Operators whose result on integers narrower than int may leave their type's range.
_WRAPPING = frozenset({"<<", "+", "-", "*"})


def _narrow_int(d) -> bool:
    return d.is_int and d.bits < 32

_PREC = {"or": 1, "and": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7,
         ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10}
_C_OP = {"and": "&&", "or": "||", "//": "/"}

PRELUDE_INCLUDE = '#include "tilecraft/tc.h"\n'
FP8_WGMMA = "k32_f32_e"  # in the names of the wrappers in wgmma_fp8.h
TF32_WGMMA = "k8_f32_tf32"  # and in wgmma_tf32.h
PRELUDE = PRELUDE_INCLUDE + """\
using tc::half_t;
using tc::bfloat16_t;
using tc::fp8_e4_t;
using tc::fp8_e5_t;
// Floor division and modulo for index arithmetic that may be negative.
__device__ __forceinline__ long long tc_floordiv(long long a, long long b) {
  long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long tc_floormod(long long a, long long b) {
  long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


def kernel_signature(func: PrimFunc) -> list:
    """[(kind, object)]: ("tensor", Buffer), ("scalar", Var), ("size", Var) in argument order,
    ("workspace", Buffer) for each T.alloc_global (allocated by the launcher at every call and
    passed to every launch of the program), then ("tensormap", TensorMapVar) for the TMA
    tensor maps the lowered kernels use."""
    args = [("tensor", p) for p in func.params if isinstance(p, Buffer)]
    args += [("scalar", p) for p in func.params if isinstance(p, Var)]
    seen = {id(p) for p in func.params}
    for p in func.params:
        for d in (p.shape if isinstance(p, Buffer) else ()):
            if isinstance(d, Var) and id(d) not in seen:
                seen.add(id(d))
                args.append(("size", d))
    for w in workspaces(func):
        if id(w) not in seen:
            seen.add(id(w))
            args.append(("workspace", w))
    for k in func.kernels():
        for m in k.attrs.get(TENSOR_MAPS, ()):
            if id(m) not in seen:
                seen.add(id(m))
                args.append(("tensormap", m))
    return args


def workspaces(func: PrimFunc) -> list:
    """The global buffers the program's kernels allocate (T.alloc_global), in order."""
    return [n.buffer for n in walk(func.body)
            if isinstance(n, Allocate) and n.buffer.scope == GLOBAL]


def launch_threads(k: Kernel) -> int:
    """Threads per block at launch: the kernel's own plus a warp-specialized producer's."""
    return k.num_threads + k.attrs.get(PRODUCER_THREADS, 0)


class CudaEmitter:
    def __init__(self, func: PrimFunc):
        self.func = func
        self.names: dict[int, str] = {}
        # The objects named, kept alive with their names: a name is looked up by id(), and an
        # object the IR does not hold (the pair index of codegen/pairs.py, made for a loop it
        # may then print as it is) would otherwise free its id for a later object, which would
        # inherit its name or not depending on where memory was reused.
        self.named: list = []
        self.taken: set[str] = set()
        self.lines: list[str] = []
        self.last_line = None
        self.var_bounds: dict = {}
        for kind, obj in kernel_signature(func):
            self.name(obj)
            if kind == "size":
                # A size is a non-negative value of its type: an int's largest is 2^31 - 1.
                self.var_bounds[id(obj)] = (0, INT32_MAX if obj.dtype.bits <= 32
                                            else float("inf"))

    def name(self, obj) -> str:
        key = id(obj)
        if key not in self.names:
            base = c_identifier(obj.name)
            name, n = base, 0
            while name in self.taken:
                n += 1
                name = f"{base}_{n}"
            self.taken.add(name)
            self.names[key] = name
            self.named.append(obj)
        return self.names[key]

    # --- expressions ------------------------------------------------------------
    def expr(self, e, prec: int = 0) -> str:
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, BufferLoad):
            return f"{self.name(e.buffer)}[{self.flat_index(e.buffer, e.indices)}]"
        if isinstance(e, Binary):
            return self.binary(e, prec)
        if isinstance(e, Unary):
            op = {"not": "!", "-": "-", "~": "~"}[e.op]
            return self.wrapped(f"({op}{self.expr(e.a, 11)})", e)
        if isinstance(e, Select):
            return f"({self.expr(e.cond, 1)} ? {self.expr(e.a, 1)} : {self.expr(e.b, 1)})"
        if isinstance(e, Cast):
            return self.cast(e.value, e.dtype)
        if isinstance(e, Call):
            return self.call(e)
        raise TileError(f"cannot emit CUDA for {type(e).__name__}", getattr(e, "span", None))

    def const(self, c: Const) -> str:
        d, v = c.dtype, c.value
        if d.is_bool:
            return "true" if v else "false"
        if d.is_int:
            suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U"}.get(d.name, "")
            return f"{v}{suffix}" if v >= 0 or suffix else f"({v})"
        if math.isinf(v):
            text = "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
        elif math.isnan(v):
            text = "__int_as_float(0x7fffffff)"
        else:
            text = repr(float(v)) + ("" if d.name == "float64" else "f")
            text = text if not text.startswith("-") else f"({text})"
        if d.name in ("float32", "float64"):
            return text
        return f"{CVT.format(type=d.c_type)}({text})"

    def binary(self, e: Binary, prec: int) -> str:
        if e.op in ("min", "max"):
            a, b = self.expr(e.a), self.expr(e.b)
            if _narrow_int(e.dtype):   # one overload: a literal is an int in C
                a, b = f"({e.dtype.c_type})({a})", f"({e.dtype.c_type})({b})"
            return f"{_MIN_MAX[e.op].name}({a}, {b})"
        if e.op in ("//", "%") and e.dtype.is_int and not self.nonnegative(e):
            fn = "tc_floordiv" if e.op == "//" else "tc_floormod"
            return f"(({e.dtype.c_type}){fn}({self.expr(e.a)}, {self.expr(e.b)}))"
        if e.op == "%" and e.dtype.is_float:
            return f"fmodf({self.expr(e.a)}, {self.expr(e.b)})"
        if e.op == "//" and e.dtype.is_float:
            return f"floorf({self.expr(e.a)} / {self.expr(e.b)})"
        p = _PREC[e.op]
        text = f"{self.expr(e.a, p)} {_C_OP.get(e.op, e.op)} {self.expr(e.b, p + 1)}"
        if e.op in _WRAPPING and _narrow_int(e.dtype):
            return self.wrapped(f"({text})", e)
        return f"({text})" if p < prec else text

    @staticmethod
    def wrapped(text: str, e) -> str:
        """C computes on integers narrower than int in int: a uint16 shifted left, negated or
        overflowing an addition keeps bits its type does not have, which a later shift right,
        comparison or bit_cast would see. The result goes back to its own type, as the IR
        means it."""
        return f"(({e.dtype.c_type}){text})" if _narrow_int(e.dtype) else text

    def nonnegative(self, e: Binary) -> bool:
        return bound_of(e.a, self.var_bounds)[0] >= 0 and bound_of(e.b, self.var_bounds)[0] > 0

    def cast(self, value, d) -> str:
        if value.dtype.is_int and d.name in ("float32", "float16"):
            fast = self.small_int_cast(value, d)
            if fast is not None:
                return fast
        if d.name in _NATIVE and value.dtype.name in _NATIVE or d.is_handle:
            # A C cast binds tighter than any binary operator: (float)(a / b), not
            # (float)a / b, which would divide in float.
            inner = self.expr(value, 11)
            return f"(({'void*' if d.is_handle else d.c_type}){inner})"
        return f"{CVT.format(type=d.c_type)}({self.expr(value)})"

    def small_int_cast(self, value, d) -> str | None:
        """An integer whose bounds fit the mantissa converted through its bits (types.h,
        biased_int_to_float / _half): unpacked 4-bit weights and other small integers become
        float16 or float32 without the conversion unit; None where the bounds do not allow."""
        lo, hi = bound_of(value, self.var_bounds)
        bias = self.int_bias(d, lo, hi)
        if bias is None:
            return None
        fn = BIASED_INT_TO_FLOAT if d.name == "float32" else BIASED_INT_TO_HALF
        y = value if lo == 0 else linear_simplify(value - lo)
        return f"{fn.name}((uint32_t)({self.expr(y)}), {bias})"

    @staticmethod
    def int_bias(d, lo, hi) -> str | None:
        """The bias (C text) that takes integers in [lo, hi], moved to start at 0, to float32
        or float16 d through their bits: 2^23 - lo as a float, or the bits of the half
        1024 - lo; None where the range does not fit d's mantissa exactly."""
        if not all(isinstance(x, int) for x in (lo, hi)):
            return None
        if d.name == "float32" and -(1 << 22) <= lo and hi < (1 << 22):
            return f"{float((1 << 23) - lo)!r}f"
        if d.name == "float16" and -1024 <= lo and hi - lo < 1024 and hi <= 1024:
            return f"{int(np.float16(1024 - lo).view(np.uint16)):#06x}"
        return None

    def call(self, e: Call) -> str:
        if e.name == "address_of":
            load = e.args[0]
            if isinstance(load, Var):  # a by-value kernel parameter (a TMA tensor map)
                return f"(&{self.name(load)})"
            return f"(&{self.name(load.buffer)}[{self.flat_index(load.buffer, load.indices)}])"
        if e.name == "call_extern":
            return f"{e.args[0]}({', '.join(self.arg(a) for a in e.args[1:])})"
        if e.name == "reinterpret":
            x = e.args[0]
            inner = f"({x.dtype.c_type}){self.expr(x, 11)}" if _narrow_int(x.dtype) and \
                not isinstance(x, (Var, BufferLoad)) else self.expr(x)
            return f"{BIT_CAST.format(type=e.dtype.c_type)}({inner})"
        if e.name.startswith(NAMESPACE):
            return f"{e.name}({', '.join(self.arg(a) for a in e.args)})"
        if e.name in ("isnan", "isinf", "isfinite"):  # double stays double: 1e300 is finite
            x = e.args[0]
            return f"{e.name}({self.expr(x) if x.dtype.name == 'float64' else self.float_arg(x)})"
        if e.name == "sigmoid":
            x = self.float_arg(e.args[0])
            return self.back(f"(1.0f / (1.0f + expf(-{x})))", e.dtype)
        if e.name == "abs" and e.dtype.is_int:
            return f"abs({self.expr(e.args[0])})"
        fn = _F32_MATH.get(e.name)
        if fn is None:
            raise TileError(f"no CUDA implementation of {e.name}", e.span)
        if e.dtype.name == "float64":
            fn = fn[:-1] if fn.endswith("f") else fn
            return f"{fn}({', '.join(self.expr(a) for a in e.args)})"
        return self.back(f"{fn}({', '.join(self.float_arg(a) for a in e.args)})", e.dtype)

    def float_arg(self, a) -> str:
        return self.expr(a) if a.dtype.name == "float32" else self.cast(a, _f32())

    def back(self, text: str, d) -> str:
        return text if d.name == "float32" else f"{CVT.format(type=d.c_type)}({text})"

    def arg(self, a) -> str:
        if isinstance(a, str):
            return a
        if isinstance(a, Buffer):
            return self.name(a)
        return self.expr(a)

    def flat_index(self, buffer: Buffer, indices) -> str:
        """The element offset of buffer[indices]: in int, or in long long for a global
        tensor whose elements may number 2^31 or more (wide_offsets)."""
        if buffer.scope == GLOBAL and wide_offsets(buffer, indices, self.var_bounds):
            return self.wide_flat_index(buffer, indices)
        if len(indices) == 1:
            return self.expr(indices[0])
        text = self.expr(indices[0], 10)
        for dim, idx in zip(buffer.shape[1:], indices[1:]):
            extent = str(dim) if isinstance(dim, int) else self.expr(dim, 10)
            text = f"({text}) * {extent} + {self.expr(idx, 9)}"
        return text

    def wide_flat_index(self, buffer: Buffer, indices) -> str:
        """flat_index in 64-bit arithmetic: the leading index is widened, so every product
        with an extent after it is a 64-bit one; an index that may itself leave int's range
        (into a dimension of 2^31 elements or more) is computed in 64 bits throughout."""
        text = self.wide(indices[0])   # parenthesized already
        for n, (dim, idx) in enumerate(zip(buffer.shape[1:], indices[1:]), start=2):
            extent = str(dim) if isinstance(dim, int) else self.expr(dim, 10)
            part = self.wide(idx) if not fits_int32(bound_of(idx, self.var_bounds)) \
                else self.expr(idx, 9)
            text = f"{text} * {extent} + {part}"
            text = f"({text})" if n < len(indices) else text
        return text

    def wide(self, e) -> str:
        """e as a long long, its + - * and floor division done in 64 bits wherever the bounds
        of a part leave int's range (a part proven to fit is computed in int, then widened)."""
        if isinstance(e, Binary) and e.dtype.is_int and e.op in ("+", "-", "*", "//", "%") \
                and not fits_int32(bound_of(e, self.var_bounds)):
            # A 64-bit left operand makes the operation a 64-bit one.
            a = self.wide(e.a)
            b = self.expr(e.b, 11) if fits_int32(bound_of(e.b, self.var_bounds)) \
                else self.wide(e.b)
            if e.op in ("//", "%") and not self.nonnegative(e):
                return f"{'tc_floordiv' if e.op == '//' else 'tc_floormod'}({a}, {b})"
            return f"({a} {_C_OP.get(e.op, e.op)} {b})"
        if isinstance(e, Const) and e.dtype.is_int:
            return f"{e.value}LL"
        return f"((long long){self.expr(e, 11)})"

    # --- statements ---------------------------------------------------------------
    def emit(self, depth: int, text: str, span=None):
        if span is not None and (span.filename, span.line) != self.last_line:
            self.last_line = (span.filename, span.line)
            self.lines.append("  " * depth + f"// {span.filename.rsplit('/', 1)[-1]}:{span.line}")
        self.lines.append("  " * depth + text)

    def stmt(self, s, depth: int):
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x, depth)
        elif isinstance(s, For) and s.annotations.get(PERSISTENT_TILES):
            self.tile_loop(s, depth)
        elif isinstance(s, For) and emit_pairs(self, s, depth):
            pass
        elif isinstance(s, For):
            v = self.name(s.var)
            start, extent = self.expr(s.start), self.expr(s.extent)
            end = extent if start == "0" else f"{start} + {extent}"
            self.var_bounds[id(s.var)] = (bound_of(s.start, self.var_bounds)[0],
                                          bound_of(s.start + s.extent, self.var_bounds)[1] - 1)
            if s.kind in ("unroll", "vectorized"):
                factor = s.annotations.get(UNROLL_FACTOR)
                self.emit(depth, f"#pragma unroll {factor}" if factor else "#pragma unroll",
                          s.span)
            elif s.kind == "parallel":
                raise TileError("internal: a T.Parallel loop reached the CUDA emitter", s.span)
            self.emit(depth, f"for (int {v} = {start}; {v} < {end}; ++{v}) {{", s.span)
            self.stmt(s.body, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if ({self.expr(s.cond)}) {{", s.span)
            narrowed = self.narrow(s.cond)
            self.stmt(s.then_body, depth + 1)
            self.var_bounds.update(narrowed)
            if s.else_body is not None:
                self.emit(depth, "} else {")
                self.stmt(s.else_body, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, BufferStore):
            target = f"{self.name(s.buffer)}[{self.flat_index(s.buffer, s.indices)}]"
            self.emit(depth, f"{target} = {self.expr(s.value)};", s.span)
        elif isinstance(s, Evaluate):
            if getattr(s.value, "name", None) != IMPORT_SOURCE_CALL:  # emit_cuda placed it
                self.emit(depth, f"{self.expr(s.value)};", s.span)
        elif isinstance(s, Allocate):
            self.allocate(s, depth)
        else:
            raise TileError(f"internal: {type(s).__name__} reached the CUDA emitter",
                            getattr(s, "span", None))

    def narrow(self, cond) -> dict:
        """Inside `if (v > c)` / `if (v >= c)` the loop variable v is at least c + 1 / c (the
        index arithmetic of a stage released one iteration late stays plain % and /): narrows
        var_bounds and returns the bounds to restore after the branch."""
        if not (isinstance(cond, Binary) and cond.op in (">", ">=") and
                isinstance(cond.a, Var) and id(cond.a) in self.var_bounds):
            return {}
        lo, hi = bound_of(cond.b, self.var_bounds)
        if lo != hi:
            return {}
        old = self.var_bounds[id(cond.a)]
        least = lo + 1 if cond.op == ">" else lo
        self.var_bounds[id(cond.a)] = (max(old[0], least), old[1])
        return {id(cond.a): old}

    def allocate(self, s: Allocate, depth: int):
        b = s.buffer
        name, ctype = self.name(b), b.dtype.c_type
        if is_shared(b.scope):
            offset = self.func.attrs[SMEM_ARENA][id(b)]
            self.emit(depth, f"{ctype}* {name} = reinterpret_cast<{ctype}*>(tc_smem + {offset});",
                      s.span)
        elif b.scope in (LOCAL, LOCAL_VAR):
            size = 1
            for d in b.shape:
                size *= d
            self.emit(depth, f"{ctype} {name}[{size}];", s.span)
        elif b.scope == GLOBAL:
            pass   # a workspace: a parameter of the kernel (kernel_signature)
        else:
            raise TileError(f"internal: buffer {b.name} in scope {b.scope} reached the CUDA "
                            "emitter", s.span)

    def kernel(self, k: Kernel, index: int) -> str:
        name = f"{self.func.name}_kernel{index}"
        params = []
        for kind, obj in kernel_signature(self.func):
            ctype = obj.dtype.c_type
            if kind == "tensormap":
                params.append(f"const __grid_constant__ tc::TensorMap {self.name(obj)}")
                continue
            params.append(f"{ctype}* __restrict__ {self.name(obj)}"
                          if kind in ("tensor", "workspace") else f"{ctype} {self.name(obj)}")
        threads = k.num_threads
        # A warp-specialized kernel shares its register file between roles (setmaxnreg), which
        # ptxas honours only with a register count fixed at entry: one block per SM, unless
        # the user asked for more (T.annotate_min_blocks_per_sm: then no setmaxnreg).
        blocks = k.attrs.get(MIN_BLOCKS_PER_SM)
        if k.attrs.get(PRODUCER_THREADS):
            bounds = f"{launch_threads(k)}, {blocks or 1}"
        else:
            bounds = f"{threads}, {blocks}" if blocks else f"{threads}"
        cluster = k.attrs.get(CLUSTER_DIMS)
        # Compile-time cluster dimensions: an ordinary launch then runs the grid as clusters.
        dims_text = f"__cluster_dims__({', '.join(map(str, cluster))}) " if cluster else ""
        self.emit(0, f'extern "C" __global__ void __launch_bounds__({bounds}) {dims_text}'
                     f"{name}({', '.join(params)}) {{")
        self.emit(1, "extern __shared__ __align__(1024) unsigned char tc_smem[];")
        tx = self.name(k.thread_var)
        dims = k.threads
        flat = "threadIdx.x" if len(dims) == 1 else (
            f"threadIdx.x + {dims[0]} * threadIdx.y" if len(dims) == 2 else
            f"threadIdx.x + {dims[0]} * (threadIdx.y + {dims[1]} * threadIdx.z)")
        self.emit(1, f"const int {tx} = {flat};")
        self.var_bounds[id(k.thread_var)] = (0, threads - 1)
        wtx = k.attrs.get(WARPGROUP_THREAD)
        if wtx is not None:  # the thread's index within its warpgroup (seesaw_warpgroups)
            self.emit(1, f"const int {self.name(wtx)} = {tx} % 128;")
            self.var_bounds[id(wtx)] = (0, 127)
        self.kernel_node = k
        if k.attrs.get(PERSISTENT_BLOCKS) is None and folded(k.grid):
            # A grid over 65535 along y or z runs as one along x (grid_limits.py).
            if k.attrs.get(CLUSTER_DIMS):
                raise TileError(f"T.Kernel: a grid of {list(folded_extents(k.grid))} blocks "
                                "runs folded along x, which thread-block clusters cannot "
                                "span; use a grid within 65535 along y and z", k.span)
            x, y, z = folded_extents(k.grid)
            self.bind_block_vars(k, 1, (f"(int)(blockIdx.x % {x}u)",
                                        f"(int)(blockIdx.x / {x}u % {y}u)",
                                        f"(int)(blockIdx.x / {x * y}u)"),
                                 f"make_uint3({x}u, {y}u, {z}u)")
        elif k.attrs.get(PERSISTENT_BLOCKS) is None:
            self.bind_block_vars(k, 1, ("blockIdx.x", "blockIdx.y", "blockIdx.z"), "gridDim")
        self.stmt(k.body, 1)
        self.emit(0, "}")
        return name

    def bind_block_vars(self, k: Kernel, depth: int, index: tuple, grid: str,
                        prefix: str = ""):
        """`const int bx = ...` for each block variable, from the block's (or, in a persistent
        kernel, the tile's) coordinates `index` in a launch grid `grid` (a uint3)."""
        swizzle = k.attrs.get(USE_SWIZZLE)
        if swizzle is not None and len(k.block_vars) >= 2:
            # T.use_swizzle: blocks that run together cover a compact patch of the grid.
            panel, order = swizzle
            order = "row" if order == "row" else "col"
            cluster = k.attrs.get(CLUSTER_DIMS)
            # Over the grid of clusters, so the blocks of a cluster keep sharing their tiles.
            fn = (RASTERIZE_CLUSTERED.format(order=order, x=cluster[0], y=cluster[1]) if cluster
                  else RASTERIZE.format(order=order))
            self.emit(depth, f"const int2 tc_raster = {fn}"
                             f"({panel}, {grid}, {index[0]}, {index[1]});")
            index = ("tc_raster.x", "tc_raster.y", index[2])
        for var, axis, extent in zip(k.block_vars, index, k.grid):
            self.emit(depth, f"{prefix}const int {self.name(var)} = {axis};")
            self.var_bounds[id(var)] = (0, bound_of(extent, self.var_bounds)[1] - 1)

    def tile_loop(self, s: For, depth: int):
        """A persistent kernel's loop over the tiles of its grid (PERSISTENT_TILES): this
        block's share of them, with the block variables bound per tile."""
        k, v = self.kernel_node, self.name(s.var)
        self.var_bounds[id(s.var)] = (0, bound_of(s.extent, self.var_bounds)[1] - 1)
        # Rounds of gridDim.x consecutive tiles, taken in serpentine order (tiles_of_block):
        # block b gets tile b of even rounds and tile gridDim.x - 1 - b of odd ones.
        r = f"{v}_round"
        self.emit(depth, f"for (int {r} = 0, {v} = blockIdx.x; {v} < {self.expr(s.extent)}; "
                         f"++{r}, {v} = {r} * gridDim.x + ({r} % 2 ? gridDim.x - 1 - blockIdx.x "
                         f": blockIdx.x)) {{", s.span)
        extents = [self.expr(g) for g in k.grid] + ["1", "1"]
        gx, gy = (f"({e})" for e in extents[:2])
        # A role may not need every coordinate (the producer of a GEMM loads no C).
        self.bind_block_vars(k, depth + 1, (f"{v} % {gx}", f"{v} / {gx} % {gy}",
                                            f"{v} / ({gx} * {gy})"),
                             f"make_uint3({', '.join(extents[:3])})", "[[maybe_unused]] ")
        self.stmt(s.body, depth + 1)
        self.emit(depth, "}")


INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def fits_int32(bounds: tuple) -> bool:
    return bounds[0] >= INT32_MIN and bounds[1] <= INT32_MAX


def wide_offsets(buffer: Buffer, indices, var_bounds: dict) -> bool:
    """Whether the element offset of buffer[indices] needs 64-bit arithmetic: the tensor may
    hold 2^31 elements or more (a symbolic extent counts as int's largest value), and the
    bounds of the indices do not prove this offset below 2^31. Offsets of smaller tensors stay
    32-bit, which is shorter code: an access inside such a tensor fits, and one outside it is
    guarded and never dereferenced."""
    elements = 1
    for dim in buffer.shape:
        elements *= dim if isinstance(dim, int) else max(1, min(
            bound_of(dim, var_bounds)[1], INT32_MAX))
    if elements <= INT32_MAX + 1:
        return False
    offset, stride = (0, 0), 1
    for dim, idx in reversed(list(zip(buffer.shape, indices))):
        lo, hi = bound_of(idx, var_bounds)
        offset = (offset[0] + min(lo * stride, 0), offset[1] + max(hi * stride, 0))
        stride *= dim if isinstance(dim, int) else min(bound_of(dim, var_bounds)[1], INT32_MAX)
    return not fits_int32(offset)


def _f32():
    from ....ir import dtypes
    return dtypes.float32


def emit_cuda(func: PrimFunc) -> tuple[str, list[str]]:
    """CUDA source for every launch of func, and the kernels' names in launch order."""
    em = CudaEmitter(func)
    em.lines.append(PRELUDE)
    imported = [n.args[0] for k in func.kernels() for n in walk(k.body)
                if isinstance(n, Call) and n.name == IMPORT_SOURCE_CALL]
    em.lines.extend(dict.fromkeys(imported))   # each text once, in program order
    names = []
    for i, k in enumerate(func.kernels()):
        names.append(em.kernel(k, i))
        em.lines.append("")
    source = "\n".join(em.lines)
    # Only kernels that use them parse the fp8 and tf32 wrappers (headers as long as wgmma.h).
    for marker, header in ((FP8_WGMMA, "wgmma_fp8.h"), (TF32_WGMMA, "wgmma_tf32.h")):
        if marker in source:
            source = source.replace(PRELUDE_INCLUDE,
                                    PRELUDE_INCLUDE + f'#include "tilecraft/{header}"\n', 1)
    return source, names
