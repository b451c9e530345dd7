"""Random valid tile programs: `generate(kind, seed)` gives a spec (spec.py) of that kind.

Every choice comes from one random.Random(seed), so a seed names its program for good. Sizes
are kept small (a handful of blocks of at most a few thousand elements) so that a program runs
in well under a second on the interpreter and in seconds on the emulators. Values stay within
ranges where every dtype involved represents them (|x| <= 1000, so float16 never overflows and
float -> int32 conversions never wrap).

Constructs the generator leaves out, each refused by the compiler with a clear error, not
valid on CUDA, or outside the language's defined behaviour:
- T.reduce_* of a shared region of run-time extents: "the region of x has extents known
  only at run time".
- a gemm's A operand in registers with other than float16 / bfloat16 operands: "register
  operands need float16 or bfloat16 tensor-core operands".
- gemm tiles that do not split over the block's warps in whole 16x8 atoms: "a 16x16 tile
  cannot be split over 4 warps in whole 16x8 tensor-core atoms ...".
- atomic_max / atomic_min on float16 / bfloat16: CUDA has no such atomics.
- tl.enable_persistent_tiles with tl.enable_producer_preload: "cannot be combined: a
  persistent kernel's consumers load their own query tiles".
- float16 and bfloat16 in one operation without a cast: the result takes the left operand's
  type, an order-dependent rule no program should lean on (the generator casts instead).
"""
from __future__ import annotations

import dataclasses
import math
import random

from .numerics import STEPS, step_dtype
from .spec import (Atomic, AtomicUpdate, Attention, Copy, CumSum, ElementAccess, Elementwise,
                   Gemm, Pipelined, Reduce, Reduction, Step)

FLOATS = ("float32", "float16", "bfloat16")
CONSTS = {"scale": (0.5, 1.5, -0.75, 2.0), "shift": (0.25, -1.0, 1.5), "max_c": (-0.5, 0.75),
          "min_c": (0.5, -0.25), "clamp": (1.0, 1.5), "select": (0.0, 0.5, -0.5),
          "pow": (0.5, 1.5), "floor": (2.0, 4.0)}
INT_CONSTS = {"scale": (2, 3, -1), "shift": (1, -3, 5), "max_c": (-2, 1), "min_c": (2, -1),
              "floordiv": (2, 3, -3), "mod": (3, 4, -3), "truncdiv": (2, 3, -2),
              "select": (0, 2)}
MASK_OFFSETS = {"mask_tri": (0, 1, -3), "mask_edge": (0, 2, 5)}  # index offsets, any dtype
CONSTS.update(MASK_OFFSETS)
INT_CONSTS.update(MASK_OFFSETS)
INT_OPS = ("scale", "shift", "max_c", "min_c", "floordiv", "mod", "truncdiv", "abs", "neg",
           "add_w", "sub_w", "mul_w", "max_w", "select", "cast_float32", "cast_float16",
           "mask_tri", "mask_edge")
FLOAT_OPS = tuple(op for op in STEPS if op not in ("floordiv", "mod", "truncdiv"))
SMOOTH_FLOAT_OPS = ("scale", "shift", "abs", "neg", "max_c", "min_c", "exp", "tanh", "sigmoid",
                    "sqrt", "log", "sin", "mask_tri", "mask_edge")
SMOOTH_INT_OPS = ("scale", "shift", "abs", "neg", "max_c", "min_c", "mask_tri", "mask_edge")


def _bound(op: str, b: float, c: float) -> float:
    """An upper bound of |op(v)| for |v| <= b (|w| <= 2)."""
    growth = {"scale": abs(c) * b, "shift": b + abs(c), "add_w": b + 2, "sub_w": b + 2,
              "mul_w": 2 * b, "div_w": 2 * b, "select": max(b, 2), "max_w": max(b, 2),
              "max_c": max(b, abs(c)), "min_c": max(b, abs(c)), "exp": 7.4, "exp2": 8.0,
              "pow": (b + 0.5) ** c, "floor": abs(c) * b + 1, "clamp": min(b, c)}
    return growth.get(op, max(b, 1.0))


def _mixes_halves(a: str, b: str) -> bool:
    return {a, b} == {"float16", "bfloat16"}


def _steps(r: random.Random, n: int, v_dtype: str, w_dtype: str | None, store: str | None,
           smooth=False) -> tuple:
    """n steps valid for a value of v_dtype (stored back into `store` after each step when
    given); w-steps only when a second operand of w_dtype exists."""
    out, bound = [], 2.0
    for _ in range(n):
        integer = v_dtype.startswith("int")
        ops = ((SMOOTH_INT_OPS if integer else SMOOTH_FLOAT_OPS) if smooth else
               (INT_OPS if integer else FLOAT_OPS))
        allowed = []
        for op in ops:
            if STEPS[op][0] == "w" and (w_dtype is None or _mixes_halves(v_dtype, w_dtype)):
                continue
            if op == "div_w" and w_dtype.startswith("int"):
                continue
            if op.startswith("cast_") and store is None and _mixes_halves(op[5:], w_dtype or ""):
                continue
            allowed.append(op)
        op = r.choice(allowed)
        c = r.choice((INT_CONSTS if integer else CONSTS).get(op, (1,) if integer else (1.0,)))
        if _bound(op, bound, c) > 1000:
            continue
        bound = _bound(op, bound, c)
        out.append(Step(op, c, new_loop=r.random() < 0.3))
        v_dtype = store or step_dtype(op, v_dtype, w_dtype or v_dtype)
    return tuple(out)


def _tile(r: random.Random, max_elems=2048):
    while True:
        bm, bn = r.choice((8, 16, 32)), r.choice((8, 16, 32, 64))
        if bm * bn <= max_elems:
            return bm, bn, r.choice((32, 64, 128, 128, 256) if bm * bn >= 512 else (32, 64, 128))


def _sizes(r: random.Random, blocks: tuple, symbolic: bool, most=2.5, aligned=0.35) -> tuple:
    """Launch sizes: each dimension 1 to `most` tiles; with probability `aligned` multiples of
    8 (which TMA and vectorized copies need), else ragged."""
    def one():
        if r.random() < aligned:
            return tuple(8 * r.randint(1, max(1, int(b * most) // 8)) for b in blocks)
        return tuple(r.randint(1, max(1, int(b * most))) for b in blocks)
    return tuple(one() for _ in range(r.choice((2, 3)) if symbolic else 1))


def elementwise(r, symbolic=False):
    bm, bn, threads = _tile(r)
    work = r.choice(FLOATS * 3 + ("int32",))
    x_dtype = r.choice(FLOATS + ("int32",))
    w_dtype = r.choice(FLOATS + ("int32",))
    staging = r.choice(("fragment", "shared", "global"))
    start = x_dtype if staging == "global" else work
    store = None if staging == "global" else work
    if _mixes_halves(start, w_dtype):
        w_dtype = "float32"
    steps = _steps(r, r.randint(1, 5), start, w_dtype, store)
    w_scope = r.choice(("", "", "shared", "fragment")) if staging != "global" else ""
    relaunch = _tile(r) if r.random() < 0.2 else ()
    return Elementwise(_sizes(r, (bm, bn), symbolic), bm, bn, threads, x_dtype, w_dtype, work,
                       r.choice(FLOATS + ("int32",)), staging, r.random() < 0.3, steps, symbolic,
                       w_scope, relaunch)


def reduce(r, symbolic=False):
    bm, bn, threads = _tile(r)
    work = r.choice(FLOATS * 2 + ("int32",))
    x_dtype = "int32" if work == "int32" else r.choice(FLOATS)
    pre = _steps(r, r.randint(0, 2), work, None, work, smooth=True)
    reductions = []
    for _ in range(r.choice((1, 1, 2))):
        init_value = r.choice((-1, 2)) if work == "int32" else r.choice((0.5, -1.25))
        reductions.append(Reduction(r.choice(("sum", "max", "min", "abssum", "absmax")),
                                    r.choice((0, 1)), r.random() < 0.6,
                                    r.choice(("fill", "tensor")), init_value, r.random() < 0.3))
    return Reduce(_sizes(r, (bm, bn), symbolic), bm, bn, threads, x_dtype, work,
                  r.choice(FLOATS if work != "int32" else ("int32", "float32")),
                  r.random() < 0.3, pre, tuple(reductions), symbolic)


def cumsum(r, symbolic=False):
    bm, bn, threads = _tile(r)
    return CumSum(_sizes(r, (bm, bn), symbolic), bm, bn, threads,
                  r.choice(("float32", "float32", "float16", "bfloat16")),
                  r.choice(("fragment", "shared")), r.choice((0, 1)), r.random() < 0.5,
                  r.random() < 0.4, symbolic)


def copy(r, symbolic=False):
    bm, bn, threads = _tile(r)
    dtypes = FLOATS * 2 + ("int32", "float8_e4m3", "float8_e5m2")
    path = tuple((r.choice(("shared", "fragment")), r.choice(dtypes))
                 for _ in range(r.choice((0, 1, 1, 2, 2, 3))))
    one_dim = r.random() < 0.2
    sizes = _sizes(r, (bn,) if one_dim else (bm, bn), symbolic)
    option = r.choice(("", "", "", "disable_tma=True", 'eviction_policy="evict_first"',
                       'eviction_policy="evict_last"'))
    batch = r.choice((0, 0, 0, 2, 3)) if not one_dim else 0
    return Copy(sizes, bm, bn, threads, r.choice(dtypes), r.choice(dtypes), path,
                r.random() < 0.3, one_dim, option, symbolic, batch)


GEMM_DTYPES = (("float16", "float16", "float32"), ("float16", "float16", "float16"),
               ("bfloat16", "bfloat16", "float32"), ("float32", "float32", "float32"),
               ("float8_e4m3", "float8_e4m3", "float32"), ("float8_e5m2", "float8_e4m3",
                                                            "float32"), ("int8", "int8", "int32"))
# Operands without an mma.sync path (float32, fp8, int8) multiply with scalar FMAs on sm_80,
# which the emulator runs slowly (a few ms per multiply-add per thread): such a program is
# kept to about this many per thread over all its blocks and K steps.
FMA_BUDGET = 1024


def _gemm_tiles(r: random.Random, wgmma_like: bool):
    """(bm, bn, bk, threads) whose tiles split over the warps in whole 16x8 atoms; wgmma_like
    tiles are whole warpgroups of 64-row bands (what sm_90a's wgmma takes)."""
    if wgmma_like:
        threads = r.choice((128, 128, 256))
        return (64 * (threads // 128) * r.choice((1, 1, 2)), r.choice((16, 32, 64, 128)),
                r.choice((32, 64)), threads)
    threads = r.choice((32, 64, 128, 128))
    warps = threads // 32
    wm = r.choice([d for d in (1, 2, 4) if warps % d == 0])
    wn = warps // wm
    bm, bn = 16 * wm * r.choice((1, 1, 2)), 8 * wn * r.choice((1, 2, 4))
    while bm * bn > 4096 and bn > 8 * wn:
        bn //= 2
    return bm, bn, r.choice((16, 32)), threads


def gemm(r, symbolic=False):
    wgmma_like = r.random() < 0.45
    # wgmma multiplies 16-bit floats into float32, and fp8 (K-major, see below)
    a_dtype, b_dtype, accum = r.choice([d for d in GEMM_DTYPES if d[2] == "float32" and
                                        d[0] != "float32"] if wgmma_like else GEMM_DTYPES)
    bm, bn, bk, threads = _gemm_tiles(r, wgmma_like)
    fp8 = a_dtype.startswith("float8")
    fma = a_dtype in ("float32", "int8") or fp8
    while fma and bm * bn * bk / threads > FMA_BUDGET and bn > 16:
        bn //= 2
    # fp8 wgmma reads both operands K-major (A as M x K, B as N x K); half the fp8 programs
    # are so, the others take the mma.sync / FMA paths
    trans_A, trans_B = ((False, True) if fp8 and r.random() < 0.5 else
                        (r.random() < 0.4, r.random() < 0.5))
    sizes = _sizes(r, (bm, bn, bk), symbolic, most=2.5 if bm * bn < 8192 else 1.5,
                   aligned=0.7 if wgmma_like else 0.35)
    if fma:
        work = max(math.prod(-(-n // b) for n, b in zip(launch, (bm, bn, bk)))
                   for launch in sizes) * bm * bn * bk / threads
        if work > FMA_BUDGET:  # one tile (ragged or not) in each dimension
            sizes = tuple(tuple(min(n, b) for n, b in zip(launch, (bm, bn, bk)))
                          for launch in sizes)
    integer = accum == "int32"
    c_dtype = r.choice(("int32", "int32", "float32") if integer else
                       (accum, accum, "float16", "bfloat16", "float32"))
    return Gemm(sizes, bm, bn, bk, threads, a_dtype, b_dtype, accum, c_dtype, trans_A, trans_B,
                a_dtype in ("float16", "bfloat16") and r.random() < 0.2,
                r.choice(("Square", "FullRow", "FullCol")),
                # warp specialization takes pipelined loops of 16-byte aligned tiles
                "pipelined" if wgmma_like and r.random() < 0.6 else r.choice(("pipelined",
                                                                             "serial")),
                r.choice((1, 2, 3) if wgmma_like else (0, 1, 2, 3)), r.random() < 0.15,
                r.choice((1, 1, -2, 3) if integer else (1.0, 1.0, 0.5, -2.0)),
                r.random() < 0.25, symbolic,
                (r.choice((1, 2, 4)), r.choice(("row", "column"))) if r.random() < 0.25 else ())


def attention(r, symbolic=False):
    threads = r.choice((32, 64, 128, 128))
    warps = threads // 32
    bm = 16 * warps * r.choice((1, 1, 2)) if warps < 4 else r.choice((64, 64, 128))
    bn = r.choice((16, 32, 64))
    d, dv = r.choice((16, 32, 64)), r.choice((16, 32, 64))
    policies = [r.choice(("FullRow", "FullRow", "Square", "FullCol")) for _ in range(2)]
    sizes = tuple((r.randint(1, bm * 2), r.randint(1, bn * 3))
                  for _ in range(r.choice((2, 3)) if symbolic else 1))
    return Attention(sizes, d, dv, bm, bn, threads, r.choice(("float16", "bfloat16")), *policies,
                     r.random() < 0.4, r.choice((0, 1, 2)), r.choice((0.125, 0.25, 0.5)),
                     r.random() < 0.4, symbolic)


def pipelined(r, symbolic=False):
    bm, bn, threads = _tile(r)
    body = r.sample(("acc_add", "acc_max", "row_sum", "store"), r.randint(1, 3))
    trips = r.randint(0, 5)
    if r.random() < 0.35:
        sizes = ((8 * r.randint(1, bm * 5 // 16), bn * max(trips, 1)),)
    else:
        sizes = ((r.randint(1, bm * 5 // 2), r.randint(1, bn * max(trips, 1) + bn // 2)),)
    return Pipelined(sizes, bm, bn, threads, trips, r.random() < 0.3, r.randint(1, 3),
                     r.choice(FLOATS), "row_sum" in body or r.random() < 0.3, tuple(body),
                     r.choice((0.25, -0.5)), r.random() < 0.3)


def atomic(r, symbolic=False):
    bm, bn, threads = _tile(r)
    op = r.choice(("add", "add", "max", "min"))
    dtype = r.choice(("float32", "float32", "float16", "bfloat16", "int32") if op == "add"
                     else ("float32", "int32"))
    form = r.choice(("tile", "scalar", "shared"))
    if form == "tile":
        R, C = r.randint(1, 2 * bm), r.randint(1, bn + 8)
    else:
        R, C = r.randint(1, min(bm, 16)), r.randint(1, min(bn, 32))
    scope = r.choice(("fragment", "shared"))
    use_tma = form == "tile" and op == "add" and scope == "shared" and r.random() < 0.5
    update = AtomicUpdate(op, form, r.randint(1, R), r.choice((1, 3)), r.random() < 0.5,
                          use_tma)
    sizes = ((r.randint(1, bm * 2), r.randint(1, bn * 2), R, C),)
    return Atomic(sizes, bm, bn, threads, dtype, scope, update)


def element_access(r, symbolic=False):
    bm, bn, threads = _tile(r, max_elems=1024)
    dtype = r.choice(("float32", "float16", "int32"))
    accesses, reads = [], 0
    for _ in range(r.randint(1, 4)):
        i, j = r.randrange(bm), r.randrange(bn)
        if r.random() < 0.5:
            accesses.append(("write", i, j, r.choice((2, -3)) if dtype == "int32" else
                             r.choice((2.0, -3.5))))
        else:
            accesses.append(("read", i, j, reads))
            reads += 1
    return ElementAccess(((bm, bn),), threads, dtype, tuple(accesses))


GENERATORS = {"elementwise": elementwise, "reduce": reduce, "cumsum": cumsum, "copy": copy,
              "gemm": gemm, "attention": attention, "pipelined": pipelined, "atomic": atomic,
              "element_access": element_access}
SYMBOLIC_BASES = ("elementwise", "reduce", "cumsum", "copy", "gemm", "attention")
KIND_NAMES = tuple(GENERATORS) + ("symbolic",)


# Compiler choices a program may turn (pass configs): each switches a pass on or off, so the
# same program takes another path through the compiler (persistent blocks looping over tiles,
# TMA multicast in clusters, cp.async instead of warp specialization, mma.sync instead of
# wgmma, stores without TMA, masks evaluated per element, ...).
CONFIGS = (("tl.enable_persistent_tiles", 2), ("tl.enable_persistent_tiles", True),
           ("tl.enable_tma_multicast", True), ("tl.enable_producer_preload", True),
           ("tl.disable_warp_specialized", True), ("tl.disable_tma_lower", True),
           ("tl.disable_wgmma", True), ("tl.disable_tma_store", True),
           ("tl.disable_uniform_masks", True), ("tl.disable_mma_rotation", True),
           ("tl.disable_wgmma_rotation", True), ("tl.disable_epilogue_staging", True),
           ("tl.disable_l2_prefetch", True), ("tl.disable_k_alternation", True),
           ("tl.disable_wgmma_batch_merge", True), ("tl.disable_warpgroup_pingpong", True))


def _configs(r: random.Random) -> tuple:
    """Most programs compile with the defaults; a third turn one or two passes."""
    if r.random() < 0.67:
        return ()
    chosen = {}
    for key, value in r.sample(CONFIGS, r.choice((1, 2))):
        chosen.setdefault(key, value)
    if "tl.enable_persistent_tiles" in chosen:  # refused together with the preload
        chosen.pop("tl.enable_producer_preload", None)
    return tuple(chosen.items())


def generate(kind: str, seed: int):
    """The program of `kind` that `seed` names ("symbolic": one of SYMBOLIC_BASES with
    symbolic sizes, launched with two or three sizes)."""
    r = random.Random(f"{kind}:{seed}")
    if kind == "symbolic":
        spec = GENERATORS[r.choice(SYMBOLIC_BASES)](r, symbolic=True)
    else:
        spec = GENERATORS[kind](r)
    if kind == "element_access":
        return spec
    return dataclasses.replace(spec, configs=_configs(r))
