"""T.Kernel and the loop kinds: Parallel, Pipelined, serial, unroll, vectorized."""
from __future__ import annotations

from ..errors import TileError, current_span
from ..frontend import builder as bld
from ..frontend.frames import (KernelFrame, LoopFrame, PersistentLoop, loop_range, not_a_loop,
                               serial_loop, simple_loop)
from ..ir.expr import Const, Expr
from ..ir.annotations import (ASYNC_COPY, ASYNC_WITHOUT_WAIT, LOOP_LAYOUT, NUM_STAGES,
                              PREFER_ASYNC, UNROLL_FACTOR)
from .tileops import no_annotations
from ..layout import Fragment


def Kernel(*blocks, threads=128, prelude=None, is_cpu=False):
    """Open a launch of a grid of `blocks` (1-3 extents) of `threads` threads each.
    `with T.Kernel(gx, gy, threads=128) as (bx, by):` binds the block indices."""
    bld.active("T.Kernel", need_kernel=False)
    if prelude is not None:
        raise TileError("T.Kernel(prelude=...) injects C source, which the interpreter cannot "
                        "run; it is not supported yet", current_span())
    if is_cpu:
        raise TileError("T.Kernel(is_cpu=True) is not supported", current_span())
    return KernelFrame(blocks, threads, current_span())


def _static_extent(what: str, value):
    if isinstance(value, Expr) and not isinstance(value, Const):
        raise TileError(f"{what} extents must be compile-time integers (T.Parallel maps the "
                        "iteration space onto threads when compiling)", current_span())


def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None,
             annotations=None):
    """An element-wise loop nest over a tile; the compiler maps iterations onto threads.
    loop_layout: a T.Fragment over the nest's iteration space giving each iteration's thread
    (instead of the inferred one). prefer_async: the nest's global -> shared stores run as
    cp.async copies where they move 16-byte runs, followed by a commit and a wait for them
    (not with annotations={"parallel_async_without_async_commit_wait": True}: the program
    waits itself, T.ptx_commit_group / T.ptx_wait_group); inside a T.Pipelined loop, where
    the pipeline issues such gathers ahead asynchronously itself, it asks nothing more."""
    span = current_span()
    b = bld.active("T.Parallel")
    if not extents:
        raise TileError("T.Parallel needs at least one extent", span)
    for e in extents:
        not_a_loop("T.Parallel", e)
        _static_extent("T.Parallel", e)
    if annotations is not None and not isinstance(annotations, dict):
        raise TileError(f"T.Parallel: annotations= takes a dict, got {annotations!r}", span)
    given = dict(annotations or {})
    unknown = sorted(set(given) - set(_PARALLEL_ANNOTATIONS))
    if unknown:
        raise TileError(f"T.Parallel: unknown annotation {unknown[0]!r} (known: "
                        f"{', '.join(sorted(_PARALLEL_ANNOTATIONS))})", span)
    for key, value in (("coalesced_width", coalesced_width), (LOOP_LAYOUT, loop_layout)):
        if value is not None:
            given[key] = value
    for key, (check, expected) in _PARALLEL_ANNOTATIONS.items():
        if key in given and not check(given[key]):
            raise TileError(f"T.Parallel: {key} {expected}, got {given[key]!r}", span)
    if prefer_async is not None and not isinstance(prefer_async, bool):
        raise TileError(f"T.Parallel: prefer_async takes True or False, got {prefer_async!r}",
                        span)
    # In a T.Pipelined loop the pipeline issues a gather it runs ahead as cp.async and waits
    # for it in its own stages; a wait of the nest's own there would undo the overlap.
    if prefer_async and not b.inside("pipelined"):
        given[PREFER_ASYNC] = given[ASYNC_COPY] = True
    layout = given.get(LOOP_LAYOUT)
    if layout is not None and tuple(layout.shape) != tuple(int(e) for e in extents):
        raise TileError(f"T.Parallel: loop_layout is a Fragment over {tuple(layout.shape)}, "
                        f"but the nest's extents are {tuple(extents)}", span)
    return LoopFrame("parallel", [(0, e) for e in extents], given, span)


# each annotation key T.Parallel takes: (its check, what it takes, for the error)
_PARALLEL_ANNOTATIONS = {
    "coalesced_width": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                        "takes an int > 0"),
    ASYNC_WITHOUT_WAIT: (lambda v: isinstance(v, bool), "takes True or False"),
    LOOP_LAYOUT: (lambda v: isinstance(v, Fragment), "takes a T.Fragment"),
}


def parallel(start, stop=None, annotations=None):
    """TVMScript's parallel loop, as TileLang runs it: one dimension of an element-wise nest
    (`for i in T.parallel(n): for j in T.parallel(m):` is T.Parallel(n, m))."""
    bld.active("T.parallel")
    if annotations:
        raise TileError(f"T.parallel: annotations= are not supported, got {annotations!r}",
                        current_span())
    lo, hi = (0, start) if stop is None else (start, stop)
    not_a_loop("T.parallel", hi)
    _static_extent("T.parallel", hi)
    if not (isinstance(lo, int) and lo == 0 or isinstance(lo, Const) and lo.value == 0):
        raise TileError(f"T.parallel: an element-wise loop starts at 0 (T.parallel(n)), got a "
                        f"start of {lo!r}", current_span())
    return LoopFrame("parallel", [(0, hi)], {}, current_span())


def Pipelined(start, stop=None, num_stages=0, order=None, stage=None, sync=None, group=None):
    """A serial loop whose shared-memory copies are overlapped with compute, num_stages deep."""
    b = bld.active("T.Pipelined")
    if b.in_parallel:
        raise TileError("T.Pipelined cannot be nested inside T.Parallel", current_span())
    if not isinstance(num_stages, int) or isinstance(num_stages, bool) or num_stages < 0:
        raise TileError(f"T.Pipelined num_stages must be a non-negative int, got {num_stages!r}",
                        current_span())
    annotations = {NUM_STAGES: num_stages}
    for key, value in (("order", order), ("stage", stage), ("sync", sync), ("group", group)):
        if value is not None:
            if not isinstance(value, (list, tuple)):
                raise TileError(f"T.Pipelined {key}= must be a list, got {value!r}",
                                current_span())
            annotations[key] = list(value)
    if stage is not None and any(not isinstance(s, int) or s < 0 for s in stage):
        raise TileError(f"T.Pipelined stage= entries must be non-negative ints, got {stage!r}",
                        current_span())
    if order is not None and sorted(order) != list(range(len(order))):
        raise TileError(f"T.Pipelined order= must be a permutation of 0..{len(order) - 1}, "
                        f"got {order!r}", current_span())
    return LoopFrame("pipelined", [loop_range("T.Pipelined", start, stop)], annotations,
                     current_span())


def serial(start, stop=None, step=None, *, annotations=None):
    """A plain sequential loop (also what `range(...)` means in a kernel)."""
    no_annotations("T.serial", annotations)
    return serial_loop(start, stop, step)


def unroll(start, stop=None, step=None, explicit=False, unroll_factor=None, *,
           annotations=None):
    """A sequential loop the compiler unrolls: whole (explicit=True asks the same), or
    unroll_factor iterations at a time (`#pragma unroll n`)."""
    no_annotations("T.unroll", annotations)
    if not isinstance(explicit, bool):
        raise TileError(f"T.unroll: explicit takes True or False, got {explicit!r}",
                        current_span())
    if unroll_factor is not None and (isinstance(unroll_factor, bool) or
                                      not isinstance(unroll_factor, int) or unroll_factor < 1):
        raise TileError(f"T.unroll: unroll_factor takes an int >= 1, got {unroll_factor!r}",
                        current_span())
    if explicit and unroll_factor is not None:
        raise TileError("T.unroll: explicit=True unrolls the whole loop; it takes no "
                        "unroll_factor", current_span())
    return simple_loop("unroll", start, stop, step,
                       {UNROLL_FACTOR: unroll_factor} if unroll_factor else None)


def vectorized(start, stop=None, *, annotations=None):
    """A per-thread loop the compiler turns into vector instructions."""
    no_annotations("T.vectorized", annotations)
    return simple_loop("vectorized", start, stop, None)


def Persistent(domain, wave_size, index, group_size=8):
    """A persistent kernel's tile loop: `for bx, by in T.Persistent([m, n], wave_size, block_id)`
    in a T.Kernel of wave_size blocks visits the domain's tiles block_id, block_id +
    wave_size, ...; a 2-D domain in groups of group_size columns (frames.PersistentLoop)."""
    bld.active("T.Persistent")
    if not isinstance(domain, (list, tuple)) or not domain:
        raise TileError(f"T.Persistent takes a list of tile counts as its domain, got "
                        f"{domain!r}", current_span())
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise TileError(f"T.Persistent group_size must be a positive int, got {group_size!r}",
                        current_span())
    for value in (*domain, wave_size):
        not_a_loop("T.Persistent", value)
    return PersistentLoop(list(domain), wave_size, index, group_size, current_span())
