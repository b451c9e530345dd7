"""The contracts of the ops that compute nothing: T.annotate_layout and T.use_swizzle (which
steer layout inference and block rasterization) and T.print (which shows values).

None of them moves or computes data the cost model charges; T.use_swizzle's block order is
read by the cost model's L2 model directly (analysis/counts.py).
"""
from __future__ import annotations

from ..ir.buffer import Buffer
from ..ir.tileop import AnnotateLayout, Print, TileOpContract, UseSwizzle, register_contract


def annotate_layout_text(p, s: AnnotateLayout) -> str:
    items = ", ".join(f"{p.name(b)}: {getattr(l, 'describe', lambda: repr(l))()}"
                      for b, l in s.layouts.items())
    return f"T.annotate_layout({{{items}}})"


def use_swizzle_text(p, s: UseSwizzle) -> str:
    return f'T.use_swizzle({s.panel_size}, order="{s.order}", enable={s.enable})'


def print_text(p, s: Print) -> str:
    value = p.name(s.value) if isinstance(s.value, Buffer) else p.expr(s.value)
    return f'T.print({value}, msg="{s.msg}")'


def interpret_print(m, s: Print, mask):
    block = tuple(int(m.env[id(v)]) for k in [m.current_kernel] if k for v in k.block_vars)
    where = f" block {block}" if block else ""
    value = m.array_of(s.value) if isinstance(s.value, Buffer) else m.ev.eval(s.value)
    print(f"{s.msg}{where}: {value}" if s.msg else f"{where.strip()}: {value}")


def no_effect(m, s, mask):
    """Layout and scheduling annotations do not change what a program computes."""


def no_charge(s, c, gemm_plan):
    """Nothing moved or computed."""


register_contract(AnnotateLayout, TileOpContract(annotate_layout_text, no_effect, no_charge))
register_contract(UseSwizzle, TileOpContract(use_swizzle_text, no_effect, no_charge))
register_contract(Print, TileOpContract(print_text, interpret_print, no_charge))
