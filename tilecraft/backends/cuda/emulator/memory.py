"""The memory spaces of one emulated thread block.

- global: the kernel's numpy arguments (C-contiguous), addressed by element or by byte;
- shared: one byte array per block, the planned dynamic arena; each shared buffer is a typed
  view at its planned offset, so buffers that share bytes through reuse really alias;
- registers: every local array is a [threads, n] numpy array, one row per thread.

Accesses are vectorized over the threads that execute them (`lanes`: thread indices). Shared
accesses go through the checker (races, uninitialized bytes, cp.async in flight); any access
outside its buffer is reported and dropped (loads give zeros).
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from ....interp.machine import poison
from ....ir.buffer import GLOBAL, LOCAL, LOCAL_VAR, is_shared
from .checker import Site
from ....ir.annotations import SMEM_ARENA

ARENA_FILL = 0xFF  # never-written shared bytes read back as NaN (fp16 and fp32 alike)


class Bits:
    """A raw vector value (ld_*_64/128 results): [threads, nbytes] uint8."""

    def __init__(self, data: np.ndarray):
        self.data = data


class Pointer:
    """address_of(buffer[indices]): an element offset per thread into one buffer, with a flag
    per thread saying whether every index was inside its dimension."""

    def __init__(self, buffer, elem, ok):
        self.buffer = buffer
        self.elem = elem
        self.ok = ok


def as_bytes(value, count: int, nbytes: int) -> np.ndarray:
    """A register value (Bits, or scalars of any 1-8 byte type) as [count, nbytes] uint8."""
    if isinstance(value, Bits):
        return value.data
    arr = np.ascontiguousarray(np.broadcast_to(np.asarray(value), (count,)))
    raw = arr.view(np.uint8).reshape(count, arr.dtype.itemsize)
    if raw.shape[1] != nbytes:
        raise TileError(f"internal: a {arr.dtype} value cannot be stored as {nbytes} bytes")
    return raw


class BlockMemory:
    def __init__(self, func, globals_: dict, threads: int, smem_bytes: int, reports, tracker):
        self.func = func
        self.globals = globals_
        self.T = threads
        self.tx = np.arange(threads, dtype=np.int64)
        self.arena = np.full(smem_bytes, ARENA_FILL, np.uint8)
        self.offsets = func.attrs.get(SMEM_ARENA, {})
        self.regs: dict[int, np.ndarray] = {}
        self.reports = reports
        self.tracker = tracker

    # --- allocation ---------------------------------------------------------------
    def allocate(self, buffer, span, lanes=None):
        """lanes: the threads that reach the allocation (None: all); the others' registers of
        it keep their values (a warpgroup running ahead of another allocates again)."""
        if is_shared(buffer.scope):
            if id(buffer) not in self.offsets:
                raise TileError(f"internal: shared buffer {buffer.name} has no arena offset",
                                span)
            return
        if buffer.scope in (LOCAL, LOCAL_VAR):
            fresh = poison((self.T, _numel(buffer.shape)), buffer.dtype)
            old = self.regs.get(id(buffer))
            if lanes is not None and old is not None and old.shape == fresh.shape:
                old[lanes] = fresh[lanes]
            else:
                self.regs[id(buffer)] = fresh
            return
        if buffer.scope == GLOBAL and id(buffer) in self.globals:
            return   # a workspace (T.alloc_global): made for the launch (Emulator.run)
        raise TileError(f"the emulator cannot allocate {buffer.name} in scope {buffer.scope}",
                        span)

    # --- buffers ------------------------------------------------------------------
    def shared_view(self, buffer) -> np.ndarray:
        base = self.offsets[id(buffer)]
        n = _numel(buffer.shape) * buffer.dtype.bytes
        return self.arena[base:base + n].view(buffer.dtype.numpy)

    def global_array(self, buffer) -> np.ndarray:
        try:
            return self.globals[id(buffer)]
        except KeyError:
            raise TileError(f"buffer {buffer.name} is not a kernel argument", buffer.span) \
                from None

    def registers(self, buffer) -> np.ndarray:
        try:
            return self.regs[id(buffer)]
        except KeyError:
            raise TileError(f"register array {buffer.name} is used before it is allocated",
                            buffer.span) from None

    def shape_of(self, buffer) -> tuple:
        if buffer.scope == GLOBAL:
            return self.global_array(buffer).shape
        return tuple(int(s) for s in buffer.shape)

    def flat_index(self, buffer, idx):
        """(flat element index, per-thread all-dims-inside flag) of an index tuple."""
        shape = self.shape_of(buffer)
        flat, ok = 0, True
        for i, n in zip(idx, shape):
            i = np.asarray(i, dtype=np.int64)
            flat = flat * n + i
            ok = ok & (i >= 0) & (i < n)
        return flat, ok

    # --- element loads and stores (BufferLoad / BufferStore) --------------------------
    def load(self, buffer, idx, lanes, span):
        flat, ok = self.flat_index(buffer, idx)
        scope = buffer.scope
        if scope in (LOCAL, LOCAL_VAR):
            regs = self.registers(buffer)
            if np.ndim(flat) == 0:
                if not ok:
                    self._oob(buffer, "read", lanes[:1], span, flat)
                    return np.zeros((), regs.dtype)
                return regs[:, int(flat)]
            return self._gather(regs, buffer, flat, ok, lanes, span)
        flat_b = np.broadcast_to(flat, (self.T,))[lanes]
        ok_b = np.broadcast_to(ok, (self.T,))[lanes]
        if scope == GLOBAL:
            data = self.global_array(buffer).reshape(-1)
        else:
            data = self.shared_view(buffer)
        out = np.zeros(self.T, data.dtype)
        if not ok_b.all():
            self._oob(buffer, "read", lanes[~ok_b], span, flat_b[~ok_b])
            lanes, flat_b = lanes[ok_b], flat_b[ok_b]
        out[lanes] = data[flat_b]
        if is_shared(scope):
            es = buffer.dtype.bytes
            self._track(buffer, "read", flat_b * es, es, lanes, span)
        return out

    def store(self, buffer, idx, value, lanes, span):
        flat, ok = self.flat_index(buffer, idx)
        value = np.asarray(value)
        scope = buffer.scope
        if scope in (LOCAL, LOCAL_VAR) and np.ndim(flat) == 0:
            regs = self.registers(buffer)
            if not ok:
                self._oob(buffer, "write", lanes[:1], span, flat)
                return
            if lanes.size == self.T:
                regs[:, int(flat)] = value
            else:
                regs[lanes, int(flat)] = np.broadcast_to(value, (self.T,))[lanes]
            return
        flat_b = np.broadcast_to(flat, (self.T,))[lanes]
        ok_b = np.broadcast_to(ok, (self.T,))[lanes]
        val_b = np.broadcast_to(value, (self.T,))[lanes]
        if not ok_b.all():
            self._oob(buffer, "write", lanes[~ok_b], span, flat_b[~ok_b])
            lanes, flat_b, val_b = lanes[ok_b], flat_b[ok_b], val_b[ok_b]
        if scope in (LOCAL, LOCAL_VAR):
            self.registers(buffer)[lanes, flat_b] = val_b
        elif scope == GLOBAL:
            self.global_array(buffer).reshape(-1)[flat_b] = val_b
        else:
            es = buffer.dtype.bytes
            raw = as_bytes(val_b.astype(buffer.dtype.numpy), lanes.size, es)
            self._track(buffer, "write", flat_b * es, es, lanes, span, raw)
            self.shared_view(buffer)[flat_b] = val_b

    def _gather(self, regs, buffer, flat, ok, lanes, span):
        flat = np.broadcast_to(flat, (self.T,))
        ok = np.broadcast_to(ok, (self.T,))
        out = np.zeros(self.T, regs.dtype)
        good = lanes[ok[lanes]]
        if good.size != lanes.size:
            bad = lanes[~ok[lanes]]
            self._oob(buffer, "read", bad, span, flat[bad])
        out[good] = regs[good, flat[good]]
        return out

    # --- byte-addressed accesses (vector loads / stores, cp.async, ldmatrix) ------------
    def byte_range(self, ptr: Pointer, nbytes: int, lanes, op: str, span, align=None):
        """(lanes kept, [k] first byte of each access in its space) after bounds checks and
        the alignment check (to `align` bytes; unset, to the access's size)."""
        b = ptr.buffer
        es = b.dtype.bytes
        elem = np.broadcast_to(np.asarray(ptr.elem, np.int64), (self.T,))[lanes]
        ok = np.broadcast_to(ptr.ok, (self.T,))[lanes]
        if b.scope == GLOBAL:
            lo, hi = 0, self.global_array(b).nbytes
        elif is_shared(b.scope):
            lo = self.offsets[id(b)]
            hi = lo + _numel(b.shape) * es
        else:
            lo, hi = 0, self.registers(b).shape[1] * es
        first = lo + elem * es
        inside = ok & (first >= lo) & (first + nbytes <= hi)
        if not inside.all():
            self._oob(b, op, lanes[~inside], span, elem[~inside], nbytes)
            lanes, first = lanes[inside], first[inside]
        align = nbytes if align is None else align
        if align > 2 and b.scope != LOCAL and (first % align).any():
            bad = int(np.argmax(first % align != 0))
            self.reports.add("misaligned", f"{b.name}: thread {lanes[bad]} {op} of {nbytes} "
                             f"bytes at a misaligned address", b.name, (lanes[bad],),
                             (Site(op, b.name, span),))
        return lanes, first

    def read_bytes(self, ptr: Pointer, nbytes: int, lanes, op: str, span) -> np.ndarray:
        """[threads, nbytes] uint8, zeros for threads that do not read."""
        out = np.zeros((self.T, nbytes), np.uint8)
        lanes, first = self.byte_range(ptr, nbytes, lanes, op, span)
        addr = first[:, None] + np.arange(nbytes)
        b = ptr.buffer
        if b.scope == GLOBAL:
            out[lanes] = self.global_array(b).reshape(-1).view(np.uint8)[addr]
        elif is_shared(b.scope):
            self._track_bytes(b, op, addr, lanes, span)
            out[lanes] = self.arena[addr]
        else:
            out[lanes] = self.registers(b).view(np.uint8)[lanes[:, None], addr]
        return out

    def write_bytes(self, ptr: Pointer, data: np.ndarray, lanes, op: str, span):
        nbytes = data.shape[1]
        lanes, first = self.byte_range(ptr, nbytes, lanes, op, span)
        addr = first[:, None] + np.arange(nbytes)
        rows = data[lanes]
        b = ptr.buffer
        if b.scope == GLOBAL:
            self.global_array(b).reshape(-1).view(np.uint8)[addr] = rows
        elif is_shared(b.scope):
            self._track_bytes(b, op, addr, lanes, span, rows)
            self.arena[addr] = rows
        else:
            self.registers(b).view(np.uint8)[lanes[:, None], addr] = rows

    # --- checker plumbing -----------------------------------------------------------
    def _track(self, buffer, op, rel_bytes, es, lanes, span, data=None):
        addr = self.offsets[id(buffer)] + rel_bytes[:, None] + np.arange(es)
        self._track_bytes(buffer, op, addr, lanes, span, data)

    def _track_bytes(self, buffer, op, addr, lanes, span, data=None):
        """A read (data None) or a write of data ([lanes, bytes]) of shared bytes addr."""
        t = self.tracker
        sid = t.site(op, buffer.name, span)
        tid = np.repeat(lanes, addr.shape[1]).astype(np.int32)
        if data is None:
            t.read(addr.reshape(-1), tid, sid)
        else:
            t.write(addr.reshape(-1), tid, sid, data.reshape(-1), self.arena)

    def _oob(self, buffer, op, lanes, span, where, nbytes=None):
        lanes = np.atleast_1d(lanes)
        where = np.atleast_1d(np.broadcast_to(where, lanes.shape)) if lanes.size else where
        t = int(lanes[0]) if lanes.size else 0
        at = int(np.atleast_1d(where)[0]) if np.size(where) else 0
        size = f"{nbytes}-byte " if nbytes else ""
        self.reports.add(
            "out-of-bounds",
            f"{buffer.name}: thread {t} {size}{op} at element {at} is outside the buffer "
            f"(shape {self.shape_of(buffer)}, scope {buffer.scope}) at "
            f"{Site(op, buffer.name, span).where()}", buffer.name, (t,),
            (Site(op, buffer.name, span),))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
