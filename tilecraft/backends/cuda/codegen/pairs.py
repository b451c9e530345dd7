"""Element-wise float16 / bfloat16 code two elements at a time (f16x2 / bf16x2 instructions).

A T.Parallel loop lowers to `for l in 0..n (unrolled): reg[l] = f(l)`, one element of the
thread's share of a fragment per iteration. In 16-bit floats every operation of f then costs
one instruction per element, while the hardware computes two halves of a 32-bit register in
one (HADD2, HMUL2, HFMA2): the per-element form spends twice the instructions a kernel engineer
would, and on element-wise work such as unpacking and scaling quantized weights the
instructions, not memory, bound the kernel. So the emitter prints such a loop over pairs,

    for p in 0..n/2 (unrolled):  st_pair(&reg[2p], f2(p))

where f2 computes f(2p) and f(2p + 1) together: a 16-bit float operation of two paired
operands becomes its x2 form (x + y * z one fma), an operand that is two consecutive registers
is loaded as one word, one that is the same in both lanes is splatted, an integer of at most
1024 values converted to float16 goes through its bits in pairs (int_fields_to_half2), and
anything else is computed per lane and paired (make_pair). Each x2 instruction rounds each half
as the scalar one does, so the results are those of the scalar loop (fused multiply-adds
aside, which nvcc contracts in the scalar loop as well).

A loop is printed this way when its extent is even, its body is stores into 16-bit float
register arrays at indices i(l) with i(2p + 1) = i(2p) + 1, those arrays are read in the body
only at the index they are stored at (iterations independent), and f has at least one 16-bit
float operation to pair. The IR, the emulator and the interpreter keep the scalar loop.
"""
from __future__ import annotations

import numpy as np

from ....arith.bounds import bound_of, simplify, simplify_int_ops
from ....ir import dtypes as dt
from ....ir.buffer import LOCAL
from ....ir.expr import Binary, BufferLoad, Cast, Const, Expr, Unary, Var
from ....ir.linear import structural_key
from ....ir.stmt import BufferStore, For, flat_stmts
from ....ir.visitor import stores_independent, substitute
from ..intrinsics import (BYTE_TWICE, HALFWORD_TWICE, INT_FIELDS_TO_HALF2, LD_PAIR, MAKE_PAIR,
                          SPLAT, ST_PAIR)

PAIRED = ("float16", "bfloat16")
_X2 = {"+": "__hadd2", "-": "__hsub2", "*": "__hmul2", "/": "__h2div", "min": "__hmin2",
       "max": "__hmax2"}


def _is_16bit_float(e) -> bool:
    return isinstance(e, Expr) and e.dtype.name in PAIRED


def _one_apart(a, b, bounds) -> bool:
    d = simplify(b - a, bounds)
    return isinstance(d, Const) and d.value == 1


class _Pairing:
    def __init__(self, emitter, l: Var, p: Var):
        self.em = emitter
        self.bounds = emitter.var_bounds   # p's range included (emit_pairs sets it)
        self.lanes = ({id(l): p * 2}, {id(l): p * 2 + 1})
        self.ops = 0   # the x2 operations printed

    def lane(self, e, k: int):
        return simplify_int_ops(substitute(e, self.lanes[k]), self.bounds)

    def expr(self, e) -> str:
        """C++ text of the pair (e at 2p, e at 2p + 1) for a 16-bit float expression e."""
        if isinstance(e, Binary) and e.op in _X2 and _is_16bit_float(e.a) and \
                _is_16bit_float(e.b) and e.a.dtype is e.dtype and e.b.dtype is e.dtype:
            self.ops += 1
            if e.op == "+":
                for prod, other in ((e.b, e.a), (e.a, e.b)):
                    if isinstance(prod, Binary) and prod.op == "*" and \
                            prod.a.dtype is e.dtype and prod.b.dtype is e.dtype:
                        return (f"__hfma2({self.expr(prod.a)}, {self.expr(prod.b)}, "
                                f"{self.expr(other)})")
            return f"{_X2[e.op]}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, Unary) and e.op == "-" and _is_16bit_float(e.a):
            self.ops += 1
            return f"__hneg2({self.expr(e.a)})"
        if isinstance(e, Cast) and e.dtype.name == "float16" and e.value.dtype.is_int:
            text = self.small_ints(e.value)
            if text is not None:
                self.ops += 1
                return text
        lo, hi = self.lane(e, 0), self.lane(e, 1)
        if isinstance(lo, BufferLoad) and isinstance(hi, BufferLoad) and lo.buffer is hi.buffer \
                and lo.buffer.scope == LOCAL and len(lo.indices) == 1 and \
                _one_apart(lo.indices[0], hi.indices[0], self.bounds):
            return f"{LD_PAIR.name}(&{self.em.expr(lo)})"
        if structural_key(lo) == structural_key(hi):
            return f"{SPLAT.name}({self.em.expr(lo)})"
        return f"{MAKE_PAIR.name}({self.em.expr(lo)}, {self.em.expr(hi)})"

    def small_ints(self, value) -> str | None:
        """Two integers in a range of at most 1024 values to float16 through their bits."""
        lanes = [self.lane(value, k) for k in (0, 1)]
        bounds = [bound_of(x, self.bounds) for x in lanes]
        lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
        if self.em.int_bias(dt.dtype("float16"), lo, hi) is None:
            return None
        ys = [x if lo == 0 else simplify(x - lo, self.bounds) for x in lanes]
        fields, d = self.fields(*ys)
        # (1024 + y0, 2^(10 - d) + y1) minus (1024 - lo, 2^(10 - d) - lo): integers of at
        # most 2048, exact in float16.
        magic = 0x6400 | ((25 - d) << 10) << 16
        bias = _half_bits(1024 - lo) | _half_bits((1 << (10 - d)) - lo) << 16
        return f"{INT_FIELDS_TO_HALF2.name}({fields}, {magic:#010x}u, {bias:#010x}u)"

    def fields(self, y0, y1) -> tuple:
        """(C text of a word holding y0 in bits 0.. and y1 from bit 16 + d, d). Two bit fields
        of one value, (x >> s) & m and (x >> (s + d)) & m (the two nibbles of a byte), take x
        copied into both halves of a word (one PRMT), a shift by s and a mask: the second
        field then lies at bit 16 + d, which int_fields_to_half2 reads with a smaller
        exponent, when d plus the field's width fits the 10 bits of a half's mantissa."""
        f0, f1 = _field(y0), _field(y1)
        if f0 and f1 and structural_key(f0[0]) == structural_key(f1[0]) and f0[2] == f1[2]:
            (x, s0, m), (_, s1, _) = f0, f1
            d, width = simplify(s1 - s0, self.bounds), m.bit_length()
            s0_lo, s0_hi = bound_of(s0, self.bounds)
            if isinstance(d, Const) and 0 < d.value and d.value + width <= 10 and \
                    isinstance(s0_lo, int) and isinstance(s0_hi, int) and s0_lo >= 0 and \
                    s0_hi + width <= 16:
                d = int(d.value)
                twice = self.twice(x, s0_hi + d + width)
                if twice is not None:
                    shifted = "" if isinstance(s0, Const) and s0.value == 0 else \
                        f" >> ({self.em.expr(s0)})"
                    return f"(({twice}{shifted}) & {m | m << (16 + d):#010x}u)", d
        return f"((uint32_t)({self.em.expr(y0)}) | ((uint32_t)({self.em.expr(y1)}) << 16))", 0

    def twice(self, x, top: int) -> str | None:
        """x in both halves of a word, where the fields below bit `top` are all that is read:
        a byte of a register array straight from its word, a value in [0, 2^16) by a PRMT."""
        load = x.value if isinstance(x, Cast) and x.dtype.is_int else x
        if isinstance(load, BufferLoad) and load.buffer.scope == LOCAL and \
                load.buffer.dtype.bits == 8 and load.buffer.dtype.is_int and top <= 8 and \
                len(load.indices) == 1:
            return (f"{BYTE_TWICE.name}({self.em.name(load.buffer)}, "
                    f"{self.em.expr(load.indices[0])})")
        x_lo, x_hi = bound_of(x, self.bounds)
        if isinstance(x_lo, int) and isinstance(x_hi, int) and 0 <= x_lo and x_hi < (1 << 16):
            return f"{HALFWORD_TWICE.name}((uint32_t)({self.em.expr(x)}))"
        return None


def _half_bits(v: int) -> int:
    return int(np.float16(v).view(np.uint16))


def _field(e):
    """(x, s, m) when e is (x >> s) & m or x & m with m = 2^w - 1 a constant (s an expression)."""
    if not (isinstance(e, Binary) and e.op == "&" and isinstance(e.b, Const)):
        return None
    m = int(e.b.value)
    if m <= 0 or m & (m + 1):
        return None
    if isinstance(e.a, Binary) and e.a.op == ">>":
        return e.a.a, e.a.b, m
    return e.a, Const(0, dt.int32), m


def _stores(loop: For) -> list | None:
    stores = list(flat_stmts(loop.body))
    if not stores or not all(isinstance(s, BufferStore) and s.buffer.scope == LOCAL and
                             s.buffer.dtype.name in PAIRED and len(s.indices) == 1 and
                             s.value.dtype is s.buffer.dtype for s in stores):
        return None
    return stores if stores_independent(stores) else None


def emit_pairs(emitter, s: For, depth: int) -> bool:
    """Print the unrolled loop s over pairs of elements when it qualifies (module docstring);
    False, printing nothing, when it does not."""
    if s.kind != "unroll" or not isinstance(s.start, Const) or s.start.value != 0 or \
            not isinstance(s.extent, Const) or s.extent.value < 2 or s.extent.value % 2:
        return False
    stores = _stores(s)
    if stores is None:
        return False
    p = Var(f"{s.var.name}_pair", dt.int32)
    half = s.extent.value // 2
    emitter.var_bounds[id(p)] = (0, half - 1)
    pairing = _Pairing(emitter, s.var, p)
    lines = []
    for store in stores:
        lo, hi = (pairing.lane(store.indices[0], k) for k in (0, 1))
        if not _one_apart(lo, hi, pairing.bounds):
            return False
        target = f"&{emitter.name(store.buffer)}[{emitter.expr(lo)}]"
        lines.append((f"{ST_PAIR.name}({target}, {pairing.expr(store.value)});", store.span))
    if pairing.ops == 0:
        return False
    v = emitter.name(p)
    emitter.emit(depth, "#pragma unroll", s.span)
    emitter.emit(depth, f"for (int {v} = 0; {v} < {half}; ++{v}) {{", s.span)
    for text, span in lines:
        emitter.emit(depth + 1, text, span)
    emitter.emit(depth, "}")
    return True
