"""Tile operators: copy, gemm, reductions, cumsum, fill / clear, atomics."""
from __future__ import annotations

from ..ir.linear import constant_value, equal
from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..ir import tileop as top
from ..ir.buffer import (FRAGMENT, GLOBAL, LOCAL, LOCAL_VAR, Buffer, BufferRegion, is_shared,
                         region_of)
from ..ir.expr import BufferLoad, Expr, cast, convert, is_python_number
from ..ir.stmt import BufferStore, IfThenElse


def _operand(what: str, role: str, x) -> BufferRegion | BufferLoad:
    if isinstance(x, (Buffer, BufferRegion, BufferLoad)):
        return x
    raise TileError(f"{what}: {role} must be a buffer, a slice of one, or a tile origin "
                    f"A[i, j], got {type(x).__name__}", current_span())


def _shape_text(extents) -> str:
    return "(" + ", ".join(str(constant_value(e)) if constant_value(e) is not None else repr(e)
                           for e in extents) + ")"


def _non_unit(extents) -> list:
    return [e for e in extents if constant_value(e) != 1]


def _origin_region(load: BufferLoad, other_extents, what: str, role: str) -> BufferRegion:
    """The tile-origin form A[i, j]: the extents come from the other operand, right-aligned."""
    n, m = len(load.indices), len(other_extents)
    if m > n:
        other_extents = list(other_extents)
        while len(other_extents) > n and constant_value(other_extents[0]) == 1:
            other_extents.pop(0)
        if len(other_extents) > n:
            raise TileError(f"{what}: the {role} {load.buffer.name} has {n} dimension(s) but the "
                            f"tile it meets has shape {_shape_text(other_extents)}",
                            current_span())
        m = len(other_extents)
    extents = [convert(1)] * (n - m) + list(other_extents)
    return BufferRegion(load.buffer, tuple((i, e) for i, e in zip(load.indices, extents)),
                        load.span)


def _check_in_bounds(what: str, role: str, r: BufferRegion):
    """A region of a shared, fragment or local buffer with constant bounds must lie inside it
    (only global accesses out of bounds are masked)."""
    if r.buffer.scope == GLOBAL:
        return
    for d, ((start, extent), size) in enumerate(zip(r.ranges, r.buffer.shape)):
        lo, n = constant_value(start), constant_value(extent)
        size = size if isinstance(size, int) else constant_value(size)
        if lo is not None and n is not None and size is not None and (lo < 0 or lo + n > size):
            raise TileError(f"{what}: the {role} covers [{lo}, {lo + n}) of dimension {d} of "
                            f"{r.buffer.name}, whose extent is {size}", current_span())


def _regions(what: str, src, dst):
    if isinstance(src, BufferLoad) and isinstance(dst, BufferLoad):
        return None
    if isinstance(src, BufferLoad):
        d = region_of(dst)
        return _origin_region(src, d.extents, what, "source"), d
    if isinstance(dst, BufferLoad):
        s = region_of(src)
        return s, _origin_region(dst, s.extents, what, "destination")
    return region_of(src), region_of(dst)


def copy_regions(what: str, src, dst):
    """(source, destination, regions) of a copy: its operands, and the (source, destination)
    regions of a tile copy, checked (in bounds, the same extents but for unit dimensions), or
    None for an element-to-element copy."""
    src, dst = _operand(what, "source", src), _operand(what, "destination", dst)
    regions = _regions(what, src, dst)
    if regions is None:
        return src, dst, None
    s, d = regions
    _check_in_bounds(what, "source", s)
    _check_in_bounds(what, "destination", d)
    se, de = _non_unit(s.extents), _non_unit(d.extents)
    if len(se) != len(de) or not all(equal(a, c) for a, c in zip(se, de)):
        raise TileError(f"{what}: source {s.buffer.name} tile {_shape_text(s.extents)} and "
                        f"destination {d.buffer.name} tile {_shape_text(d.extents)} do not have "
                        "the same extents", current_span())
    return src, dst, (s, d)


def no_annotations(what: str, annotations):
    """TileLang's `annotations=` hint dict on an op or loop that takes none here: empty or
    None, else an error naming the keys (never ignored)."""
    if annotations is None or annotations == {}:
        return
    keys = sorted(annotations) if isinstance(annotations, dict) else annotations
    raise TileError(f"{what}: annotations= {keys!r} are not supported (tilecraft takes no "
                    f"annotations on {what})", current_span())


def _unsupported(what: str, name: str, value, why: str):
    if value is not None:
        raise TileError(f"{what}: {name}={value!r} is not supported yet ({why})",
                        current_span())


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None, *,
         prefer_instruction=None, annotations=None, loop_layout=None):
    """Copy a tile between any two scopes, converting dtype; out-of-bounds global elements
    read as zero and are not written."""
    what = "T.copy"
    b = bld.active(what)
    no_annotations(what, annotations)
    _unsupported(what, "prefer_instruction", prefer_instruction, "the compiler picks TMA, "
                 "cp.async, ldmatrix / stmatrix or vector accesses itself; disable_tma=True "
                 "keeps TMA off")
    _unsupported(what, "loop_layout", loop_layout, "a copy's threads follow its fragment's "
                 "layout, or T.annotate_layout's")
    src, dst, regions = copy_regions(what, src, dst)
    if regions is None:  # element to element: a plain store
        b.emit(BufferStore(dst.buffer, dst.indices, cast(src, dst.buffer.dtype), current_span()))
        return
    s, d = regions
    annotations = {}
    if coalesced_width is not None:
        annotations["coalesced_width"] = coalesced_width
    if disable_tma:
        annotations["disable_tma"] = True
    if eviction_policy is not None:
        if eviction_policy not in ("evict_normal", "evict_first", "evict_last"):
            raise TileError(f"{what}: eviction_policy must be evict_normal, evict_first or "
                            f"evict_last, got {eviction_policy!r}", current_span())
        annotations["eviction_policy"] = eviction_policy
    bld.emit(top.Copy(s, d, annotations, current_span()), what)


def _matrix(what: str, role: str, x) -> tuple[BufferRegion, list]:
    if isinstance(x, BufferLoad):
        raise TileError(f"{what}: operand {role} must be a whole tile or a slice, not a single "
                        f"element of {x.buffer.name}", current_span())
    r = region_of(_operand(what, role, x))
    ext = _non_unit(r.extents)
    if len(ext) != 2:
        ext_all = list(r.extents)
        if len(ext_all) >= 2 and len(ext) < 2:
            ext = ext_all[-2:]
        else:
            raise TileError(f"{what}: operand {role} ({r.buffer.name}) must be a 2-d tile, got "
                            f"shape {_shape_text(r.extents)}", current_span())
    return r, ext


_ACCUM = {"float16": ("float32", "float16"), "bfloat16": ("float32",),
          "float32": ("float32",), "float64": ("float64",), "int8": ("int32",),
          "uint8": ("int32",), "float8_e4m3": ("float32", "float16"),
          "float8_e5m2": ("float32", "float16"), "tfloat32": ("float32",)}


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=top.GemmWarpPolicy.Square,
         clear_accum=False, k_pack=1, wg_wait=0, mbar=None, annotations=None):
    """C += op(A) @ op(B) on tiles; A shared or fragment, B shared, C a fragment accumulator."""
    what = "T.gemm"
    bld.active(what)
    no_annotations(what, annotations)
    _unsupported(what, "mbar", mbar, "an mbarrier the tcgen05 instructions of Blackwell GPUs "
                 "signal; the targets here are sm_80 / sm_89 / sm_90a")
    a, (am, ak) = _matrix(what, "A", A)
    bb, (bk, bn) = _matrix(what, "B", B)
    c, (cm, cn) = _matrix(what, "C", C)
    if transpose_A:
        am, ak = ak, am
    if transpose_B:
        bk, bn = bn, bk
    if not equal(ak, bk):
        raise TileError(f"{what}: the K extents of A ({a.buffer.name}: {_shape_text([am, ak])}"
                        f"{', transposed' if transpose_A else ''}) and B ({bb.buffer.name}: "
                        f"{_shape_text([bk, bn])}{', transposed' if transpose_B else ''}) differ",
                        current_span())
    if not (equal(am, cm) and equal(bn, cn)):
        raise TileError(f"{what}: C ({c.buffer.name}) has shape {_shape_text([cm, cn])} but "
                        f"op(A) @ op(B) is {_shape_text([am, bn])}", current_span())
    for role, r in (("A", a), ("B", bb)):
        if r.buffer.scope == GLOBAL:
            raise TileError(f"{what}: operand {role} ({r.buffer.name}) is in global memory; copy "
                            "it into shared memory (T.alloc_shared + T.copy) first",
                            current_span())
    if c.buffer.scope not in (FRAGMENT, LOCAL):
        raise TileError(f"{what}: the accumulator C ({c.buffer.name}) must be a fragment "
                        f"(T.alloc_fragment), not {c.buffer.scope}", current_span())
    for role, r in (("A", a), ("C", c)):
        if r.buffer.scope == FRAGMENT and not r.covers_whole():
            # The tensor cores fix where each element of a register operand lives: a part of
            # a fragment would need the rest of it laid out to match, which nothing decides.
            raise TileError(f"{what}: operand {role} is a part {_shape_text(r.extents)} of the "
                            f"fragment {r.buffer.name} {_shape_text(r.buffer.shape)}; a register "
                            f"operand must be a whole fragment (allocate one of shape "
                            f"{_shape_text(r.extents)} for this gemm)", current_span())
    fp8_pair = {a.dtype.name, bb.dtype.name} <= {"float8_e4m3", "float8_e5m2"}
    if a.dtype is not bb.dtype and not fp8_pair:  # wgmma multiplies e4m3 by e5m2 natively
        raise TileError(f"{what}: A is {a.dtype} but B is {bb.dtype}; both operands must have "
                        "one dtype (or both be float8_e4m3 / float8_e5m2)", current_span())
    allowed = _ACCUM.get(a.dtype.name)
    if allowed is None:
        raise TileError(f"{what}: operands of dtype {a.dtype} are not supported", current_span())
    if c.dtype.name not in allowed:
        raise TileError(f"{what}: {a.dtype} operands accumulate into {' or '.join(allowed)}, "
                        f"but C ({c.buffer.name}) is {c.dtype}", current_span())
    try:
        policy = top.GemmWarpPolicy(policy)
    except ValueError:
        raise TileError(f"{what}: policy must be a T.GemmWarpPolicy, got {policy!r}",
                        current_span()) from None
    if wg_wait != 0:
        raise TileError(f"{what}: wg_wait={wg_wait!r} is not supported: each T.gemm waits for "
                        "its own wgmma batch before C is read (leave wg_wait at 0)",
                        current_span())
    if not isinstance(k_pack, int) or k_pack < 1:
        raise TileError(f"{what}: k_pack must be a positive int, got {k_pack!r}", current_span())
    if isinstance(clear_accum, Expr):
        # Decided when the kernel runs (`clear_accum=(j == 0)` in an unrolled loop): the
        # accumulator is zeroed under that condition, then accumulated into.
        zero = top.Fill(c, cast(convert(0, c.dtype), c.dtype), current_span())
        bld.emit(IfThenElse(clear_accum, zero, None, current_span()), what)
        clear_accum = False
    bld.emit(top.Gemm(a, bb, c, bool(transpose_A), bool(transpose_B), policy, bool(clear_accum),
                      k_pack, wg_wait, span=current_span()), what)


def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=top.GemmWarpPolicy.Square,
               clear_accum=False, k_pack=1, wg_wait=0):
    """TileLang's explicitly asynchronous gemm: here it is T.gemm, whose tensor-core work is
    complete when the next statement runs, so a later T.wait_wgmma has nothing to wait for."""
    gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum, k_pack, wg_wait)


def wait_wgmma(id: int = 0):  # noqa: A002  (TileLang's name)
    """Wait for the T.wgmma_gemm issued before: they have completed already (see wgmma_gemm)."""
    bld.active("T.wait_wgmma")
    if not isinstance(id, int) or isinstance(id, bool) or id < 0:
        raise TileError(f"T.wait_wgmma takes a count of gemms left in flight (an int >= 0), "
                        f"got {id!r}", current_span())


def _reduce(kind: str, buffer, out, dim: int, clear: bool):
    what = f"T.reduce_{kind}"
    bld.active(what)
    src = region_of(_operand(what, "source", buffer))
    dst = region_of(_operand(what, "destination", out))
    for role, r in (("source", src), ("destination", dst)):
        if r.buffer.scope == GLOBAL:
            raise TileError(f"{what}: the {role} {r.buffer.name} is in global memory; reduce a "
                            "shared or fragment tile", current_span())
    n = len(src.extents)
    if not isinstance(dim, int) or not -n <= dim < n:
        raise TileError(f"{what}: dim={dim!r} is out of range for the {n}-d source "
                        f"{src.buffer.name}", current_span())
    dim = dim % n
    expected = [e for i, e in enumerate(src.extents) if i != dim]
    got = list(dst.extents)
    keep = list(src.extents)
    keep[dim] = convert(1)
    ok = (len(got) == len(expected) and all(equal(x, y) for x, y in zip(got, expected))) or \
         (len(got) == len(keep) and all(equal(x, y) for x, y in zip(got, keep))) or \
         (not expected and [constant_value(g) for g in got] == [1])
    if not ok:
        raise TileError(f"{what}: reducing {src.buffer.name} {_shape_text(src.extents)} along dim "
                        f"{dim} gives shape {_shape_text(expected)}, but {dst.buffer.name} has "
                        f"shape {_shape_text(got)}", current_span())
    bld.emit(top.Reduce(kind, src, dst, dim, bool(clear), current_span()), what)


def reduce_max(buffer, out, dim=-1, clear=True):
    """out = max of buffer along dim (clear=False folds in out's current values)."""
    _reduce("max", buffer, out, dim, clear)


def reduce_min(buffer, out, dim=-1, clear=True):
    _reduce("min", buffer, out, dim, clear)


def reduce_sum(buffer, out, dim=-1, clear=True):
    _reduce("sum", buffer, out, dim, clear)


def reduce_abssum(buffer, out, dim=-1, clear=True):
    _reduce("abssum", buffer, out, dim, clear)


def reduce_absmax(buffer, out, dim=-1, clear=True):
    _reduce("absmax", buffer, out, dim, clear)


def cumsum(src, dst=None, dim=0, reverse=False, annotations=None):
    """Inclusive prefix sum along dim (in place when dst is None)."""
    what = "T.cumsum"
    bld.active(what)
    no_annotations(what, annotations)
    s = region_of(_operand(what, "source", src))
    d = s if dst is None else region_of(_operand(what, "destination", dst))
    n = len(s.extents)
    if not isinstance(dim, int) or not -n <= dim < n:
        raise TileError(f"{what}: dim={dim!r} is out of range for the {n}-d source "
                        f"{s.buffer.name}", current_span())
    if len(d.extents) != n or not all(equal(x, y) for x, y in zip(s.extents, d.extents)):
        raise TileError(f"{what}: destination {d.buffer.name} {_shape_text(d.extents)} must have "
                        f"the source's shape {_shape_text(s.extents)}", current_span())
    bld.emit(top.CumSum(s, d, dim % n, bool(reverse), current_span()), what)


def fill(buffer, value):
    """Set every element of a tile (or a slice of one) to value."""
    what = "T.fill"
    bld.active(what)
    r = region_of(_operand(what, "destination", buffer))
    if isinstance(value, (Buffer, BufferRegion)) or not (isinstance(value, Expr) or
                                                         is_python_number(value)):
        raise TileError(f"{what}: the value must be a scalar, got {type(value).__name__}",
                        current_span())
    value = cast(convert(value, r.dtype), r.dtype)
    bld.emit(top.Fill(r, value, current_span()), what)


def clear(buffer):
    """Set every element of a tile to zero."""
    fill(buffer, 0)


ATOMIC_ORDERS = (None, "relaxed")


def _atomic(kind: str, dst, value, memory_order=None, return_prev=False, use_tma=False):
    what = f"T.atomic_{kind}"
    bld.active(what)
    if memory_order not in ATOMIC_ORDERS:
        raise TileError(f"{what}: memory_order={memory_order!r} is not supported: the atomics "
                        "are relaxed (leave memory_order out, or pass 'relaxed')", current_span())
    if return_prev:
        raise TileError(f"{what}: return_prev=True is not supported: the atomic returns nothing",
                        current_span())
    dst = _operand(what, "destination", dst)
    target = dst.buffer if not isinstance(dst, Buffer) else dst
    if target.scope in (FRAGMENT, LOCAL, LOCAL_VAR):
        raise TileError(f"{what}: the destination {target.name} is per-thread ({target.scope}); "
                        "atomics target global or shared memory", current_span())
    if isinstance(value, (Buffer, BufferRegion)):
        v = region_of(value)
        if isinstance(dst, BufferLoad):
            d = _origin_region(dst, v.extents, what, "destination")
        else:
            d = region_of(dst)
        dn, vn = _non_unit(d.extents), _non_unit(v.extents)
        if len(dn) != len(vn) or not all(equal(x, y) for x, y in zip(dn, vn)):
            raise TileError(f"{what}: destination tile {_shape_text(d.extents)} and value tile "
                            f"{v.buffer.name} {_shape_text(v.extents)} differ", current_span())
        notes = {}
        if use_tma:
            if not is_shared(v.buffer.scope) or d.buffer.scope != GLOBAL:
                raise TileError(f"{what}: use_tma=True adds a shared-memory tile into global "
                                f"memory; here the value {v.buffer.name} is in {v.buffer.scope} "
                                f"and the destination {d.buffer.name} in {d.buffer.scope} "
                                "(T.copy the tile into a T.alloc_shared tile first)",
                                current_span())
            notes["use_tma"] = True
        bld.emit(top.Atomic(kind, d, v, current_span(), notes), what)
        return
    if use_tma:
        raise TileError(f"{what}: use_tma=True needs a tile value in shared memory, not a "
                        "scalar", current_span())
    if not (isinstance(value, Expr) or is_python_number(value)):
        raise TileError(f"{what}: the value must be a scalar or a tile, got "
                        f"{type(value).__name__}", current_span())
    if not isinstance(dst, BufferLoad):
        raise TileError(f"{what}: a scalar value needs a single destination element such as "
                        "C[i, j]", current_span())
    value = cast(convert(value, target.dtype), target.dtype)
    bld.emit(top.Atomic(kind, region_of(dst), value, current_span()), what,
             allow_in_parallel=True)


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False):
    """dst += value atomically (scalar element or whole tile). With use_tma=True a tile in
    shared memory is added into global memory by TMA (sm_90: one bulk reduction per box,
    issued by one thread; elsewhere element-wise atomics, with a warning)."""
    _atomic("add", dst, value, memory_order, return_prev, use_tma)


def _atomic_run(width: int, dst, value, memory_order=None, return_prev=False):
    """TileLang's atomic_addx2 / x4: `width` consecutive elements from dst's element on, each
    added atomically the value's element at the same distance from value's (an element of a
    tile or tensor); each element's add is atomic, as the vector instructions' are."""
    what = f"T.atomic_addx{width}"
    bld.active(what)
    for role, x in (("destination", dst), ("value", value)):
        if not isinstance(x, BufferLoad):
            raise TileError(f"{what}: the {role} is the first of {width} consecutive elements, "
                            f"such as A[i, j * {width}]; got {type(x).__name__}", current_span())
    for c in range(width):
        at = (lambda load: BufferLoad(load.buffer, load.indices[:-1] + (load.indices[-1] + c,),
                                      load.span))
        _atomic("add", at(dst), at(value), memory_order, return_prev)


def atomic_addx2(dst, value, memory_order=None, return_prev=False):
    """Two consecutive elements added atomically (TileLang's paired atomic add)."""
    _atomic_run(2, dst, value, memory_order, return_prev)


def atomic_addx4(dst, value, memory_order=None, return_prev=False):
    """Four consecutive elements added atomically."""
    _atomic_run(4, dst, value, memory_order, return_prev)


def atomic_max(dst, value, memory_order=None, return_prev=False):
    _atomic("max", dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev=False):
    _atomic("min", dst, value, memory_order, return_prev)

