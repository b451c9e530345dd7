"""Accumulations that T.Parallel iterations would race on, refused when the kernel is parsed.

The iterations of a T.Parallel nest run at once: the compiler deals them out over the block's
threads, the interpreter evaluates them as one array operation. A store whose value reads the
element it writes (`x[i, j // 4] += v`) and whose element is shared by iterations that differ
in a loop variable (one the indices leave out, or use only divided) makes those iterations read
the same old value and each write its own sum: all updates but one are lost, in every target
(on the GPU, wherever the compiler puts the sharing iterations in different threads). The cases
caught are the ones the indices show plainly (a variable absent, or only `v // c`); the message
says how to write the sum instead. Per-thread storage (T.alloc_local, T.alloc_var, and whatever
the nest allocates for each iteration) is each thread's or iteration's own and is not checked.
"""
from __future__ import annotations

from ..errors import TileError
from ..ir.buffer import LOCAL, LOCAL_VAR
from ..ir.expr import Binary, BufferLoad, Const
from ..ir.linear import structural_key
from ..ir.printer import expr_text
from ..ir.stmt import Allocate, BufferStore, For
from ..ir.visitor import walk
from ..passes.parallel_nests import nest_body, nest_extents, nest_vars, tile_ops


def check_parallel_accumulations(kernel) -> None:
    for op in tile_ops(kernel.body):        # each outermost T.Parallel nest once
        if isinstance(op, For):
            _check_nest(op)


def _check_nest(nest: For) -> None:
    loop_vars, extents, loop = nest_vars(nest), nest_extents(nest), nest_body(nest)
    own = {id(n.buffer) for n in walk(loop) if isinstance(n, Allocate)}
    for store in walk(loop):
        if not isinstance(store, BufferStore) or id(store.buffer) in own or \
                store.buffer.scope in (LOCAL, LOCAL_VAR) or not _reads_itself(store):
            continue
        shared = [v for v, n in zip(loop_vars, extents)
                  if n != 1 and _iterations_share(store.indices, v)]
        if shared:
            names = ", ".join(v.name for v in shared)
            target = f"{store.buffer.name}[{', '.join(expr_text(i) for i in store.indices)}]"
            raise TileError(
                f"T.Parallel iterations that differ in {names} all add into {target}: they run "
                f"at once, so each reads the same old value and all updates but one are lost; "
                f"give each iteration its own element and sum them with T.reduce_sum, or "
                f"accumulate in a T.serial loop inside the T.Parallel", store.span)


def _reads_itself(store: BufferStore) -> bool:
    key = structural_key(tuple(store.indices))
    return any(isinstance(n, BufferLoad) and n.buffer is store.buffer and
               structural_key(tuple(n.indices)) == key for n in walk(store.value))


def _iterations_share(indices, var) -> bool:
    """Whether the indices leave `var` out, or use it only as `var // c` (c > 1)."""
    uses = [i for i in indices if any(x is var for x in walk(i))]
    return all(isinstance(i, Binary) and i.op == "//" and i.a is var and
               isinstance(i.b, Const) and i.b.value > 1 for i in uses)
