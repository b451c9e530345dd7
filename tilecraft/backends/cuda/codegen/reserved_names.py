"""Which identifiers a kernel's own names must not take in the generated CUDA.

A tensor, buffer or variable keeps its Python name in the source, so a program may call a
tensor `new`, `default` or `int` (fine in Python, keywords in C++), `threadIdx` (a CUDA
builtin), `tc_smem` (the emitter's shared-memory arena), `half_t` (a type the prelude brings
in), `NAN` (a macro of the CUDA headers) or `expf` (a function the emitted math calls). Such a
name would not compile, or would silently mean something else; `c_identifier` gives it a
trailing underscore instead. Every other name is kept as it is, so the text of kernels whose
names collide with nothing does not change.
"""
from __future__ import annotations

CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast else
    enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())

# Names CUDA defines in every kernel, and the vector and fixed-width types emitted code uses.
CUDA_BUILTINS = frozenset("""
    threadIdx blockIdx blockDim gridDim warpSize dim3 int2 int4 uint2 uint3 uint4 float2 float4
    make_uint3 make_int2 uint8_t uint16_t uint32_t uint64_t int8_t int16_t int32_t int64_t
    size_t ptrdiff_t half half2 nv_bfloat16
""".split())

# Macros of the CUDA and C headers a kernel includes: textual, so a variable named like one
# is replaced by the preprocessor.
HEADER_MACROS = frozenset("""
    NULL NAN INFINITY HUGE_VAL HUGE_VALF MAXFLOAT EOF assert errno M_PI M_E M_LN2 M_LOG2E
    M_SQRT2 INT_MAX INT_MIN UINT_MAX LLONG_MAX LLONG_MIN ULLONG_MAX CHAR_BIT FLT_MAX FLT_MIN
    FLT_EPSILON DBL_MAX DBL_MIN DBL_EPSILON CUDART_INF_F CUDART_NAN_F
""".split())

# What the prelude and the emitter declare around a kernel's own names (codegen/cuda.py).
PRELUDE_NAMES = frozenset("""
    tc tc_smem tc_raster tc_floordiv tc_floormod half_t bfloat16_t fp8_e4_t fp8_e5_t
""".split())

# Math functions the emitted code calls unqualified (float and double forms).
_MATH = """exp exp2 exp10 log log2 log10 log1p sqrt rsqrt sin cos tan tanh erf floor ceil round
    trunc fabs pow fmod""".split()
MATH_FUNCTIONS = frozenset(_MATH + [f"{n}f" for n in _MATH] + ["abs", "isnan", "isinf",
                                                              "isfinite"])

RESERVED = CPP_KEYWORDS | CUDA_BUILTINS | HEADER_MACROS | PRELUDE_NAMES | MATH_FUNCTIONS


def is_reserved(name: str) -> bool:
    """A name the kernel cannot declare: listed above, or one C++ keeps for the implementation
    (a leading double underscore or underscore and capital) or our headers for their macros
    (TC_...)."""
    return name in RESERVED or name.startswith(("__", "TC_")) or \
        (len(name) > 1 and name[0] == "_" and name[1].isupper())


def c_identifier(name: str) -> str:
    """name made a valid C++ identifier that collides with nothing the kernel needs."""
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or "v"
    if base[0].isdigit():
        base = "v" + base
    if base.startswith("__") or (len(base) > 1 and base[0] == "_" and base[1].isupper()):
        base = "v" + base
    return base + "_" if is_reserved(base) else base
