"""The intrinsics of backends/cuda/intrinsics.py, executed for all threads of a block at once:
`resolve` finds a call's table entry and its handler, which gets the block machine and the
evaluated arguments (pointers arrive as memory.Pointer) and returns the call's value, if any.
Warp-collective functions (shuffles, ldmatrix, mma.sync) run per warp: [threads] arrays are
reshaped to [warps, 32]; a collective executed by only part of a warp is reported. The sm_90a
functions (wgmma, TMA, mbarriers, named barriers, fences, role predicates) are carried out by
hopper.py and barriers.py.
"""
from __future__ import annotations

import re

import numpy as np

from ....errors import TileError
from ....ir import dtypes as dt
from ....ir.buffer import GLOBAL
from ....layout.mma import mma_a_fragment, mma_b_fragment, mma_c_fragment
from ..tileops.cache_hints import HINT_SUFFIX, unhinted
from .bulk_stores import stmatrix_x4
from .hopper import TF32_BITS, make_smem_desc
from .tma_loads import tma_load, tma_load_im2col
from .index_checks import checked_index
from .memory import Bits, Pointer, as_bytes
from .shuffles import shfl_group, shfl_xor, syncwarp, warp_reduce, whole_warps
from ..intrinsics import (ATOMIC, ATOMIC_ADD_V2, ATOMIC_ADD_X2, BARRIER_ALL, CHECKED_INDEX,
                          CP_ASYNC_ARRIVE_NOINC, CP_ASYNC_COMMIT, CP_ASYNC_WAIT, CP_ASYNC_WAIT_ALL,
                          FENCE_BARRIER_INIT, FENCE_PROXY_ASYNC_SHARED, IS_BLOCK_LEADER,
                          IS_PRODUCER_LEADER, IS_PRODUCER_THREAD, L2_POLICY, LAUNCH_WAVE_PARITY,
                          LDMATRIX, LDMATRIX_TRANS, MAKE_SMEM_DESC, MBARRIER_ARRIVE,
                          MBARRIER_ARRIVE_EXPECT_TX, MBARRIER_EXPECT_TX, MBARRIER_ARRIVE_WARP,
                          MBARRIER_INIT, MBARRIER_WAIT_PARITY, MMA, MMA_TF32, NAMED_BARRIER_ARRIVE,
                          NAMED_BARRIER_SYNC, NAMESPACE, PACK_BF162, PACK_HALF2, PREFETCH_L2,
                          SETMAXNREG_DEC, SETMAXNREG_INC, SHFL_GROUP, SHFL_XOR, STMATRIX_X4,
                          SYNCTHREADS, SYNCWARP, TMA_LOAD, TMA_LOAD_IM2COL, TMA_STORE,
                          TMA_STORE_ADD, TMA_STORE_COMMIT, TMA_STORE_WAIT, TF32_OF_BITS, TO_TF32,
                          WARP_REDUCE, WARPGROUP, WGMMA_COMMIT_GROUP, WGMMA_FENCE,
                          WGMMA_FENCE_REGISTERS, WGMMA_ISSUES, WGMMA_WAIT_GROUP, is_call_to,
                          lookup)

# The SMs of the GPU the emulator pretends to be: few enough that each block of a persistent
# kernel runs several tiles of a small test problem (the ring's rounds carry over tiles), and
# that a small grid has several waves (tc::launch_wave_parity).
EMULATED_SMS = 2

WARP = 32
_LANE = np.arange(WARP)
_G, _T = _LANE // 4, _LANE % 4


def _table(frag):
    """(rows, cols): [32, locals] positions of every lane's fragment elements."""
    n = frag.locals_per_thread
    pos = np.array([[[int(x.value) for x in frag.logical_of(lane, i)[:2]] for i in range(n)]
                    for lane in range(WARP)], dtype=np.int64)
    return pos[..., 0], pos[..., 1]


_A_POS = _table(mma_a_fragment("float16"))
_B_POS = _table(mma_b_fragment("float16"))
_A_POS_TF32 = _table(mma_a_fragment("tfloat32"))
_B_POS_TF32 = _table(mma_b_fragment("tfloat32"))
_C_POS = _table(mma_c_fragment())


# --- helpers ---------------------------------------------------------------------------
def _pred_lanes(m, pred):
    """The executing lanes narrowed to those whose predicate holds."""
    p = np.broadcast_to(np.asarray(pred, dtype=bool), (m.T,))
    return m.lanes[p[m.lanes]]


def _read_regs(m, ptr: Pointer, count: int, dtype) -> np.ndarray:
    """count elements of dtype at ptr in every thread's registers: [threads, count]."""
    nbytes = count * np.dtype(dtype).itemsize
    raw = m.mem.read_bytes(ptr, nbytes, m.tx, "register read", m.span)
    return raw.view(dtype).reshape(m.T, count)


def _write_regs(m, ptr: Pointer, values: np.ndarray, lanes):
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(m.T, -1)
    m.mem.write_bytes(ptr, raw, lanes, "register write", m.span)


# --- barriers and cp.async -----------------------------------------------------------------
def syncthreads(m):
    m.barrier()


def cp_async(m, nbytes, dst: Pointer, src: Pointer, pred):
    lanes = m.lanes
    reading = _pred_lanes(m, pred)
    data = m.mem.read_bytes(src, nbytes, reading, "cp.async source", m.span)
    m.copies.issue(dst, data, lanes, nbytes)


# --- vector loads and stores ---------------------------------------------------------------
def load(m, bits, ptr: Pointer, pred=True):
    nbytes = bits // 8
    lanes = _pred_lanes(m, pred)
    raw = m.mem.read_bytes(ptr, nbytes, lanes, f"ld_{bits}", m.span)
    if nbytes == 2:
        return raw.view(np.uint16).reshape(m.T)
    if nbytes == 4:
        return raw.view(np.uint32).reshape(m.T)
    return Bits(raw)


def store(m, bits, ptr: Pointer, value, pred=True):
    nbytes = bits // 8
    lanes = _pred_lanes(m, pred)
    m.mem.write_bytes(ptr, as_bytes(value, m.T, nbytes), lanes, f"st_{bits}", m.span)


def atomic_pair(m, ptr: Pointer, pair):
    """tc::atomic_add_x2: p[0] += low half of the 32-bit pair, p[1] += its high half (one
    f16x2 / bf16x2 atomic on the GPU, so p must be 4-byte aligned)."""
    m.mem.byte_range(ptr, 4, m.lanes, "atomic_add_x2", m.span)   # reports misalignment
    halves = np.broadcast_to(np.asarray(pair).astype(np.uint32), (m.T,))
    elem = ptr.buffer.dtype.numpy
    for k in range(2):
        value = ((halves >> (16 * k)) & 0xFFFF).astype(np.uint16).view(elem)
        atomic(m, "add", Pointer(ptr.buffer, np.asarray(ptr.elem) + k, ptr.ok), value)


def atomic_float_pair(m, ptr: Pointer, a, b):
    """tc::atomic_add_v2: p[0] += a, p[1] += b (one red.global.add.v2.f32 on sm_90, so p
    must be 8-byte aligned)."""
    m.mem.byte_range(ptr, 8, m.lanes, "atomic_add_v2", m.span)   # reports misalignment
    for k, value in enumerate((a, b)):
        atomic(m, "add", Pointer(ptr.buffer, np.asarray(ptr.elem) + k, ptr.ok), value)


# --- warp-level ------------------------------------------------------------------------------
def ldmatrix(m, num: int, trans: bool, regs: Pointer, row: Pointer):
    whole_warps(m, f"ldmatrix_x{num}")
    lane = m.tx % WARP
    readers = m.lanes[lane[m.lanes] < 8 * num]
    rows = m.mem.read_bytes(row, 16, readers, "ldmatrix", m.span)
    W = m.T // WARP
    mats = rows.view(np.uint16).reshape(W, WARP, 8)[:, :8 * num].reshape(W, num, 8, 8)
    if trans:
        lo, hi = mats[:, :, 2 * _T, _G], mats[:, :, 2 * _T + 1, _G]
    else:
        lo, hi = mats[:, :, _G, 2 * _T], mats[:, :, _G, 2 * _T + 1]
    words = lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)      # [W, num, 32]
    _write_regs(m, regs, words.transpose(0, 2, 1).reshape(m.T, num), m.lanes)


def mma_m16n8k16(m, in_dtype, d: Pointer, a: Pointer, b: Pointer, c: Pointer,
                 acc=np.float32):
    """D = A B + C of each warp; C and D hold four `acc` elements per thread (float32, or
    float16 for the half-accumulating instruction, rounded once at the end)."""
    whole_warps(m, "mma.sync")
    W = m.T // WARP
    elem = dt.dtype(in_dtype).numpy
    av = _read_regs(m, a, 4, np.uint32).view(np.uint16).view(elem).reshape(W, WARP, 8)
    bv = _read_regs(m, b, 2, np.uint32).view(np.uint16).view(elem).reshape(W, WARP, 4)
    cv = _read_regs(m, c, 4, acc).astype(np.float32).reshape(W, WARP, 4)
    A = np.zeros((W, 16, 16), np.float32)
    B = np.zeros((W, 16, 8), np.float32)
    C = np.zeros((W, 16, 8), np.float32)
    A[:, _A_POS[0], _A_POS[1]] = av.astype(np.float32)
    B[:, _B_POS[0], _B_POS[1]] = bv.astype(np.float32)
    C[:, _C_POS[0], _C_POS[1]] = cv
    with np.errstate(all="ignore"):
        D = (np.matmul(A.astype(np.float64), B.astype(np.float64)) + C).astype(acc)
    _write_regs(m, d, D[:, _C_POS[0], _C_POS[1]].reshape(m.T, 4), m.lanes)


def tf32_bits(bits) -> np.ndarray:
    """cvt.rna.tf32.f32 of floats given as their bits: the 13 low mantissa bits rounded off,
    to nearest with ties away from zero (NaN and infinity left as they are)."""
    bits = np.asarray(bits).astype(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    return np.where(finite, (bits + np.uint32(0x1000)) & TF32_BITS, bits)


def mma_m16n8k8_tf32(m, d: Pointer, a: Pointer, b: Pointer, c: Pointer):
    """D = A B + C of each warp on tf32 operands (A 16x8, B 8x8; the tensor cores read the
    upper 19 bits of each register), float32 C and D."""
    whole_warps(m, "mma.sync")
    W = m.T // WARP
    av = (_read_regs(m, a, 4, np.uint32) & TF32_BITS).view(np.float32).reshape(W, WARP, 4)
    bv = (_read_regs(m, b, 2, np.uint32) & TF32_BITS).view(np.float32).reshape(W, WARP, 2)
    cv = _read_regs(m, c, 4, np.float32).reshape(W, WARP, 4)
    A = np.zeros((W, 16, 8), np.float64)
    B = np.zeros((W, 8, 8), np.float64)
    C = np.zeros((W, 16, 8), np.float64)
    A[:, _A_POS_TF32[0], _A_POS_TF32[1]] = av
    B[:, _B_POS_TF32[0], _B_POS_TF32[1]] = bv
    C[:, _C_POS[0], _C_POS[1]] = cv
    with np.errstate(all="ignore"):
        D = (np.matmul(A, B) + C).astype(np.float32)
    _write_regs(m, d, D[:, _C_POS[0], _C_POS[1]].reshape(m.T, 4), m.lanes)


# --- packing and atomics ---------------------------------------------------------------------
def pack(m, elem_dtype, lo, hi):
    elem = dt.dtype(elem_dtype).numpy
    lo_bits = np.asarray(lo).astype(np.float32).astype(elem).view(np.uint16)
    hi_bits = np.asarray(hi).astype(np.float32).astype(elem).view(np.uint16)
    return lo_bits.astype(np.uint32) | (hi_bits.astype(np.uint32) << 16)


_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum}


def atomic(m, kind, ptr: Pointer, value):
    from ....ir.buffer import is_shared
    b = ptr.buffer
    lanes, first = m.mem.byte_range(ptr, b.dtype.bits // 8, m.lanes, f"atomic_{kind}", m.span)
    es = b.dtype.bits // 8
    value = np.broadcast_to(np.asarray(value).astype(b.dtype.numpy), (m.T,))[lanes]
    if is_shared(b.scope):
        base = m.mem.offsets[id(b)]
        view, idx = m.mem.shared_view(b), (first - base) // es
        m.tracker.written[first[:, None] + np.arange(es)] = True
    else:
        view, idx = m.mem.global_array(b).reshape(-1), first // es
    old = view[idx].copy()
    _ATOMIC[kind].at(view, idx, value)
    out = np.zeros(m.T, view.dtype)
    out[lanes] = old
    return out


# --- dispatch ----------------------------------------------------------------------------------
_VECTOR = re.compile(r"^(ld|st)_(global|shared|regs)_(16|32|64|128)(_pred)?$")
_CP_ASYNC = re.compile(r"^cp_async_(cg|ca)_(16|8|4)$")
# mma.sync by its types field: (input dtype, accumulator dtype)
_MMA = {"f16_f32": ("float16", np.float32), "bf16_f32": ("bfloat16", np.float32),
        "f16_f16": ("float16", np.float16)}
# Intrinsics of one name, by table entry: f(m, *args).
_FIXED = {
    SYNCTHREADS: syncthreads,
    CHECKED_INDEX: checked_index,
    CP_ASYNC_COMMIT: lambda m: m.copies.commit(m.lanes),
    CP_ASYNC_WAIT_ALL: lambda m: m.copies.wait(m.lanes, None),
    SHFL_XOR: shfl_xor,
    SYNCWARP: syncwarp,
    PACK_HALF2: lambda m, lo, hi: pack(m, "float16", lo, hi),
    PACK_BF162: lambda m, lo, hi: pack(m, "bfloat16", lo, hi),
    ATOMIC_ADD_X2: atomic_pair,
    ATOMIC_ADD_V2: atomic_float_pair,
    MMA_TF32: mma_m16n8k8_tf32,
    TO_TF32: lambda m, x: tf32_bits(np.asarray(x, np.float32).view(np.uint32)),
    TF32_OF_BITS: lambda m, bits: tf32_bits(bits),
}


# --- sm_90a ---------------------------------------------------------------------------------
_TEMPLATE = re.compile(r"^(\w+)<(\d+)>$")


def _must_pass(m, wait, what: str):
    if wait is not None:
        raise TileError(f"internal: {what} would block outside the emulator's agents", m.span)


def _sm90(name: str, args: list):
    """f(m) running tc::<name>(*args) of the sm_90a functions, or None for any other name."""
    entry = lookup(NAMESPACE + name)
    if entry in WGMMA_ISSUES:
        return lambda m: m.hopper.issue(name, args)
    if entry in (TMA_LOAD, TMA_STORE, TMA_STORE_ADD):
        rank = int(entry.pattern.fullmatch(NAMESPACE + name)["rank"])
    if entry is TMA_LOAD:
        return lambda m: tma_load(m, rank, args[0], args[1], args[2], args[3:])
    if entry is TMA_LOAD_IM2COL:
        return lambda m: tma_load_im2col(m, args[0], args[1], args[2], args[3:])
    if entry in (TMA_STORE, TMA_STORE_ADD):
        adds = entry is TMA_STORE_ADD
        return lambda m: m.bulk_stores.store(rank, args[0], args[1], args[2:], adds=adds)
    if entry is TMA_STORE_COMMIT:
        return lambda m: m.bulk_stores.commit()
    if entry is STMATRIX_X4 and len(args) == 5:
        return lambda m: stmatrix_x4(m, args[0], args[1:])
    hit = _TEMPLATE.match(name)
    base, n = (hit.group(1), int(hit.group(2))) if hit else (name, None)
    if entry is WGMMA_WAIT_GROUP:
        return lambda m: m.hopper.wait(n)
    if entry is TMA_STORE_WAIT or base == "tma_store_wait_all":
        return lambda m: m.bulk_stores.wait(n)
    if entry in (SETMAXNREG_INC, SETMAXNREG_DEC):
        def setmaxnreg(m):
            m.hopper.warpgroups(name)
            if not (24 <= n <= 256 and n % 8 == 0):
                raise TileError(f"{name}: the register count must be 24..256, a multiple of 8",
                                m.span)
        return setmaxnreg
    if entry in (WGMMA_FENCE_REGISTERS, FENCE_BARRIER_INIT) or \
            base in ("wgmma_fence_operand", "prefetch_tma_descriptor"):
        return lambda m: None     # compiler and cache hints: nothing to emulate
    fn = _SM90.get(entry) or _UNLISTED.get(name)
    return None if fn is None else lambda m: fn(m, m.barriers, m.hopper, *args)


def _collective(check, what):
    """A collective with nothing to emulate beyond who executes it."""
    def run(m, b, h):
        check(m, h, what)
    return run


def _advance(m, b, h, desc, nbytes):
    out = np.asarray(desc).astype(np.uint64) + (np.asarray(nbytes).astype(np.uint64) >>
                                                  np.uint64(4))
    for old, new in zip(np.broadcast_to(desc, (m.T,))[m.lanes], np.broadcast_to(out, (m.T,))[
            m.lanes]):
        if int(old) in h.owners:
            h.owners[int(new)] = h.owners[int(old)]
    return out


def _prefetch_l2(m, b, h, ptr, nbytes):
    """cp.async.bulk.prefetch.L2 changes no memory; its range must lie inside one global tensor
    and start on 16 bytes, or the hardware faults."""
    if ptr.buffer.scope != GLOBAL or int(nbytes) % 16:
        raise TileError(f"internal: L2 prefetch of {ptr.buffer.name}: a global range of a "
                        f"multiple of 16 bytes expected, got {int(nbytes)} bytes", m.span)
    m.mem.byte_range(ptr, int(nbytes), m.lanes, "L2 prefetch", m.span, align=16)


def _try_wait(m, b, h, ptr, parity):
    ok, found = b.passed(ptr, parity)
    b.observe(found, ok)
    return ok


# By table entry: f(m, barriers, hopper, *args).
_SM90 = {
    MAKE_SMEM_DESC: lambda m, b, h, *a: make_smem_desc(m, *a),
    WGMMA_FENCE: _collective(lambda m, h, what: h.warpgroups(what), "wgmma_fence"),
    WGMMA_COMMIT_GROUP: lambda m, b, h: h.commit(),
    IS_PRODUCER_THREAD: lambda m, b, h, n: m.tx >= np.asarray(n),
    IS_PRODUCER_LEADER: lambda m, b, h, n: m.tx == np.asarray(n),
    IS_BLOCK_LEADER: lambda m, b, h: m.tx == 0,
    PREFETCH_L2: _prefetch_l2,
    WARPGROUP: lambda m, b, h: m.tx // 128,
    # Waves of EMULATED_SMS blocks, so a small grid has odd waves too.
    LAUNCH_WAVE_PARITY: lambda m, b, h: np.int64(m.tiles.index // EMULATED_SMS % 2),
    BARRIER_ALL: lambda m, b, h: syncthreads(m),
    FENCE_PROXY_ASYNC_SHARED: lambda m, b, h: b.fence_proxy(m.lanes),
    MBARRIER_INIT: lambda m, b, h, ptr, count: b.init(ptr, count),
    MBARRIER_ARRIVE_WARP: lambda m, b, h, ptr: b.arrive(ptr, per_warp=True),
    MBARRIER_ARRIVE_EXPECT_TX: lambda m, b, h, ptr, tx: b.arrive(ptr, tx=tx),
    MBARRIER_ARRIVE: lambda m, b, h, ptr: b.arrive(ptr),
    # The copies land (an order the hardware may take), then the arrival they trigger.
    CP_ASYNC_ARRIVE_NOINC: lambda m, b, h, ptr: (m.copies.wait(m.lanes, None), b.arrive(ptr)),
    MBARRIER_EXPECT_TX: lambda m, b, h, ptr, tx: b.expect_tx(ptr, tx),
    NAMED_BARRIER_ARRIVE: lambda m, b, h, i, n: b.named_arrive(i, n, wait=False),
    NAMED_BARRIER_SYNC: lambda m, b, h, i, n: _must_pass(m, b.named_arrive(i, n),
                                                         "named_barrier_sync"),
    MBARRIER_WAIT_PARITY: lambda m, b, h, ptr, p: _must_pass(m, b.wait_request(ptr, p),
                                                             "mbarrier_wait_parity"),
}
# Header functions the compiler does not write today (not in the table), for hand-built IR.
_UNLISTED = {
    "smem_desc_advance": _advance,
    "mbarrier_try_wait_parity": _try_wait,
}


def resolve(name: str, args: list):
    """f(m) running tc::<name>(*args) for the executing lanes, or None when the emulator has no
    implementation of it."""
    if is_call_to(NAMESPACE + name, L2_POLICY):
        return lambda m: np.uint64(0)     # an opaque policy value; nothing reads it here
    if name.endswith(HINT_SUFFIX):     # no cache modelled: a hinted copy runs as the plain one
        name, args = unhinted(name, list(args))
    entry = lookup(NAMESPACE + name)
    fields = entry.pattern.fullmatch(NAMESPACE + name).groupdict() if entry else {}
    fixed = _FIXED.get(entry)
    if fixed is not None:
        return lambda m: fixed(m, *args)
    if entry is CP_ASYNC_WAIT:
        return lambda m: m.copies.wait(m.lanes, int(fields["n"]))
    hit = _CP_ASYNC.match(name)
    if hit:
        return lambda m: cp_async(m, int(hit.group(2)), *args)
    hit = _VECTOR.match(name)
    if hit:
        op, bits = hit.group(1), int(hit.group(3))
        return lambda m: load(m, bits, *args) if op == "ld" else store(m, bits, *args)
    if entry in (LDMATRIX, LDMATRIX_TRANS):
        return lambda m: ldmatrix(m, int(fields["count"]), entry is LDMATRIX_TRANS, *args)
    if entry is MMA and fields["types"] in _MMA:
        in_dtype, acc = _MMA[fields["types"]]
        return lambda m: mma_m16n8k16(m, in_dtype, *args, acc=acc)
    if entry is ATOMIC:
        return lambda m: atomic(m, fields["kind"], *args)
    if entry is SHFL_GROUP:
        return lambda m: shfl_group(m, fields["shuffle"], int(fields["width"]), *args)
    if entry is WARP_REDUCE:
        return lambda m: warp_reduce(m, fields["reduction"], *args)
    return _sm90(name, args)


def call(m, name: str, args: list):
    """Run tc::<name>(*args) for the executing lanes."""
    run = resolve(name, args)
    if run is None:
        raise TileError(f"the emulator has no implementation of tc::{name}", m.span)
    return run(m)
