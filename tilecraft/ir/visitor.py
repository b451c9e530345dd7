"""Generic traversal and rebuilding of IR trees.

Nodes are dataclasses; children are found through their fields (Exprs, Stmts, regions,
tuples of them). A Mutator rebuilds only the nodes whose children changed, so untouched
subtrees keep their identity.
"""
from __future__ import annotations

import dataclasses

from .buffer import Buffer, BufferRegion
from .dtypes import DType
from .expr import Binary, BufferLoad, Cast, Const, Expr, Select, Unary, Var
from .stmt import Stmt


_NODE_TYPES = (Expr, Stmt, BufferRegion)


def _is_node(x) -> bool:
    return isinstance(x, _NODE_TYPES)


_FIELD_NAMES: dict = {}  # node class -> its field names but span (asked on every visit)


def field_names(node) -> tuple:
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls)
                                          if f.name != "span")
    return names


# Field values that are never nodes nor hold any: one set lookup skips them (most fields of
# most nodes: names, dtypes, constants, buffers), where the isinstance chain below costs three.
_LEAVES = {int, float, str, bool, type(None), DType, Buffer}


def children(node):
    """Child nodes in field order (buffers are leaves, not children)."""
    fast = _FAST_CHILDREN.get(type(node))
    if fast is not None:
        found = fast(node)
        if found is not None:
            return found
    out = []
    for name in field_names(node):
        v = getattr(node, name)
        if type(v) not in _LEAVES:
            _flatten_into(v, out)
    return out


def _flatten_into(v, out: list):
    if isinstance(v, _NODE_TYPES):
        out.append(v)
    elif isinstance(v, (tuple, list)):
        for x in v:
            if type(x) not in _LEAVES:
                _flatten_into(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _flatten_into(x, out)


def _no_children(node):
    return []


def _nodes_or_none(values: list):
    """values when every one is a node, else None (the generic path decides)."""
    for x in values:
        if not isinstance(x, _NODE_TYPES):
            return None
    return values


def _operand_fields(*names):
    """The children of an expression class whose `names` fields hold its operands, read
    without the generic path's per-field type tests."""
    def fast(node):
        return _nodes_or_none([getattr(node, name) for name in names])
    return fast


def _indices_only(node):
    return _nodes_or_none(list(node.indices))


# The expression classes walks meet most, by far (every index and operand): their children
# read straight from their operand fields.
_FAST_CHILDREN = {Const: _no_children, Var: _no_children, Binary: _operand_fields("a", "b"),
                  Unary: _operand_fields("a"), Cast: _operand_fields("value"),
                  Select: _operand_fields("cond", "a", "b"), BufferLoad: _indices_only}


class Visitor:
    """Walks every node; override visit_<ClassName> to act, call generic_visit to descend."""

    def visit(self, node):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node):
        for c in children(node):
            self.visit(c)


class Mutator:
    """Rebuilds a tree; override visit_<ClassName> to return a replacement node."""

    def visit(self, node):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node):
        changes = {}
        for name in field_names(node):
            old = getattr(node, name)
            new = self._rebuild(old)
            if new is not old:
                changes[name] = new
        if not changes:
            return node
        return dataclasses.replace(node, **changes)

    def _rebuild(self, v):
        if _is_node(v):
            return self.visit(v)
        if isinstance(v, (tuple, list)):
            items = [self._rebuild(x) for x in v]
            if all(a is b for a, b in zip(items, v)):
                return v
            return type(v)(items)
        if isinstance(v, dict) and any(_is_node(x) for x in v.values()):
            items = {k: self._rebuild(x) for k, x in v.items()}
            if all(items[k] is v[k] for k in v):
                return v
            return items
        return v


def walk(node):
    """Every node of the tree, pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def collect(node, predicate) -> list:
    return [n for n in walk(node) if predicate(n)]


def named_outside(body, buffer, *parts) -> bool:
    """Whether a node of body outside the subtrees `parts` names buffer (its allocation
    aside): whether a pass that rewrites those parts must leave the buffer as it is."""
    from .stmt import Allocate
    inside = {id(n) for part in parts for n in walk(part)}
    return any(getattr(n, "buffer", None) is buffer and id(n) not in inside and
               not isinstance(n, Allocate) for n in walk(body))


def buffers_used(node) -> list:
    """Buffers referenced anywhere under node, in first-use order."""
    seen, out = set(), []

    def add(b):
        if isinstance(b, Buffer) and id(b) not in seen:
            seen.add(id(b))
            out.append(b)

    for n in walk(node):
        for f in dataclasses.fields(n):
            v = getattr(n, f.name)
            for x in (v if isinstance(v, (tuple, list)) else v.keys() if isinstance(v, dict)
                      else (v,)):
                add(x)
    return out


def stores_independent(stores) -> bool:
    """The body of an element-wise loop, its stores (one per buffer, each at one index),
    touches only its own iteration's elements of what it writes: every read of a written
    buffer is at the very index the store writes. Its iterations may then run in any grouping
    (two at a time, a run of them through registers)."""
    from .expr import BufferLoad
    from .linear import structural_key
    written = {}
    for s in stores:
        if id(s.buffer) in written:
            return False
        written[id(s.buffer)] = structural_key(tuple(s.indices))
    return all(structural_key(tuple(n.indices)) == written[id(n.buffer)]
               for s in stores for n in walk(s.value)
               if isinstance(n, BufferLoad) and id(n.buffer) in written)


class _Substitute(Mutator):
    def __init__(self, mapping: dict):
        self.mapping = mapping

    def visit_Var(self, v):
        return self.mapping.get(id(v), v)


class RenameBuffers(Mutator):
    """Every access (load, store, tile-op region) of a buffer keyed by id in `new` goes to
    new[id] instead."""

    def __init__(self, new: dict):
        self.new = new

    def _renamed(self, node):
        node = self.generic_visit(node)
        b = self.new.get(id(node.buffer))
        return dataclasses.replace(node, buffer=b) if b is not None else node

    visit_BufferLoad = visit_BufferStore = visit_BufferRegion = _renamed


def substitute(node, mapping: dict):
    """node with each Var whose id is a key of mapping replaced by mapping[id(var)]."""
    if not mapping:
        return node
    return _Substitute(mapping).visit(node)


def map_kernels(func, rewrite):
    """func with rewrite(kernel) in place of each Kernel of its body, which is one kernel or a
    sequence of kernel launches; the other statements stay as they are. Passes that work kernel
    by kernel go through this."""
    import dataclasses
    from .stmt import Kernel, SeqStmt, seq

    def rebuild(s):
        if isinstance(s, Kernel):
            return rewrite(s)
        if isinstance(s, SeqStmt):
            return seq([rebuild(x) for x in s.stmts])
        return s

    return dataclasses.replace(func, body=rebuild(func.body))
