"""TMA stores (shared -> global, codegen/include/tilecraft/tma.h), the stores that add, and
stmatrix.

A TMA store reads its box from shared memory through the async proxy and writes the global
tensor, dropping what falls outside it. The emulator moves the data when the store is issued,
and checks what the hardware leaves to the program:
- the tile must be published first: a read of bytes another thread wrote with no barrier in
  between is a race (the tracker), bytes written with ordinary stores need a fence.proxy.async
  by their writer (barriers.proxy_check);
- the store goes on reading until its issuing thread waits for its bulk group
  (cp.async.bulk.wait_group.read): a write into those bytes before that wait is reported, and so
  is a block that ends with a store not waited for. At the wait the bytes count as read by the
  issuing thread once more, so a write by a thread the wait is not ordered before (a barrier)
  is a race as well.
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from .checker import NONE, Site
from .hopper import shared_address, swizzle, tma_box

WARP = 32


class BulkStores:
    """One block's TMA stores: per thread the stores not yet committed and the committed bulk
    groups, oldest first, each a list of (shared bytes, site id)."""

    def __init__(self, m):
        self.m = m
        self.open: dict = {}
        self.groups: dict = {}
        self.reading = np.full(m.mem.arena.size, NONE, np.int32)   # issuing thread per byte
        self.reading_site = np.zeros(m.mem.arena.size, np.int32)

    def store(self, rank: int, tmap, src, coords, adds: bool = False):
        """One TMA store (adds: one that adds into global memory, tc::tma_store_add_*)."""
        m = self.m
        arr, box, mode = tma_box(m, tmap, rank, "tma_store")
        es = arr.dtype.itemsize
        t = m.tracker
        site = Site("tma store", src.buffer.name, m.span)
        sid = t.site(site.op, site.buffer, site.span)
        nbytes = int(np.prod(box)) * es
        lo = m.mem.offsets[id(src.buffer)]
        hi = lo + int(np.prod([int(s) for s in src.buffer.shape])) * (src.buffer.dtype.bits // 8)
        for lane in m.lanes:
            first = int(shared_address(m, src, np.array([lane]))[0])
            if first % 128 or first < lo or first + nbytes > hi:
                m.reports.add("out-of-bounds" if first % 128 == 0 else "misaligned",
                              f"{src.buffer.name}: the TMA store at {site.where()} reads "
                              f"{nbytes} bytes at shared byte {first} (the box must be 128-byte "
                              "aligned and inside the tile)", src.buffer.name, (int(lane),),
                              (site,))
                continue
            phys = swizzle(first + np.arange(nbytes), mode)
            t.read(phys, np.full(nbytes, lane, np.int32), sid)
            m.barriers.proxy_check(phys, int(lane), sid)
            data = m.mem.arena[phys].view(arr.dtype).reshape(box)
            starts = [int(np.broadcast_to(np.asarray(c), (m.T,))[lane]) for c in
                      reversed(coords)]
            dst, src_idx = [], []
            for d, (s, b) in enumerate(zip(starts, box)):
                keep = np.nonzero((s + np.arange(b) >= 0) & (s + np.arange(b) < arr.shape[d]))[0]
                dst.append(s + keep)
                src_idx.append(keep)
            if adds:   # each element added at the tensor's precision, as the hardware does
                arr[np.ix_(*dst)] += data[np.ix_(*src_idx)]
            else:
                arr[np.ix_(*dst)] = data[np.ix_(*src_idx)]
            self.reading[phys] = lane
            self.reading_site[phys] = sid
            self.open.setdefault(int(lane), []).append((phys, sid))

    def commit(self):
        for lane in self.m.lanes:
            opened = self.open.pop(int(lane), [])
            if opened:
                self.groups.setdefault(int(lane), []).append(opened)

    def wait(self, newest: int):
        """cp.async.bulk.wait_group.read newest: all but the newest groups are done reading."""
        t = self.m.tracker
        for lane in self.m.lanes:
            groups = self.groups.get(int(lane), [])
            done, self.groups[int(lane)] = groups[:max(len(groups) - newest, 0)], \
                groups[max(len(groups) - newest, 0):]
            for group in done:
                for phys, sid in group:
                    self.reading[phys[self.reading[phys] == lane]] = NONE
                    t.read(phys, np.full(phys.size, lane, np.int32), sid)

    def on_write(self, addr, tid, sid):
        """A generic write into shared bytes: a store still reading them is a race."""
        busy = self.reading[addr] >= 0
        if not busy.any():
            return
        t = self.m.tracker
        i = int(np.argmax(busy))
        store = t.sites[self.reading_site[addr[i]]]
        here = t.sites[sid if np.ndim(sid) == 0 else sid[i]]
        self.m.reports.add(
            "race", f"{here.buffer}: thread {tid[i]} {here.op} at {here.where()} overwrites "
            f"shared memory that the TMA store at {store.where()} (issued by thread "
            f"{self.reading[addr[i]]}) may still be reading: the issuing thread has not waited "
            f"for it (cp.async.bulk.wait_group.read) before a barrier in between (arena byte "
            f"{addr[i]})", here.buffer, (int(self.reading[addr[i]]), int(tid[i])), (store, here))

    def finish(self):
        for lane in sorted(set(self.open) | set(self.groups)):
            pending = self.open.get(lane, []) + [s for g in self.groups.get(lane, []) for s in g]
            if pending:
                site = self.m.tracker.sites[pending[0][1]]
                self.m.reports.add(
                    "async-not-waited", f"{site.buffer}: the TMA store at {site.where()} may "
                    f"still read shared memory when the block ends: thread {lane} never waits "
                    "for it (cp.async.bulk.wait_group.read)", site.buffer, (lane,), (site,))


def stmatrix_x4(m, ptr, words):
    """Each warp's lanes store four 8x8 matrices: lane i writes row i % 8 of matrix i / 8, the
    16 bytes lanes 4 (i % 8) .. 4 (i % 8) + 3 hold in their register i / 8."""
    whole = np.zeros(m.T, bool)
    whole[m.lanes] = True
    if not whole.reshape(-1, WARP).all(1)[m.lanes // WARP].all():
        raise TileError("stmatrix_x4 is warp-collective: every lane of a warp must execute it",
                        m.span)
    regs = np.stack([np.broadcast_to(np.asarray(w, np.uint32), (m.T,)) for w in words], 1)
    lane = m.tx % WARP
    holders = (m.tx - lane)[:, None] + (lane % 8 * 4)[:, None] + np.arange(4)   # [T, 4]
    rows = regs[holders, (lane // 8)[:, None]]                                   # [T, 4] words
    m.mem.write_bytes(ptr, np.ascontiguousarray(rows).view(np.uint8).reshape(m.T, 16),
                      m.lanes, "stmatrix", m.span)
