"""sm_90a tensor cores and bulk copies: wgmma through shared-memory matrix descriptors, and TMA
tensor loads (codegen/include/tilecraft/wgmma.h, tma.h).

Descriptors are taken apart the way the hardware reads them (PTX ISA "Matrix Descriptor
Format"): start address, LBO and SBO in 16-byte units, the swizzle mode in bits 62-63. An
operand element's address is the start plus its offset in the canonical layout the transpose
flag selects (K-major or MN-major), and the swizzle then XORs address bits 7.. into the 16-byte
chunk bits 4.. of that absolute address, so a wrong start, stride, mode or flag reads the wrong
bytes and gives wrong numbers, as on the GPU. The arena's byte 0 stands for the shared window's
first byte, which the CUDA backend aligns to 1024 bytes.

A wgmma is issued asynchronously: its operands are read and its accumulator written when a
wgmma_wait_group retires its group (the latest moment the hardware may do it); a write into
the operand bytes before then (operand_reads.py) and reading the accumulator before the wait are
reported. TMA boxes are gathered from the global tensor at issue (zero outside it), laid out
row-major with the map's swizzle and counted on the mbarrier; they land in shared memory when
the mbarrier phase they were counted in completes (barriers.py).
"""
from __future__ import annotations

import re

import numpy as np

from ....errors import TileError
from ....ir import dtypes as dt
from ....ir.annotations import WARPGROUP_THREADS
from ....ir.buffer import is_shared
from .checker import Site
from .memory import Pointer
from .operand_reads import OperandReads

WARPGROUP = WARPGROUP_THREADS
SWIZZLE_BITS = {0: 0, 1: 7, 2: 3, 3: 1}       # descriptor mode -> mask of address bits 7..
SWIZZLE_WIDTH = {1: 128, 2: 64, 3: 32}         # bytes in one swizzle-atom row
TMA_MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}


def swizzle(addr, mode: int):
    """The byte address a swizzled access really touches (Swizzle<B, 4, 3> on the address)."""
    return addr ^ (((addr >> 7) & SWIZZLE_BITS[mode]) << 4)


def shared_address(m, ptr: Pointer, lanes):
    """Arena byte address of a shared-memory pointer in each of `lanes`."""
    b = ptr.buffer
    if not is_shared(b.scope):
        raise TileError(f"{b.name} is not in shared memory (scope {b.scope})", m.span)
    elem = np.broadcast_to(np.asarray(ptr.elem, np.int64), (m.T,))[lanes]
    return m.mem.offsets[id(b)] + elem * (b.dtype.bits // 8)


def make_smem_desc(m, ptr: Pointer, mode, lbo, sbo):
    addr = shared_address(m, ptr, np.arange(m.T)).astype(np.uint64)
    field = np.uint64(0x3FFFF)

    def enc(x):
        return (np.asarray(x).astype(np.uint64) & field) >> np.uint64(4)
    desc = enc(addr) | (enc(lbo) << np.uint64(16)) | (enc(sbo) << np.uint64(32)) | \
        ((np.asarray(mode).astype(np.uint64) & np.uint64(3)) << np.uint64(62))
    for value in np.unique(desc[m.lanes]):
        m.hopper.owners[int(value)] = ptr.buffer
    return desc


def decode(desc: int):
    """(start, lbo, sbo, base offset, swizzle mode) of a 64-bit matrix descriptor."""
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4,
            (desc >> 49) & 7, (desc >> 62) & 3)


def canonical_offsets(extent: int, k_major: bool, mode: int, lbo: int, sbo: int, es: int,
                      depth: int = 16):
    """[extent, depth] byte offsets of the (mn, k) elements of one operand (depth k values: 16,
    or 32 for fp8; 32 bytes either way) in the canonical layout (PTX ISA "Shared Memory Matrix
    Layout"), before the swizzle. T = 16 / es elements make a 16-byte chunk; W is the
    swizzle-atom row in bytes."""
    mn = np.arange(extent)[:, None]
    k = np.arange(depth)[None, :]
    t = 16 // es
    if k_major:
        if mode == 0:   # core matrices of 8 rows x 16 bytes: K chunks LBO apart, row groups SBO
            return (mn % 8) * 16 + (mn // 8) * sbo + (k % t) * es + (k // t) * lbo
        w = SWIZZLE_WIDTH[mode]
        return (mn % 8) * w + (mn // 8) * sbo + k * es
    if mode == 0:       # MN-major interleave: T-element chunks along MN SBO apart, K groups LBO
        return (mn % t) * es + (mn // t) * sbo + (k % 8) * 16 + (k // 8) * lbo
    w = SWIZZLE_WIDTH[mode]
    per_row = w // es
    return (mn % per_row) * es + (mn // per_row) * lbo + (k % 8) * w + (k // 8) * sbo


def _accumulator_table(n: int):
    """(rows, cols) [128, n/2] of the wgmma m64nNk16 accumulator fragment (wgmma.h)."""
    t = np.arange(WARPGROUP)[:, None]
    i = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    rows = 16 * w + 8 * ((i // 2) % 2) + lane // 4
    cols = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return rows, np.broadcast_to(cols, rows.shape)


def _a_register_table():
    """(rows, cols) [128, 8] of the _rs form's A halves: word j's low then high half."""
    t = np.arange(WARPGROUP)[:, None]
    h = np.arange(8)[None, :]
    w, g, q = t // 32, (t % 32) // 4, t % 4
    word, hi = h // 2, h % 2
    rows = 16 * w + g + 8 * (word % 2)
    cols = 2 * q + hi + 8 * (word // 2)
    return rows, cols


_A_REGS = _a_register_table()
_WGMMA = re.compile(r"^wgmma_m64n(\d+)k(8|16|32)_f32_(f16|bf16|tf32|e4m3_e4m3|e4m3_e5m2|"
                    r"e5m2_e4m3|e5m2_e5m2)(_rs)?(?:<([^>]*)>)?$")
_DTYPES = {"f16": "float16", "bf16": "bfloat16", "e4m3": "float8_e4m3", "e5m2": "float8_e5m2",
           "tf32": "tfloat32"}
_ELEMENT_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}
TF32_BITS = np.uint32(0xFFFFE000)    # what the tensor cores read of a tf32 word: the upper 19


def tma_box(m, tmap, rank: int, what: str, tensor_rank: int | None = None):
    """(the global array, the box, the swizzle mode) of a TMA copy through tensor map tmap:
    a box of `rank` dimensions over a tensor of `tensor_rank` (the same but in im2col mode)."""
    arr = m.mem.global_array(tmap.buffer)
    box = tuple(int(b) for b in tmap.box)
    if len(box) != rank or arr.ndim != (tensor_rank or rank):
        raise TileError(f"{what}_{rank}d with the tensor map of {tmap.buffer.name} "
                        f"(box {box}, tensor rank {arr.ndim})", m.span)
    mode = TMA_MODES[tmap.swizzle]
    inner = box[-1] * arr.dtype.itemsize
    if (mode and inner != SWIZZLE_WIDTH[mode]) or (not mode and inner % 16):
        raise TileError(f"{what}: a box whose rows are {inner} bytes with swizzle "
                        f"{tmap.swizzle} is not modeled by the emulator", m.span)
    return arr, box, mode


class Hopper:
    """One block's wgmma groups in flight and the descriptor -> buffer table."""

    def __init__(self, m):
        self.m = m
        self.owners: dict = {}         # descriptor value -> shared buffer it was made from
        self.open: dict = {}           # warpgroup -> wgmma issued since its last commit
        self.groups: dict = {}         # warpgroup -> committed groups, oldest first
        self.reads = OperandReads(m)   # shared bytes read by wgmma not yet retired
        m.tracker.wgmma_reads = self.reads
        self.busy = m.wgmma_busy       # id(register buffer) -> [uses per warpgroup, site,
        #                                 whether the wgmma writes it (else only reads it)]
        self.tables: dict = {}

    # --- warpgroup bookkeeping ------------------------------------------------------------
    def warpgroups(self, what: str):
        """Warpgroups whose 128 threads all execute; a partial one is reported."""
        m = self.m
        counts = np.bincount(m.lanes // WARPGROUP, minlength=-(-m.T // WARPGROUP))
        partial = np.nonzero((counts > 0) & (counts < WARPGROUP))[0]
        if partial.size:
            g = int(partial[0])
            site = Site(what, "", m.span)
            m.reports.add("warp-divergence", f"{what} is warpgroup-collective but only "
                          f"{counts[g]} of the 128 threads of warpgroup {g} execute it at "
                          f"{site.where()}", None, (g * WARPGROUP,), (site,))
        return [int(g) for g in np.nonzero(counts == WARPGROUP)[0]]

    def _uniform(self, value, g: int, what: str):
        m = self.m
        v = np.broadcast_to(np.asarray(value), (m.T,))[g * WARPGROUP:(g + 1) * WARPGROUP]
        if (v != v[0]).any():
            site = Site(what, "", m.span)
            t = g * WARPGROUP + int(np.argmax(v != v[0]))
            m.reports.add("warp-divergence", f"{what}: the threads of warpgroup {g} pass "
                          f"different values (thread {t} differs from thread "
                          f"{g * WARPGROUP}) at {site.where()}", None, (g * WARPGROUP, t),
                          (site,))
        return v[0]

    # --- wgmma ------------------------------------------------------------------------------
    def issue(self, name: str, args):
        m = self.m
        hit = _WGMMA.match(name)
        if hit is None:
            raise TileError(f"the emulator does not model {name}", m.span)
        n, depth, rs = int(hit.group(1)), int(hit.group(2)), bool(hit.group(4))
        types = [_DTYPES[t] for t in hit.group(3).split("_")]
        dtype_a, dtype_b = types[0], types[-1]
        flags = [int(x) for x in hit.group(5).split(",")] if hit.group(5) else []
        if depth != 16:          # fp8 (k32), tf32 (k8): K-major operands, no immediates
            trans_a, trans_b, scales = 0, 0, flags
        elif rs:
            trans_a, (trans_b, *scales) = 0, flags
        else:
            trans_a, trans_b, *scales = flags
        scale_ab = (scales + [1, 1])[:2]
        acc, a, desc_b, scale_d = args
        for g in self.warpgroups("wgmma"):
            lanes = np.arange(g * WARPGROUP, (g + 1) * WARPGROUP)
            if rs:
                regs = m.mem.registers(a.buffer)
                first = int(np.broadcast_to(np.asarray(a.elem), (m.T,))[lanes[0]])
                src = ("regs", regs[lanes, first:first + 4].astype(np.uint32).copy(), a.buffer)
            else:
                src = ("desc", int(self._uniform(a, g, "wgmma descriptor A")), None)
            op = dict(g=g, n=n, depth=depth, dtype=dtype_a, dtype_b=dtype_b, a=src,
                      trans_a=trans_a, trans_b=trans_b,
                      scale_ab=scale_ab, b=int(self._uniform(desc_b, g, "wgmma descriptor B")),
                      scale_d=int(self._uniform(scale_d, g, "wgmma scale-d")), acc=acc,
                      span=m.span)
            self.open.setdefault(g, []).append(op)
            self._mark_operands(op, n)
            self._mark(acc.buffer, g, op["span"], +1)
            if rs:
                self._mark(a.buffer, g, op["span"], +1, written=False)

    def _mark_operands(self, op, n: int) -> None:
        """The shared bytes the wgmma reads are busy until it retires (operand_reads.py)."""
        parts = [] if op["a"][0] == "regs" else [
            self._operand_bytes(op["a"][1], 64, not op["trans_a"], op, "A", op["dtype"])]
        parts.append(self._operand_bytes(op["b"], n, not op["trans_b"], op, "B", op["dtype_b"]))
        t = self.m.tracker
        sid = t.site("wgmma", parts[0][1], op["span"])
        op["reads"] = self.reads.issue(np.concatenate([raw for raw, _ in parts]), sid, op["g"])

    def commit(self):
        for g in self.warpgroups("wgmma_commit_group"):
            self.groups.setdefault(g, []).append(self.open.pop(g, []))

    def wait(self, newest: int):
        for g in self.warpgroups(f"wgmma_wait_group<{newest}>"):
            groups = self.groups.get(g, [])
            while len(groups) > newest:
                for op in groups.pop(0):
                    self._run(op)

    def finish(self):
        """End of the block: wgmma never waited for is reported, then retired."""
        for g in sorted(set(self.open) | set(self.groups)):
            left = [op for group in self.groups.get(g, []) for op in group] + \
                self.open.get(g, [])
            if left:
                site = Site("wgmma", left[0]["acc"].buffer.name, left[0]["span"])
                self.m.reports.add("async-not-waited", f"{site.buffer}: warpgroup {g} issued "
                                   f"a wgmma at {site.where()} that no wgmma_wait_group "
                                   "retires before the kernel ends", site.buffer,
                                   (g * WARPGROUP,), (site,))
            for op in left:
                self._run(op)
        self.open, self.groups = {}, {}

    def _mark(self, buffer, g: int, span, step: int, written: bool = True):
        entry = self.busy.get(id(buffer))
        if entry is None:
            entry = self.busy[id(buffer)] = [np.zeros(-(-self.m.T // WARPGROUP), np.int64),
                                             Site("wgmma", buffer.name, span), written]
        entry[0][g] += step
        if not entry[0].any():
            del self.busy[id(buffer)]

    def _run(self, op):
        m = self.m
        g, n = op["g"], op["n"]
        lanes = np.arange(g * WARPGROUP, (g + 1) * WARPGROUP)
        saved = m.span
        m.span = op["span"]
        try:
            if op["a"][0] == "regs":
                words = op["a"][1]
                halves = words.view(np.uint16).reshape(WARPGROUP, 8)
                A = np.zeros((64, 16), np.float64)
                A[_A_REGS[0], _A_REGS[1]] = halves.view(dt.dtype(op["dtype"]).numpy)
                self._mark(op["a"][2], g, op["span"], -1, written=False)
            else:
                A = self._operand(op["a"][1], 64, not op["trans_a"], op, "A", op["dtype"])
            B = self._operand(op["b"], n, not op["trans_b"], op, "B", op["dtype_b"])
            A, B = A * op["scale_ab"][0], B * op["scale_ab"][1]
            acc = op["acc"]
            regs = m.mem.registers(acc.buffer)
            first = int(np.broadcast_to(np.asarray(acc.elem), (m.T,))[lanes[0]])
            if first < 0 or first + n // 2 > regs.shape[1]:
                raise TileError(f"wgmma: the accumulator {acc.buffer.name}[{first}:"
                                f"{first + n // 2}] is outside the register array", m.span)
            rows, cols = self.tables.get(n) or self.tables.setdefault(n, _accumulator_table(n))
            D = A @ B.T
            if op["scale_d"]:
                C = np.zeros((64, n), np.float64)
                C[rows, cols] = regs[lanes, first:first + n // 2]
                D = D + C
            with np.errstate(all="ignore"):
                regs[lanes, first:first + n // 2] = D[rows, cols].astype(regs.dtype)
            self._mark(acc.buffer, g, op["span"], -1)
            self.reads.release(op["reads"])
        finally:
            m.span = saved

    def _operand(self, desc: int, extent: int, k_major: bool, op, which: str, dtype: str):
        """[extent, depth] float64 values of operand A (extent 64) or B (extent N) of element
        type dtype, read from shared memory through the descriptor now."""
        m = self.m
        addr, inside, es, name = self._operand_addresses(desc, extent, k_major, op, which,
                                                         dtype, report=True)
        t = m.tracker
        reader = op["g"] * WARPGROUP
        raw = (addr[..., None] + np.arange(es)).reshape(-1)
        sid = t.site(f"wgmma {which}", name, op["span"])
        t.read(raw, np.full(raw.size, reader, np.int32), sid)
        m.barriers.proxy_check(raw, reader, sid)
        words = m.mem.arena.view(_ELEMENT_BITS[es])[addr // es]
        if dtype == "tfloat32":   # the tensor cores read a tf32 word's upper 19 bits
            words = words & TF32_BITS
        vals = words.view(dt.dtype(dtype).numpy)
        return np.where(inside, vals.astype(np.float64), 0.0)

    def _operand_bytes(self, desc: int, extent: int, k_major: bool, op, which: str,
                       dtype: str):
        """(arena bytes an operand's descriptor reads, its buffer's name), no reports."""
        addr, _, es, name = self._operand_addresses(desc, extent, k_major, op, which, dtype)
        return (addr[..., None] + np.arange(es)).reshape(-1), name

    def _operand_addresses(self, desc: int, extent: int, k_major: bool, op, which: str,
                           dtype: str, report: bool = False):
        """(element byte addresses clipped to the buffer, which were inside, element size,
        buffer name) of an operand, reporting reads outside its buffer when `report`."""
        m = self.m
        start, lbo, sbo, base, mode = decode(desc)
        if base:
            raise TileError("wgmma: the emulator does not model a nonzero descriptor base "
                            "offset", m.span)
        es = dt.dtype(dtype).bits // 8
        addr = swizzle(start + canonical_offsets(extent, k_major, mode, lbo, sbo, es,
                                                 op["depth"]), mode)
        owner = self.owners.get(desc)
        name = owner.name if owner is not None else "shared"
        lo, hi = 0, m.mem.arena.size
        if owner is not None:
            lo = m.mem.offsets[id(owner)]
            hi = lo + int(np.prod([int(s) for s in owner.shape])) * es
        inside = (addr >= lo) & (addr + es <= hi)
        if not inside.all():
            if report:
                site = Site(f"wgmma {which}", name, op["span"])
                bad = addr[~inside].reshape(-1)[0]
                m.reports.add("out-of-bounds", f"{name}: the wgmma at {site.where()} reads "
                              f"operand {which} at shared byte {bad} through its descriptor "
                              f"(start {start}, LBO {lbo}, SBO {sbo}, mode {mode}), outside "
                              f"{name} (bytes {lo}..{hi})", name, (op["g"] * WARPGROUP,),
                              (site,))
            addr = np.where(inside, addr, lo)
        return addr, inside, es, name


__all__ = ["Hopper", "make_smem_desc", "decode", "swizzle", "canonical_offsets"]
