"""Buffer allocation inside a kernel: shared tiles, register fragments, locals, scalars."""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..frontend.reducers import REDUCERS
from ..ir import dtypes as dt
from ..ir.buffer import FRAGMENT, GLOBAL, LOCAL, LOCAL_VAR, SHARED, Buffer, is_shared
from ..ir.expr import Expr, cast, convert
from ..ir.stmt import Allocate, BufferStore


def _shape(what: str, shape, allow_symbolic: bool = False) -> tuple:
    if isinstance(shape, (int, Expr)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not shape:
        raise TileError(f"{what}: shape must be an int or a non-empty tuple of ints, got "
                        f"{shape!r}", current_span())
    out = []
    for i, s in enumerate(shape):
        if isinstance(s, Expr) and allow_symbolic:
            out.append(s)
            continue
        from ..ir.linear import constant_value
        value = constant_value(s) if isinstance(s, Expr) else s
        if isinstance(value, bool) or not isinstance(value, int):
            raise TileError(f"{what}: dimension {i} must be a compile-time int, got {s!r}",
                            current_span())
        if value <= 0:
            raise TileError(f"{what}: dimension {i} must be positive, got {value}",
                            current_span())
        out.append(value)
    return tuple(out)


def _dtype(what: str, d):
    try:
        d = dt.dtype(d)
    except (ValueError, TypeError) as e:
        raise TileError(f"{what}: {e}", current_span()) from None
    if d.is_handle:
        raise TileError(f"{what}: a buffer cannot hold pointers", current_span())
    return d


def _alloc(what: str, shape, dtype, scope: str, allow_symbolic=False,
           need_kernel=True) -> Buffer:
    b = bld.active(what, need_kernel=need_kernel)
    if b.in_parallel and scope != LOCAL_VAR:
        raise TileError(f"{what} cannot be used inside T.Parallel", current_span())
    buf = Buffer("__unnamed", _shape(what, shape, allow_symbolic), _dtype(what, dtype), scope,
                 current_span())
    if b.in_parallel:
        # A scalar each iteration of the element-wise loop has its own of: the frontend makes
        # it an element per iteration of a fragment over the loop (remap_accesses.py).
        frames = [f for f in b.loops if f.kind == "parallel"]
        b.iteration_scalars[buf] = ([v for f in frames for v in f.vars],
                                    [e for f in frames for _, e in f.ranges])
    # The pipeline keeps num_stages versions of the tiles its copies fill, which it can only
    # do for tiles that exist before the loop starts: a shared tile allocated in the loop's
    # body is one tile of the block (as in TileLang), allocated with the kernel's own tiles,
    # and so is the fragment a T.Parallel body's variable becomes.
    hoisted = b.in_parallel or (is_shared(scope) and
                                any(f.kind == "pipelined" for f in b.loops))
    allocation = Allocate(buf, current_span())
    if hoisted:
        b.blocks[b.kernel.body_block].append(allocation)
    else:
        b.emit(allocation)
    return buf


def alloc_shared(shape, dtype, scope=SHARED):
    """A tile in the block's shared memory."""
    if scope not in ("shared", "shared.dyn"):
        raise TileError(f"T.alloc_shared: scope must be 'shared' or 'shared.dyn', got {scope!r}",
                        current_span())
    return _alloc("T.alloc_shared", shape, dtype, scope)


def alloc_fragment(shape, dtype, scope=FRAGMENT):
    """A block-level tile distributed over the threads' registers."""
    return _alloc("T.alloc_fragment", shape, dtype, FRAGMENT)


def alloc_local(shape, dtype, scope=LOCAL):
    """A small per-thread array."""
    return _alloc("T.alloc_local", shape, dtype, LOCAL)


def alloc_global(shape, dtype, scope=GLOBAL):
    """A global-memory workspace, made (uninitialized) for each call of the program and seen by
    every launch of it: inside a T.Kernel or before the first one, at the prim_func's top
    level, where several launches visibly share it."""
    return _alloc("T.alloc_global", shape, dtype, GLOBAL, allow_symbolic=True,
                  need_kernel=False)


def alloc_var(dtype, init=None, scope=LOCAL_VAR):
    """A per-thread scalar variable: `x = T.alloc_var("float32")`, then `x = ...`, `x += ...`."""
    buf = _alloc("T.alloc_var", (1,), dtype, LOCAL_VAR)
    if init is not None:
        bld.active("T.alloc_var").emit(
            BufferStore(buf, (convert(0),), cast(convert(init, buf.dtype), buf.dtype),
                        current_span()))
    return buf


def alloc_buffer(shape, dtype, scope=GLOBAL):
    """TVM's allocation by scope name; with no scope a global workspace, as TVM's default
    "global" (T.alloc_global: before the first T.Kernel, shared by the launches)."""
    kinds = {"shared": alloc_shared, "shared.dyn": alloc_shared, FRAGMENT: alloc_fragment,
             LOCAL: alloc_local, GLOBAL: alloc_global}
    if scope not in kinds:
        raise TileError(f"T.alloc_buffer: unknown scope {scope!r}", current_span())
    return kinds[scope](shape, dtype, scope)


_REDUCER_OPS = ("sum", "max", "min")


def alloc_reducer(shape, dtype, op="sum", replication=None):
    """A fragment that the iterations of a T.Parallel nest accumulate into together
    (`r[i] += a[i, j]`, or T.max / T.min for those ops); its values are whole after the nest
    (frontend/reducers.py), and T.finalize_reducer(r) has nothing left to do."""
    what = "T.alloc_reducer"
    if op not in _REDUCER_OPS:
        raise TileError(f"{what}: op is one of {', '.join(_REDUCER_OPS)}, got {op!r}",
                        current_span())
    if replication not in (None, "all", "none"):
        raise TileError(f"{what}: replication is None, 'all' or 'none', got {replication!r}",
                        current_span())
    buf = alloc_fragment(shape, dtype)
    bld.active(what).kernel.attrs.setdefault(REDUCERS, {})[id(buf)] = (buf, op)
    return buf


def finalize_reducer(reducer):
    """TileLang's combination of a reducer's partial values: here they are whole already."""
    what = "T.finalize_reducer"
    reducers = bld.active(what).kernel.attrs.get(REDUCERS, {})
    if not (isinstance(reducer, Buffer) and id(reducer) in reducers):
        raise TileError(f"{what} takes a buffer of T.alloc_reducer, got "
                        f"{getattr(reducer, 'name', type(reducer).__name__)}", current_span())
