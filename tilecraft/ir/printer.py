"""A stable, readable text form of the IR, in the shape of the user's TileLang source.

The text is deterministic (golden tests compare it) and names are unique within a function:
two different variables that share a name print as `i` and `i_1`.
"""
from __future__ import annotations

import math

from . import tileop as top
from .tileop import contract_of, has_contract
from .buffer import Buffer, BufferRegion, GLOBAL, LOCAL_VAR
from .annotations import UNROLL_FACTOR
from .expr import Binary, BufferLoad, Call, Cast, Const, Expr, Select, Unary, Var
from .stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, Kernel, PrimFunc, SeqStmt,
                   Stmt)

_PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4, "|": 5, "^": 6,
         "&": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10}
_ALLOC_FN = {"shared.dyn": "alloc_shared", "shared": "alloc_shared",
             "local.fragment": "alloc_fragment", "local": "alloc_local", "global": "alloc_global"}


class Printer:
    def __init__(self):
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.lines: list[str] = []

    # --- naming -------------------------------------------------------------
    def name(self, obj) -> str:
        key = id(obj)
        if key not in self.names:
            base = obj.name or "v"
            name, n = base, 0
            while name in self.taken:
                n += 1
                name = f"{base}_{n}"
            self.taken.add(name)
            self.names[key] = name
        return self.names[key]

    # --- expressions --------------------------------------------------------
    def expr(self, e, parent_prec: int = 0) -> str:
        if isinstance(e, (int, float, bool, str)):
            return repr(e)
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Binary):
            if e.op in ("min", "max"):
                return f"T.{e.op}({self.expr(e.a)}, {self.expr(e.b)})"
            p = _PREC[e.op]
            # Comparisons chain in Python (a < b == c), so a nested one is parenthesized.
            left = p + 1 if p == _PREC["<"] else p
            text = f"{self.expr(e.a, left)} {e.op} {self.expr(e.b, p + 1)}"
            return f"({text})" if p < parent_prec else text
        if isinstance(e, Unary):
            if e.op == "not":
                text = f"not {self.expr(e.a, 3)}"
                return f"({text})" if 3 < parent_prec else text
            return f"{e.op}{self.expr(e.a, 11)}"
        if isinstance(e, Select):
            return f"T.if_then_else({self.expr(e.cond)}, {self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, Cast):
            return f'T.Cast("{e.dtype}", {self.expr(e.value)})'
        if isinstance(e, BufferLoad):
            return self.load(e.buffer, e.indices)
        if isinstance(e, Call):
            args = ", ".join(self.arg(a) for a in e.args)
            if e.name in ("call_extern", "address_of"):
                suffix = f', dtype="{e.dtype}"' if e.name == "call_extern" else ""
                return f"T.{e.name}({args}{suffix})"
            return f"T.{e.name}({args})"
        return repr(e)

    def arg(self, a) -> str:
        if isinstance(a, str):
            return f'"{a}"'
        if isinstance(a, Buffer):
            return self.name(a)
        if isinstance(a, BufferRegion):
            return self.region(a)
        return self.expr(a)

    def const(self, c: Const) -> str:
        v, d = c.value, c.dtype
        if d.is_bool:
            return "True" if v else "False"
        if d.is_float and math.isinf(v):
            text = f'T.infinity("{d}")'
            return text if v > 0 else "-" + text
        if d.is_float and math.isnan(v):
            return f'T.Cast("{d}", float("nan"))'
        if d.name == "int32" or d.name == "float32":
            return repr(v)
        return f"T.{d}({v!r})"

    def load(self, buffer: Buffer, indices) -> str:
        if buffer.scope == LOCAL_VAR:
            return self.name(buffer)
        return f"{self.name(buffer)}[{', '.join(self.expr(i) for i in indices)}]"

    def region(self, r: BufferRegion) -> str:
        parts = []
        for (start, extent), dim in zip(r.ranges, r.buffer.shape):
            if isinstance(start, Const) and start.value == 0 and _same(extent, dim):
                parts.append(":")
            elif isinstance(extent, Const) and extent.value == 1:
                parts.append(self.expr(start))
            else:
                parts.append(f"{self.expr(start)}:{self.expr(start + extent)}")
        if all(p == ":" for p in parts):
            return self.name(r.buffer)
        return f"{self.name(r.buffer)}[{', '.join(parts)}]"

    # --- statements ---------------------------------------------------------
    def emit(self, depth: int, text: str):
        self.lines.append("    " * depth + text)

    def stmt(self, s: Stmt, depth: int):
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x, depth)
        elif isinstance(s, Kernel):
            grid = ", ".join(self.expr(g) for g in s.grid)
            threads = s.threads[0] if len(s.threads) == 1 else tuple(s.threads)
            names = ", ".join(self.name(v) for v in s.block_vars)
            target = names if len(s.block_vars) == 1 else f"({names})"
            self.emit(depth, f"with T.Kernel({grid}, threads={threads}) as {target}:")
            # Scalar attributes (the user's register and occupancy directives, what passes
            # decide): part of the text, so two kernels that differ only there never share
            # a cache entry keyed by it.
            for key, value in sorted(s.attrs.items()):
                if isinstance(value, (bool, int, float, str)):
                    self.emit(depth + 1, f"# attr {key} = {value!r}")
            for dim, v in enumerate(s.thread_bindings):
                if v is not None:
                    self.emit(depth + 1, f"{self.name(v)} = T.get_thread_binding({dim})")
            self.stmt(s.body, depth + 1)
        elif isinstance(s, For) and s.kind == "parallel":
            # A nest of parallel loops prints as one n-d T.Parallel, as it was written.
            loops = [s]
            while isinstance(loops[-1].body, For) and loops[-1].body.kind == "parallel" and \
                    loops[-1].body.annotations == s.annotations:
                loops.append(loops[-1].body)
            names = ", ".join(self.name(x.var) for x in loops)
            extents = ", ".join(self.loop_extent(x) for x in loops)
            extra = "".join(f", {k}={v!r}" for k, v in sorted(s.annotations.items()))
            self.emit(depth, f"for {names} in T.Parallel({extents}{extra}):")
            self.stmt(loops[-1].body, depth + 1)
        elif isinstance(s, For):
            self.emit(depth, f"for {self.name(s.var)} in {self.loop_head(s)}:")
            self.stmt(s.body, depth + 1)
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if {self.expr(s.cond)}:")
            self.stmt(s.then_body, depth + 1)
            if s.else_body is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_body, depth + 1)
        elif isinstance(s, BufferStore):
            self.emit(depth, f"{self.load(s.buffer, s.indices)} = {self.expr(s.value)}")
        elif isinstance(s, Evaluate):
            self.emit(depth, f"T.evaluate({self.expr(s.value)})")
        elif isinstance(s, Allocate):
            self.emit(depth, self.allocation(s.buffer))
        elif isinstance(s, top.TileOp):
            self.emit(depth, self.tile_op(s))
        else:
            self.emit(depth, f"<{type(s).__name__}>")

    def loop_extent(self, s: For) -> str:
        if isinstance(s.start, Const) and s.start.value == 0:
            return self.expr(s.extent)
        return f"({self.expr(s.start)}, {self.expr(s.start + s.extent)})"

    def loop_head(self, s: For) -> str:
        extent = self.expr(s.extent)
        if not (isinstance(s.start, Const) and s.start.value == 0):
            extent = f"{self.expr(s.start)}, {self.expr(s.start + s.extent)}"
        if s.kind == "pipelined":
            extra = "".join(f", {k}={v!r}" for k, v in sorted(s.annotations.items()))
            return f"T.Pipelined({extent}{extra})"
        # (the printed program is also the compile cache's key: what changes the code shows)
        factor = s.annotations.get(UNROLL_FACTOR)
        return f"T.{s.kind}({extent}, unroll_factor={factor})" if factor else \
            f"T.{s.kind}({extent})"

    def allocation(self, b: Buffer) -> str:
        if b.scope == LOCAL_VAR:
            return f'{self.name(b)} = T.alloc_var("{b.dtype}")'
        shape = ", ".join(self.expr(d) if isinstance(d, Expr) else str(d) for d in b.shape)
        fn = _ALLOC_FN.get(b.scope, "alloc_buffer")
        return f'{self.name(b)} = T.{fn}(({shape}{"," if len(b.shape) == 1 else ""}), "{b.dtype}")'

    def tile_op(self, s) -> str:
        """The op as the user's T.* call: its contract's text (tilecraft/ops)."""
        if has_contract(s):
            return contract_of(s).text(self, s)
        return f"<{type(s).__name__}>"

    def kwargs(self, d: dict, raw: bool = False) -> str:
        return "".join(f", {k}={v if raw else repr(v)}" for k, v in d.items())

    def func(self, f: PrimFunc) -> str:
        params = []
        for p in f.params:
            if isinstance(p, Buffer):
                shape = ", ".join(self.expr(d) if isinstance(d, Expr) else str(d) for d in p.shape)
                comma = "," if len(p.shape) == 1 else ""
                params.append(f'{self.name(p)}: T.Tensor(({shape}{comma}), "{p.dtype}")')
            else:
                params.append(f"{self.name(p)}: T.{p.dtype}")
        sizes: list = []  # symbolic sizes of the parameters, declared above the function
        for p in f.params:
            for d in (p.shape if isinstance(p, Buffer) else ()):
                _shape_vars(d, sizes)
        for v in sizes:
            dtype = "" if v.dtype.name == "int32" else f', "{v.dtype}"'
            self.emit(0, f'{self.name(v)} = T.symbolic("{self.name(v)}"{dtype})')
        self.emit(0, "@T.prim_func")
        self.emit(0, f"def {f.name}({', '.join(params)}):")
        self.stmt(f.body, 1)
        return "\n".join(self.lines) + "\n"


def _shape_vars(e, out: list):
    if isinstance(e, Var):
        if all(e is not x for x in out):
            out.append(e)
    elif isinstance(e, (Binary, Unary, Cast)):
        for x in (e.a, e.b) if isinstance(e, Binary) else (e.a if isinstance(e, Unary)
                                                           else e.value,):
            _shape_vars(x, out)


def _same(extent, dim) -> bool:
    if isinstance(dim, int):
        return isinstance(extent, Const) and extent.value == dim
    return extent is dim


def expr_text(e) -> str:
    return Printer().expr(e)


def stmt_text(s) -> str:
    p = Printer()
    p.stmt(s, 0)
    return "\n".join(p.lines)


def func_text(f: PrimFunc) -> str:
    p = Printer()
    for param in f.params:  # parameters claim their names first
        p.name(param)
    return p.func(f)


__all__ = ["Printer", "expr_text", "stmt_text", "func_text", "GLOBAL"]
