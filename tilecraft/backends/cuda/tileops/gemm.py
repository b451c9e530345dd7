"""T.gemm: the warp partition (policy), and lowering to ldmatrix + mma.sync (m16n8k16, and
m16n8k8 for tfloat32).

The block's warps tile C as wm x wn; warp (warp_m, warp_n) owns a (M/wm) x (N/wn) sub-tile made
of MI x NI atoms of 16x8 (layout.gemm_c_fragment: register (mi * NI + ni) * 4 + r holds
element r of atom (mi, ni), r as mma's d0..d3). Per 16-wide k step each warp loads its A
atoms with ldmatrix.x4 (transposed when A is stored K x M) and its B atoms two at a time with
ldmatrix.x4 (transposed when B is stored K x N), then issues MI x NI mma instructions. A held in
registers (gemm_rs) uses layout.gemm_a_fragment, whose registers for (mi, k step) are exactly
the eight halves of mma's A operand, so they are packed into four words in place.
float16 operands accumulate in float32 or float16 (the half-accumulating mma, whose four
accumulator halves per atom sit where the float32 ones do), bfloat16 ones in float32.
tfloat32 operands, and float32 ones (as in TileLang: Gemm.multiply_dtype), run m16n8k8: counted in 32-bit words its A and B registers sit where
m16n8k16's do, so the same ldmatrix loads fetch them where the operand is K-contiguous in
shared memory (A stored M x K, B stored N x K); the other orientations, which ldmatrix's
16-bit transpose cannot serve, read each word with a shared load. Every word is rounded to
tf32 (cvt.rna) on its way into the instruction. Other operands (float64, fp8, 8-bit integers), which
have no such path here, and float32 ones under tl.exact_float32_gemm, multiply with scalar FMAs;
those read A from shared memory only.
"""
from __future__ import annotations

from ....errors import TileError
from ....ir import dtypes as dt
from ....ir.buffer import FRAGMENT, LOCAL, Buffer, is_shared
from ....ir.expr import BufferLoad, Call, address_of, cast, const
from ....ir.stmt import Allocate, BufferStore, Evaluate, For, seq
from ....ir.tileop import Gemm, GemmWarpPolicy
from ....ir.annotations import FRAGMENT_LOOP
from .lowering import hoistable_offset, packed_pair
from ..intrinsics import LDMATRIX, LDMATRIX_TRANS, MMA, MMA_TF32, TF32_OF_BITS, TO_TF32

# (A dtype, C dtype) -> (the mma.sync, the k of one instruction)
_MMA = {("float16", "float32"): (MMA.format(types="f16_f32"), 16),
        ("bfloat16", "float32"): (MMA.format(types="bf16_f32"), 16),
        ("float16", "float16"): (MMA.format(types="f16_f16"), 16),
        ("tfloat32", "float32"): (MMA_TF32.name, 8)}


def warp_partition(op: Gemm, m: int, n: int, threads: int) -> tuple[int, int]:
    """(warps along M, warps along N) for the op's policy; every warp gets whole 16x8 atoms."""
    warps = max(1, threads // 32)
    options = [(wm, warps // wm) for wm in range(1, warps + 1) if warps % wm == 0]
    fits = [(wm, wn) for wm, wn in options if m % (16 * wm) == 0 and n % (8 * wn) == 0]
    if not fits:
        raise TileError(f"T.gemm: a {m}x{n} tile cannot be split over {warps} warps in whole "
                        "16x8 tensor-core atoms; use tile sizes that are multiples of "
                        f"{16 * warps} (M) or {8 * warps} (N), or fewer threads", op.span)
    if op.policy == GemmWarpPolicy.FullRow:
        return max(fits, key=lambda p: p[0])
    if op.policy == GemmWarpPolicy.FullCol:
        return max(fits, key=lambda p: p[1])
    # Square: the per-warp tile closest to square, ties to more warps along M.
    return min(fits, key=lambda p: (abs((m / p[0]) / 16 - (n / p[1]) / 16), -p[0]))


def warp_coords(tx, wm: int, wn: int):
    """(warp_m, warp_n, lane) of thread tx; consecutive warps advance along M first."""
    warp = tx // 32
    return warp % wm, warp // wm, tx % 32


def lower_gemm(op: Gemm, ctx) -> object:
    m, n, k = op.dims()
    if op.instruction == "wgmma":
        from .wgmma import lower_wgmma
        return lower_wgmma(op, ctx, m, n, k)
    wm, wn = ctx.layouts.gemm_warps[id(op)]
    key = (op.multiply_dtype(), op.C.buffer.dtype.name)
    if op.instruction == "fma" or key not in _MMA or k % _MMA[key][1]:
        return _lower_fma(op, ctx, m, n, k)
    return _lower_mma(op, ctx, m, n, k, wm, wn, *_MMA[key])


def _origin(region, transposed: bool):
    """(row, col) start of a 2-d operand region in its stored orientation."""
    starts = [s for s, e in zip(region.starts, region.static_extents())]
    return starts[-2], starts[-1]


def _shared_offset(ctx, region, row, col):
    starts = list(region.starts)
    idx = starts[:-2] + [starts[-2] + row, starts[-1] + col]
    return ctx.shared_offset(region.buffer, idx)


def _lower_mma(op: Gemm, ctx, m, n, k, wm, wn, mma_name, k_step):
    tx = ctx.tx
    warp_m, warp_n, lane = warp_coords(tx, wm, wn)
    WM, WN = m // wm, n // wn
    MI, NI, KI = WM // 16, WN // 8, k // k_step
    words = k_step // 8     # operand elements per 32-bit register: 2, or 1 for tf32
    half = 4 * words        # the elements of 16 bytes: one row of an 8x8 b16 matrix
    tf32 = words == 1
    g, t = lane // 4, lane % 4
    u32 = dt.dtype("uint32")
    body, allocs = [], []
    a_frag = Buffer(f"{op.C.buffer.name}_a", (MI * 4,), u32, LOCAL)
    b_frag = Buffer(f"{op.C.buffer.name}_b", (NI * 2,), u32, LOCAL)
    allocs += [Allocate(a_frag), Allocate(b_frag)]
    c_reg = ctx.register_array(op.C.buffer)
    kk = ctx.fresh("kk", KI)
    mi = ctx.fresh("mi", MI)
    A, B = op.A.buffer, op.B.buffer
    # --- A atoms --------------------------------------------------------------
    if A.scope == FRAGMENT:
        a_reg = ctx.register_array(A)
        # gemm_a_fragment: registers (kk * MI + mi) * 4 * words + .. are mma's a0, a1, ...
        base = (kk * MI + mi) * 4 * words
        a_load = [BufferStore(a_frag, (mi * 4 + j,), Call(TO_TF32.name, (
            BufferLoad(a_reg, (ctx.simplify(base + j),)),), u32) if tf32 else packed_pair(
            A.dtype.name, BufferLoad(a_reg, (ctx.simplify(base + 2 * j),)),
            BufferLoad(a_reg, (ctx.simplify(base + 2 * j + 1),))))
            for j in range(4)]
    elif tf32 and op.transpose_A:
        # stored K x M: word j is A[m = g + 8 (j % 2), k = t + 4 (j // 2)]
        a_load = [BufferStore(a_frag, (mi * 4 + j,), _tf32_word(
            ctx, op.A, kk * 8 + t + 4 * (j // 2), warp_m * WM + mi * 16 + g + 8 * (j % 2)))
            for j in range(4)]
    else:
        if not op.transpose_A:
            row = warp_m * WM + mi * 16 + lane % 16
            col = kk * k_step + (lane // 16) * half
            off = _shared_offset(ctx, op.A, ctx.simplify(row), ctx.simplify(col))
            fn = LDMATRIX.format(count=4)
        else:
            q = lane // 8
            row = kk * 16 + (q // 2) * 8 + lane % 8
            col = warp_m * WM + mi * 16 + (q % 2) * 8
            off = _shared_offset(ctx, op.A, ctx.simplify(row), ctx.simplify(col))
            fn = LDMATRIX_TRANS.format(count=4)
        off = hoistable_offset(off, ctx, [(kk, KI), (mi, MI)])
        a_load = [Evaluate(Call(fn, (address_of(a_frag, mi * 4), address_of(ctx.flat(A), off)), dt.handle))]
        if tf32:
            a_load += _rounded_to_tf32(a_frag, mi * 4, 4)
    body.append(For(mi, const(0), const(MI), "unroll", seq(a_load), {}, op.span))
    # --- B atoms: two per ldmatrix.x4 when the warp has an even number of them ---------
    if tf32 and not op.transpose_B:   # stored K x N: word j is B[k = t + 4 j, n = g]
        ni = ctx.fresh("ni", NI)
        b_load = seq([BufferStore(b_frag, (ni * 2 + j,), _tf32_word(
            ctx, op.B, kk * 8 + t + 4 * j, warp_n * WN + ni * 8 + g)) for j in range(2)])
        body.append(For(ni, const(0), const(NI), "unroll", b_load, {}, op.span))
    else:
        pair = 2 if NI % 2 == 0 else 1
        ni = ctx.fresh("ni", NI // pair)
        count = 4 if pair == 2 else 2
        if not op.transpose_B:  # stored K x N: rows are k, transposed loads give col-major atoms
            krow = kk * 16 + lane % 16
            ncol = warp_n * WN + (ni * pair + (lane // 16) * (pair - 1)) * 8
            fn = LDMATRIX_TRANS.format(count=count)
        else:  # stored N x K: rows are n
            q = lane // 8
            krow = warp_n * WN + (ni * pair + (q // 2) * (pair - 1)) * 8 + lane % 8
            ncol = kk * k_step + (q % 2) * half
            fn = LDMATRIX.format(count=count)
        off = hoistable_offset(_shared_offset(ctx, op.B, ctx.simplify(krow),
                                              ctx.simplify(ncol)),
                               ctx, [(kk, KI), (ni, NI // pair)])
        b_load = [Evaluate(Call(fn, (address_of(b_frag, ni * 2 * pair),
                                     address_of(ctx.flat(B), off)), dt.handle))]
        if tf32:
            b_load += _rounded_to_tf32(b_frag, ni * 2 * pair, 2 * pair)
        body.append(For(ni, const(0), const(NI // pair), "unroll", seq(b_load), {}, op.span))
    # --- the MMAs --------------------------------------------------------------
    mi2, ni2 = ctx.fresh("mi", MI), ctx.fresh("ni", NI)
    c_at = ctx.simplify((mi2 * NI + ni2) * 4)
    mma = Evaluate(Call(mma_name, (address_of(c_reg, c_at), address_of(a_frag, mi2 * 4),
                                   address_of(b_frag, ni2 * 2), address_of(c_reg, c_at)), dt.handle))
    body.append(For(mi2, const(0), const(MI), "unroll",
                    For(ni2, const(0), const(NI), "unroll", mma, {}, op.span), {}, op.span))
    # Marked so rotate_mma_loop can find the fragment loads and the mmas of each k step.
    loop = For(kk, const(0), const(KI), "unroll", seq(body), {FRAGMENT_LOOP: True}, op.span)
    out = allocs + [loop]
    if op.clear_accum:
        out.insert(0, _clear(c_reg, ctx, op))
    return seq(out)


def _tf32_word(ctx, region, row, col):
    """The operand element at (row, col) of a shared tile in its stored orientation, read
    alone and rounded to tf32: one mma register word."""
    value = _region_load(ctx, region, (ctx.simplify(row), ctx.simplify(col)))
    return Call(TO_TF32.name, (value,), dt.dtype("uint32"))


def _rounded_to_tf32(frag: Buffer, start, count: int) -> list:
    """The `count` words of frag from `start` (floats as ldmatrix left them) rounded to tf32."""
    return [BufferStore(frag, (start + j,), Call(TF32_OF_BITS.name, (
        BufferLoad(frag, (start + j,)),), frag.dtype)) for j in range(count)]


def _clear(reg: Buffer, ctx, op):
    i = ctx.fresh("i", reg.shape[0])
    return For(i, const(0), const(reg.shape[0]), "unroll",
               BufferStore(reg, (i,), const(0, reg.dtype)), {}, op.span)


def _lower_fma(op: Gemm, ctx, m, n, k):
    """C[i, j] += sum_k A[i, k] * B[k, j] for the elements each thread holds (scalar path)."""
    if op.A.buffer.scope == FRAGMENT or op.B.buffer.scope == FRAGMENT:
        raise TileError("T.gemm: register operands need tensor-core operands (float16, "
                        "bfloat16, or float32 / tfloat32 multiplied as TF32: K a multiple of "
                        "8, not under tl.exact_float32_gemm); got "
                        f"{op.A.buffer.dtype} x {op.B.buffer.dtype}", op.span)
    c = ctx.layouts.buffer(op.C.buffer)
    c_reg = ctx.register_array(op.C.buffer)
    l = ctx.fresh("l", c.locals_per_thread)
    i, j = [ctx.simplify(x) for x in c.logical_of(ctx.tx, l)[:2]]
    kv = ctx.fresh("k", k)
    acc_t = op.C.buffer.dtype
    a_idx = (kv, i) if op.transpose_A else (i, kv)
    b_idx = (j, kv) if op.transpose_B else (kv, j)
    a = _region_load(ctx, op.A, a_idx)
    b = _region_load(ctx, op.B, b_idx)
    local = ctx.simplify(c.local_of([i, j]))
    update = BufferStore(c_reg, (local,), BufferLoad(c_reg, (local,)) +
                         cast(a, acc_t) * cast(b, acc_t))
    inner = For(kv, const(0), const(k), "serial", update, {}, op.span)
    body = [inner] if not op.clear_accum else [
        BufferStore(c_reg, (local,), const(0, acc_t)), inner]
    loop = For(l, const(0), const(c.locals_per_thread), "unroll", seq(body), {}, op.span)
    return loop


def _region_load(ctx, region, idx):
    starts = list(region.starts)
    full = starts[:-2] + [starts[-2] + idx[0], starts[-1] + idx[1]]
    b = region.buffer
    if is_shared(b.scope):
        return BufferLoad(ctx.flat(b), (ctx.shared_offset(b, full),))
    return BufferLoad(b, tuple(full))

