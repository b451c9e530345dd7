"""T.gemm on Hopper: warpgroup MMA (wgmma.mma_async m64nNk16, m64nNk32 for fp8, m64nNk8 for
tf32) with shared-memory descriptors.

The block's consumer threads form groups_m x groups_n warpgroups (128 threads each); warpgroup
(gm, gn) computes rows [gm * Mg, (gm + 1) * Mg) and columns [gn * Ng, ...) of C with Mg / 64
instructions of N = Ng per 16-wide k step (layout.wgmma_c_fragment is the accumulator). A and B
are read by the tensor cores straight from their swizzled shared tiles through 64-bit matrix
descriptors (PTX ISA "Matrix Descriptor Format"); A may instead come from registers (the _rs
form), laid out as mma.sync's A fragment per warp (layout.gemm_a_fragment over 4 * groups_m
warps along M).

Descriptors follow the tile's storage (layout.swizzle: a W-byte swizzle, W = 128 / 64 / 32,
stores a tile as column slabs W bytes wide, each `rows` rows tall, 8-row atoms of 8 * W bytes):
- K-major operand (A stored M x K, B stored N x K): each instruction reads 16 k values inside one
  slab; consecutive 8-row groups are 8 * W bytes apart (SBO); LBO is unused.
- MN-major operand (A stored K x M, B stored K x N; imm-trans = 1): rows are k, so the 16 k of a
  step are two 8-row groups 8 * W bytes apart (SBO), and the MN extent spans slabs `rows * W`
  bytes apart (LBO); the instruction's MN extent must be whole slabs.
The start address is that of the sub-matrix's first element, which lies on an 8-row boundary
where the swizzle is the identity, so the unswizzled offset the layout gives is the right one.

The batch of one T.gemm is fenced, committed and waited for in full before C is read again.
"""
from __future__ import annotations

from ....ir.linear import constant_value
from ....errors import TileError
from ....ir import dtypes as dt
from ....ir.annotations import WARPGROUP_THREADS
from ....ir.buffer import FRAGMENT, LOCAL, Buffer, is_shared
from ....ir.expr import BufferLoad, Call, address_of, const, select
from ....ir.stmt import Allocate, BufferStore, For, call_stmt, seq
from ....ir.tileop import Gemm, GemmWarpPolicy
from ....layout.mma import gemm_c_fragment, wgmma_c_fragment
from ....layout.swizzle import atom_row_bytes, swizzle_mode_for
from .gemm import warp_partition
from .lowering import packed_pair
from ..intrinsics import (MAKE_SMEM_DESC, WGMMA, WGMMA_COMMIT_GROUP, WGMMA_FENCE,
                          WGMMA_FENCE_REGISTERS, WGMMA_FP8, WGMMA_RS, WGMMA_TF32,
                          WGMMA_WAIT_GROUP)

WARPGROUP = WARPGROUP_THREADS
_SUFFIX = {"float16": "f16", "bfloat16": "bf16"}
_FP8 = {"float8_e4m3": "e4m3", "float8_e5m2": "e5m2"}
_DESC_MODE = {"128B": 1, "64B": 2, "32B": 3}


def _is_fp8(op: Gemm) -> bool:
    return op.A.buffer.dtype.name in _FP8


def _is_tf32(op: Gemm) -> bool:
    return op.multiply_dtype() == "tfloat32"


def k_step(op: Gemm) -> int:
    """k values per instruction: 16 for 16-bit inputs, 32 for fp8, 8 for tf32 (32 bytes of a
    row each)."""
    return 32 if _is_fp8(op) else 8 if _is_tf32(op) else 16


def operand_is_k_major(op: Gemm, which: str) -> bool:
    return (not op.transpose_A) if which == "A" else op.transpose_B


def _stored_tile(region):
    shape = region.buffer.static_shape()
    return shape[-2], shape[-1]


def _slab_elements(region) -> int | None:
    """Elements in one swizzle-atom row (the slab width) of a shared operand; None when the
    tile admits no swizzle (WGMMA cannot describe padded or plain row-major tiles)."""
    rows, cols = _stored_tile(region)
    bits = region.buffer.dtype.bits
    mode = swizzle_mode_for(rows, cols, bits)
    if mode is None:
        return None
    return atom_row_bytes(mode) * 8 // bits


def _partitions(threads: int):
    groups = threads // WARPGROUP
    return [(gm, groups // gm) for gm in range(1, groups + 1) if groups % gm == 0]


def _sub_tile_problem(op: Gemm, which: str, region) -> str | None:
    """Why a shared operand region is not one wgmma's descriptors can address, or None. The
    descriptors address the buffer's own swizzled tile: a region may start later along K by
    whole k steps (as every instruction after the first does) but must cover the M or N
    extent from its start (q[:, :D] and q[:, D:] of one tile are both fine)."""
    starts = [constant_value(s) for s in region.starts[-2:]]
    if starts == [0, 0]:
        return None
    k_axis = 1 if operand_is_k_major(op, which) else 0
    rows, cols = _stored_tile(region)
    extents = [constant_value(e) for e in region.extents[-2:]]
    if starts[1 - k_axis] != 0 or extents[1 - k_axis] != (rows, cols)[1 - k_axis]:
        return "along its M / N extent"
    if starts[k_axis] is None or starts[k_axis] % k_step(op):
        return f"starting along K at {region.starts[-2:][k_axis]}, not a multiple of {k_step(op)}"
    return None


def wgmma_partition(op: Gemm, m: int, n: int, threads: int):
    """(groups_m, groups_n) for a gemm lowered to wgmma, or None when no split of the block's
    warpgroups fits: whole m64 instructions, N per instruction a multiple of 8 up to 256, A in
    registers one m64 band per warpgroup, MN-major operands in whole slabs."""
    fits = []
    for gm, gn in _partitions(threads):
        mg, ng = m // gm if m % gm == 0 else 0, n // gn if n % gn == 0 else 0
        if mg % 64 or mg == 0 or ng % 8 or not 8 <= ng <= 256:
            continue
        if op.A.buffer.scope == FRAGMENT and mg != 64:
            continue
        if is_shared(op.A.buffer.scope) and not operand_is_k_major(op, "A") and \
                64 % (_slab_elements(op.A) or 1 << 30):
            continue
        if not operand_is_k_major(op, "B") and ng % (_slab_elements(op.B) or 1 << 30):
            continue
        fits.append((gm, gn))
    if not fits:
        return None
    if op.policy == GemmWarpPolicy.FullCol:
        return max(fits, key=lambda p: p[1])
    return max(fits, key=lambda p: p[0])  # one wide instruction per warpgroup is the fastest


def accumulator_layout(op: Gemm, m: int, n: int, threads: int):
    """(warps along M, warps along N, accumulator Fragment) of an m x n gemm as its
    instruction (op.instruction) leaves the accumulator in registers over `threads`."""
    if op.instruction == "wgmma":
        gm, gn = wgmma_partition(op, m, n, threads)
        return 4 * gm, gn, wgmma_c_fragment(m, n, gm, gn)
    wm, wn = warp_partition(op, m, n, threads)
    return wm, wn, gemm_c_fragment(m, n, wm, wn)


def wgmma_unfit_reason(op: Gemm, dims, threads: int) -> str | None:
    """Why this gemm cannot use wgmma (None when it can)."""
    m, n, k = dims
    a, b, c = op.A.buffer, op.B.buffer, op.C.buffer
    fp8 = a.dtype.name in _FP8 and b.dtype.name in _FP8
    tf32 = op.multiply_dtype() == "tfloat32"
    if not (fp8 or tf32 or (a.dtype.name in _SUFFIX and b.dtype.name == a.dtype.name)) or \
            c.dtype.name != "float32":
        return (f"operands {a.dtype} x {b.dtype} -> {c.dtype} (wgmma here: float16 or bfloat16, "
                "tfloat32 or float32, or float8_e4m3 / float8_e5m2 in any pair, -> float32)")
    if threads % WARPGROUP:
        return f"{threads} threads are not whole warpgroups"
    if k % k_step(op):
        return f"K = {k} is not a multiple of {k_step(op)}"
    if (fp8 or tf32) and (a.scope == FRAGMENT or op.transpose_A or not op.transpose_B):
        return (f"{'fp8' if fp8 else 'tf32'} wgmma reads both operands K-major from shared "
                "memory: A stored M x K (transpose_A=False) and B stored N x K "
                "(transpose_B=True)")
    if not is_shared(b.scope):
        return f"B ({b.name}) is not in shared memory"
    if a.scope == FRAGMENT and op.transpose_A:
        return "a register A operand must not be transposed"
    for which, r in (("A", op.A), ("B", op.B)):
        if not is_shared(r.buffer.scope):
            continue
        problem = _sub_tile_problem(op, which, r)
        if problem:
            return f"{which} ({r.buffer.name}) is a sub-tile of its shared buffer {problem}"
        if _slab_elements(r) is None:
            return f"{which} ({r.buffer.name}) admits no swizzled layout"
    if wgmma_partition(op, m, n, threads) is None:
        return (f"a {m}x{n} tile does not split over {threads // WARPGROUP} warpgroups in "
                "m64nNk16 instructions")
    return None


# ----------------------------------------------------------------------------- lowering

def _descriptor(ctx, region, k_major: bool, mn0, k0):
    """The matrix descriptor of the operand sub-matrix whose first element is (mn0, k0)."""
    b = region.buffer
    rows, cols = _stored_tile(region)
    bits = b.dtype.bits
    mode = swizzle_mode_for(rows, cols, bits)
    width = atom_row_bytes(mode)
    row, col = (mn0, k0) if k_major else (k0, mn0)
    starts = list(region.starts)
    offset = ctx.shared_offset(b, starts[:-2] + [starts[-2] + row, starts[-1] + col])
    address = address_of(ctx.flat(b), offset)
    lbo = 16 if k_major else rows * width
    return Call(MAKE_SMEM_DESC.name, (address, const(_DESC_MODE[mode]), const(lbo),
                                       const(8 * width)), dt.dtype("uint64"))


def lower_wgmma(op: Gemm, ctx, m: int, n: int, k: int):
    gm, gn = wgmma_partition(op, m, n, ctx.num_threads)
    mg, ng = m // gm, n // gn
    kstep = k_step(op)
    insts, steps = mg // 64, k // kstep
    group = ctx.tx // WARPGROUP
    g_m, g_n = group % gm if gm > 1 else 0, group // gm if gn > 1 else 0
    c_reg = ctx.register_array(op.C.buffer)
    fp8, tf32 = _is_fp8(op), _is_tf32(op)
    suffix = (f"{_FP8[op.A.buffer.dtype.name]}_{_FP8[op.B.buffer.dtype.name]}" if fp8
              else "tf32" if tf32 else _SUFFIX[op.A.buffer.dtype.name])
    trans_b = 0 if operand_is_k_major(op, "B") else 1
    body, words = [], None
    if op.A.buffer.scope == FRAGMENT:
        # gemm_a_fragment with one 16-row band per warp: registers 8 * kk + 0..7 are mma's
        # a0..a7 of k step kk, packed here into the four 32-bit words wgmma takes.
        a_reg = ctx.register_array(op.A.buffer)
        u32 = dt.dtype("uint32")
        words = Buffer(f"{op.C.buffer.name}_aw", (steps * 4,), u32, LOCAL)
        body.append(Allocate(words))
        w = ctx.fresh("w", steps * 4)
        body.append(For(w, const(0), const(steps * 4), "unroll", BufferStore(words, (w,),
            packed_pair(op.A.buffer.dtype.name, BufferLoad(a_reg, (w * 2,)),
                        BufferLoad(a_reg, (w * 2 + 1,)))), {}, op.span))
    body.append(call_stmt(WGMMA_FENCE.name))
    kk = ctx.fresh("kk", steps)
    scale = select(kk > 0, const(1), const(0)) if op.clear_accum else const(1)
    issue = []
    for i in range(insts):
        acc = address_of(c_reg, const(i * ng // 2))
        desc_b = _descriptor(ctx, op.B, bool(not trans_b), ctx.simplify(g_n * ng), kk * kstep)
        if words is not None:
            a_words = address_of(words, kk * 4)
            issue.append(call_stmt(WGMMA_RS.format(n=ng, types=suffix, trans_b=trans_b), acc,
                               a_words, desc_b, scale))
        else:
            k_major_a = operand_is_k_major(op, "A")
            desc_a = _descriptor(ctx, op.A, k_major_a, ctx.simplify(g_m * mg + i * 64),
                                 kk * kstep)
            trans_a = 0 if k_major_a else 1
            # fp8 and tf32 forms are K-major only and take no transpose immediates
            name = (WGMMA_FP8.format(n=ng, types=suffix) if fp8 else
                    WGMMA_TF32.format(n=ng) if tf32 else
                    WGMMA.format(n=ng, types=suffix, trans_a=trans_a, trans_b=trans_b))
            issue.append(call_stmt(name, acc, desc_a, desc_b, scale))
    body.append(For(kk, const(0), const(steps), "unroll", seq(issue), {}, op.span))
    first = address_of(c_reg, const(0))
    body += [call_stmt(WGMMA_COMMIT_GROUP.name), call_stmt(WGMMA_WAIT_GROUP.format(n=0)),
             call_stmt(WGMMA_FENCE_REGISTERS.format(regs=c_reg.shape[0]), first)]
    return seq(body)


def check_wgmma(op: Gemm, ctx, dims):
    reason = wgmma_unfit_reason(op, dims, ctx.num_threads)
    if reason is not None:
        raise TileError(f"T.gemm was given to wgmma but cannot use it: {reason}", op.span)
