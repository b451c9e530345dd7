"""Name lookup in a prim_func body, and where device values stop existing.

Python keeps a name bound after the block that bound it; the generated CUDA does not: a
T.Parallel or T.serial variable is declared by its loop, a block index by its T.Kernel (each
T.Kernel is a launch of its own), a buffer by the block that allocates it (a T.Kernel, a loop,
a device-side `if`). So when such a block closes, every name bound inside it whose value needs
something the block declared (the variable itself, an expression of it, the buffer, a slice
of it) is taken out of scope, and a later use is an error at that use naming the block, where
Python would have silently gone on with a value that does not exist there.
"""
from __future__ import annotations

import builtins
from dataclasses import dataclass

from ..errors import Span, TileError
from ..ir.buffer import FRAGMENT, GLOBAL, LOCAL_VAR, Buffer, BufferRegion, is_shared
from ..ir.expr import BufferLoad, Expr, Var
from ..ir.visitor import children


@dataclass
class Block:
    """A device block being parsed: what it is (for messages), where, and why its values
    do not outlive it."""
    what: str       # "the T.Parallel loop", "the T.Kernel", "the device-side `if`"
    span: Span | None
    advice: str
    bound: set      # names bound while the block was open


# What a use after each kind of block should do instead.
AFTER_LOOP = "it does not exist after the loop"
AFTER_IF = "it does not exist after the `if`; allocate it before the `if`"
AFTER_KERNEL = ("each T.Kernel is a launch of its own: values pass from one launch to the next "
                "through global tensors (a T.Tensor parameter or T.alloc_global)")


class Scope:
    """Name lookup: names bound in the body, then the function's closure and globals."""

    def __init__(self, func, env: dict | None = None):
        self.env = dict(env or {})
        self.closure = {}
        if func.__closure__:
            for name, cell in zip(func.__code__.co_freevars, func.__closure__):
                try:
                    self.closure[name] = cell.cell_contents
                except ValueError:
                    pass
        self.globals = func.__globals__
        self.blocks: list[Block] = []
        self.gone: dict = {}  # name -> why it is out of scope (the message of a use)

    def bind(self, name: str, value):
        self.env[name] = value
        if self.blocks:
            self.blocks[-1].bound.add(name)

    def lookup(self, name: str, span):
        if name in self.env:
            return self.env[name]
        if name in self.gone:
            raise TileError(self.gone[name], span)
        for table in (self.closure, self.globals):
            if name in table:
                return table[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise TileError(f"name '{name}' is not defined", span)

    def namespace(self) -> dict:
        return {**self.globals, **self.closure, **self.env}

    # --- device blocks ---------------------------------------------------------------
    def open_block(self, what: str, span, advice: str):
        self.blocks.append(Block(what, span, advice, set()))

    def close_block(self, variables=(), allocated=()):
        """End the innermost block: the names bound in it whose values need one of its
        variables or buffers (global workspaces outlive every block) go out of scope."""
        block = self.blocks.pop()
        if self.blocks:
            self.blocks[-1].bound |= block.bound
        dying = {id(v): v for v in variables}
        dying.update((id(b), b) for b in allocated if b.scope != GLOBAL)
        if not dying:
            return
        for name in block.bound:
            if name not in self.env:
                continue
            culprit = _needs(self.env[name], dying)
            if culprit is not None:
                self.gone[name] = _out_of_scope(name, self.env.pop(name), culprit, block)


def _needs(value, dying: dict, depth: int = 0):
    """The first dying variable or buffer that value refers to, or None."""
    if isinstance(value, (Var, Buffer)):
        return dying.get(id(value))
    if isinstance(value, BufferLoad):
        found = dying.get(id(value.buffer))
        if found is not None:
            return found
    if isinstance(value, BufferRegion):
        found = dying.get(id(value.buffer))
        if found is not None:
            return found
        return _first(value.starts + value.extents, dying, depth)
    if isinstance(value, Expr):
        return _first(children(value), dying, depth)
    if isinstance(value, (tuple, list)) and depth < 4:
        return _first(value, dying, depth + 1)
    return None


def _first(items, dying: dict, depth: int):
    for item in items:
        found = _needs(item, dying, depth)
        if found is not None:
            return found
    return None


def _out_of_scope(name: str, value, culprit, block: Block) -> str:
    where = f" at line {block.span.line}" if block.span is not None else ""
    if isinstance(culprit, Var):
        role = "block index" if "T.Kernel" in block.what else "loop variable"
        thing = f"the {role} of {block.what}{where}"
    else:
        thing = f"the {_kind(culprit)} allocated in {block.what}{where}"
    relation = "is" if value is culprit else f"uses {culprit.name},"
    return f"name '{name}' {relation} {thing}, out of scope here: {block.advice}"


def _kind(b: Buffer) -> str:
    if b.scope == FRAGMENT:
        return "fragment"
    if is_shared(b.scope):
        return "shared tile"
    return "variable" if b.scope == LOCAL_VAR else "local buffer"
