"""What the emulator finds wrong with a kernel, and the shared-memory bookkeeping that finds it.

Shared memory is tracked per byte of the block's arena. Between two barriers (an epoch) each byte
remembers the thread that last wrote it and the thread that read it (or "several"), with the
access site (an op, the buffer it went through, the user's source line). A second thread touching
a byte that another thread wrote in the same epoch, or writing a byte another thread read, is a
race. A barrier of part of the block (a warp's __syncwarp) orders an access only for the threads
that met it: the byte keeps a fence, the set of threads the access is now ordered before. Bytes with a cp.async in flight belong to the copy until the wait that covers its group:
any access to them before that is reported. Bytes never written are reported when read.
In sm_90a kernels a hook (barriers.Barriers) also sees every access, for the orderings that
mbarriers and the async proxy (TMA, wgmma) add.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NONE = -1      # no thread
SEVERAL = -2   # more than one thread (readers)
SAME = -3      # more than one thread, all storing the same bytes (writers)
UNIT = 128     # threads of a warpgroup, the unit mbarrier ordering is tracked in


@dataclass(frozen=True)
class Site:
    op: str          # "read", "write", "cp.async", "ldmatrix", ...
    buffer: str
    span: object     # errors.Span or None

    def where(self) -> str:
        if self.span is None:
            return "an unknown line"
        return f"{self.span.filename.rsplit('/', 1)[-1]}:{self.span.line}"


@dataclass
class Report:
    """One finding. kind: race, async-before-wait, uninitialized, out-of-bounds, misaligned,
    barrier-divergence, warp-divergence, async-not-waited, deadlock, mbarrier (arrivals beyond
    a phase), proxy-fence. `sites` are the accesses involved (for a race: the earlier one,
    then the later one); `lines` their user source lines."""
    kind: str
    message: str
    buffer: str | None = None
    threads: tuple = ()
    sites: tuple = ()                 # Site objects of the accesses involved
    block: tuple = ()
    count: int = 1                    # how many times it was seen (deduplicated)

    @property
    def lines(self) -> tuple:
        return tuple(s.span.line for s in self.sites if s.span is not None)

    def __str__(self) -> str:
        where = f" (block {self.block})" if self.block else ""
        again = f" [seen {self.count} times]" if self.count > 1 else ""
        return f"{self.kind}: {self.message}{where}{again}"


class Reports:
    """Findings of one emulation, deduplicated by (kind, buffer, sites)."""

    def __init__(self, limit: int = 200):
        self.items: list[Report] = []
        self._seen: dict = {}
        self.limit = limit
        self.block: tuple = ()

    def add(self, kind, message, buffer=None, threads=(), sites=()):
        key = (kind, buffer, tuple((s.op, s.buffer, s.span) for s in sites))
        if key in self._seen:
            self._seen[key].count += 1
            return
        if len(self.items) >= self.limit:
            return
        r = Report(kind, message, buffer, tuple(int(t) for t in threads), tuple(sites),
                   self.block)
        self._seen[key] = r
        self.items.append(r)

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)


class SharedTracker:
    """Race, uninitialized-read and cp.async bookkeeping over one block's shared arena."""

    def __init__(self, nbytes: int, reports: Reports, enabled: bool = True):
        self.enabled = enabled
        self.reports = reports
        self.sites: list[Site] = []
        self._site_ids: dict = {}
        self.writer = np.full(nbytes, NONE, np.int32)
        self.writer_site = np.zeros(nbytes, np.int32)
        self.reader = np.full(nbytes, NONE, np.int32)
        self.reader_site = np.zeros(nbytes, np.int32)
        self.pending = np.full(nbytes, NONE, np.int32)
        self.pending_site = np.zeros(nbytes, np.int32)
        self.written = np.zeros(nbytes, bool)
        self.scratch = np.zeros(nbytes, np.uint8)
        # Partial barriers: per byte the fence of its writer's and its readers' accesses (an
        # index into `fences`, rows of the threads each is ordered before), and the range of
        # threads among its readers.
        self.writer_fence = np.full(nbytes, NONE, np.int32)
        self.reader_fence = np.full(nbytes, NONE, np.int32)
        self.reader_lo = np.zeros(nbytes, np.int32)
        self.reader_hi = np.zeros(nbytes, np.int32)
        self.fences = np.zeros((0, 0), bool)
        self.partial = False     # the kernel has partial barriers (set by the block machine)
        self.hooks = None   # sees every tracked access: on_access(addr, tid, site, write)
        self.wgmma_reads = None  # operand_reads.OperandReads: bytes a wgmma in flight reads

    def site(self, op: str, buffer: str, span) -> int:
        key = (op, buffer, span)
        sid = self._site_ids.get(key)
        if sid is None:
            sid = self._site_ids[key] = len(self.sites)
            self.sites.append(Site(op, buffer, span))
        return sid

    def barrier(self):
        self.writer.fill(NONE)
        self.reader.fill(NONE)
        self.writer_fence.fill(NONE)
        self.reader_fence.fill(NONE)
        self.fences = self.fences[:0]

    def partial_barrier(self, groups):
        """Threads with equal group number (>= 0; -1: not taking part) wait for each other:
        what each accessed so far is ordered before what the others of its group do next."""
        groups = np.asarray(groups)
        T = groups.size
        if self.fences.shape[1] != T:
            self.fences = np.zeros((0, T), bool)
        made: dict = {}
        for owner, fence, several in ((self.writer, self.writer_fence, False),
                                      (self.reader, self.reader_fence, True)):
            who = np.where(owner >= 0, owner, self.reader_lo if several else 0)
            who = np.clip(who, 0, T - 1)
            g = groups[who]
            hit = (owner >= 0) & (g >= 0)
            if several:   # several readers: fenced when the first and last share a group
                hit |= (owner == SEVERAL) & (g >= 0) & \
                    (groups[np.clip(self.reader_hi, 0, T - 1)] == g)
            idx = np.nonzero(hit)[0]
            if not idx.size:
                continue
            pairs, inverse = np.unique(np.stack([fence[idx], g[idx]], 1), axis=0,
                                       return_inverse=True)
            rows = []
            for old, group in pairs:
                key = (int(old), int(group))
                if key not in made:
                    row = groups == key[1]
                    if key[0] >= 0:
                        row = row | self.fences[key[0]]
                    rows.append(row)
                    made[key] = len(self.fences) + len(rows) - 1
            if rows:
                self.fences = np.vstack([self.fences] + [r[None] for r in rows])
            fence[idx] = np.array([made[(int(o), int(gr))] for o, gr in pairs],
                                  np.int32)[inverse.reshape(-1)]

    def _unseen(self, fence, tid):
        """The accesses whose fence does not cover thread tid (per byte)."""
        if not self.fences.shape[0]:
            return True
        f = np.clip(fence, 0, None)
        return (fence < 0) | ~self.fences[f, np.clip(tid, 0, self.fences.shape[1] - 1)]

    # --- accesses: addr and tid are flat arrays of equal length (one entry per byte) ------
    def read(self, addr, tid, sid: int):
        if not self.enabled or addr.size == 0:
            return
        here = self.sites[sid]
        bad, first = self._in_flight(addr)
        if first is not None:
            i, issuer, other = first
            self.reports.add(
                "async-before-wait",
                f"{here.buffer}: thread {tid[i]} {here.op} at {here.where()} reads shared bytes "
                f"whose {other.op} (issued by thread {issuer} at {other.where()}) has not been "
                "waited for", here.buffer, (issuer, tid[i]), (other, here))
        fresh = ~self.written[addr] & ~bad
        if fresh.any():
            i = int(np.argmax(fresh))
            self.reports.add(
                "uninitialized",
                f"{here.buffer}: thread {tid[i]} {here.op} at {here.where()} reads shared "
                f"memory (arena byte {addr[i]}) that was never written", here.buffer,
                (tid[i],), (here,))
        w = self.writer[addr]
        clash = (w >= 0) & (w != tid) & self._unseen(self.writer_fence[addr], tid)
        if clash.any() and self.hooks is not None:
            clash &= ~self.hooks.write_ordered(addr, w, tid)
        if clash.any():
            i = int(np.argmax(clash))
            other = self.sites[self.writer_site[addr[i]]]
            self._race(other, w[i], "wrote", here, tid[i], "reads", addr[i])
        if self.partial or self.hooks is not None:   # (the range of the readers' threads)
            fresh = addr[self.reader[addr] == NONE]
            self.reader_lo[fresh], self.reader_hi[fresh] = np.iinfo(np.int32).max, -1
            np.minimum.at(self.reader_lo, addr, tid)
            np.maximum.at(self.reader_hi, addr, tid)
            self.reader_fence[addr] = NONE
        self._mark(self.reader, self.reader_site, addr, tid, sid, SEVERAL)
        if self.hooks is not None:
            self.hooks.on_access(addr, tid, sid, False)

    def write(self, addr, tid, sid: int, data, memory):
        """data: the bytes written (one per addr); memory: the arena before the write."""
        if addr.size == 0:
            return
        if self.enabled:
            self._check_write(addr, tid, sid, data, memory)
            if self.hooks is not None:
                self.hooks.on_access(addr, tid, sid, True)
            if self.wgmma_reads is not None:
                self.wgmma_reads.check(addr, tid, sid, "writes")
        self.written[addr] = True

    def async_issue(self, addr, tid, sid: int, data, memory):
        """A cp.async starts: its bytes are in flight until the covering wait."""
        if addr.size == 0:
            return
        if self.enabled:
            self._check_write(addr, tid, sid, data, memory)
            if self.wgmma_reads is not None:
                self.wgmma_reads.check(addr, tid, sid, "starts a cp.async into")
        self.pending[addr] = tid
        self.pending_site[addr] = sid

    def async_complete(self, addr, tid):
        """The wait covering a cp.async: its data lands, written by the issuing thread."""
        if addr.size == 0:
            return
        sid = self.pending_site[addr]
        self.pending[addr] = NONE
        self.written[addr] = True
        if self.enabled:
            self.writer[addr] = tid
            self.writer_site[addr] = sid
            if self.hooks is not None:
                self.hooks.on_access(addr, tid, sid, True)

    def outstanding(self) -> bool:
        return bool((self.pending >= 0).any())

    # --- helpers ----------------------------------------------------------------
    def _reader_units(self, addr, r):
        """The first and last warpgroup among each byte's readers (-1 where none)."""
        one = np.where(r >= 0, r // UNIT, -1)
        several = r == SEVERAL
        return (np.where(several, self.reader_lo[addr] // UNIT, one),
                np.where(several, self.reader_hi[addr] // UNIT, one))

    def _in_flight(self, addr):
        """The mask of the bytes an asynchronous copy still has in flight, and the first of
        them as (index, issuing thread, the copy's site), or None."""
        p = self.pending[addr]
        bad = p >= 0
        if not bad.any():
            return bad, None
        i = int(np.argmax(bad))
        return bad, (i, p[i], self.sites[self.pending_site[addr[i]]])

    def _check_write(self, addr, tid, sid, data, memory):
        here = self.sites[sid]
        _, first = self._in_flight(addr)
        if first is not None:
            i, issuer, other = first
            self._race(other, issuer, "has a cp.async in flight to", here, tid[i], "writes",
                       addr[i])
        r = self.reader[addr]
        clash = ((r == SEVERAL) | ((r >= 0) & (r != tid))) & \
            self._unseen(self.reader_fence[addr], tid)
        if clash.any() and self.hooks is not None:
            clash &= ~self.hooks.ordered(addr, *self._reader_units(addr, r), tid)
        if clash.any():
            i = int(np.argmax(clash))
            other = self.sites[self.reader_site[addr[i]]]
            who = "several threads" if r[i] == SEVERAL else f"thread {r[i]}"
            self._race(other, r[i], "read", here, tid[i], "writes", addr[i], who)
        # Another thread's write in this epoch races unless it stored the very same bytes
        # (redundant stores of one value by every thread are a common, harmless idiom).
        w = self.writer[addr]
        foreign = ((w == SAME) | ((w >= 0) & (w != tid))) & \
            self._unseen(self.writer_fence[addr], tid)
        if foreign.any() and self.hooks is not None:
            foreign &= ~self.hooks.write_ordered(addr, w, tid)
        same = memory[addr] == data
        clash = foreign & ~same
        if clash.any():
            i = int(np.argmax(clash))
            other = self.sites[self.writer_site[addr[i]]]
            who = "several threads" if w[i] == SAME else f"thread {w[i]}"
            self._race(other, w[i], "wrote", here, tid[i], "writes", addr[i], who)
        # Threads of this very access that meet on one byte: a race unless the values agree.
        self.writer[addr] = tid
        self.writer_site[addr] = sid
        if self.partial:
            self.writer_fence[addr] = NONE
        self.scratch[addr] = data
        differ = self.scratch[addr] != data
        if differ.any():
            i = int(np.argmax(differ))
            self._race(here, self.writer[addr[i]], "writes", here, tid[i], "writes", addr[i])
        shared = (self.writer[addr] != tid) | (foreign & same)
        self.writer[addr[shared]] = SAME

    def _mark(self, owner, owner_site, addr, tid, sid, several):
        """owner[addr] = tid, or `several` where different threads meet on one byte."""
        old = owner[addr]
        want = np.where((old == NONE) | (old == tid), tid, several)
        owner[addr] = want
        owner_site[addr] = sid
        clash = owner[addr] != want
        if clash.any():
            owner[addr[clash]] = several

    def _race(self, a: Site, ta, verb_a, b: Site, tb, verb_b, byte, who_a=None):
        who_a = who_a or f"thread {ta}"
        threads = (int(tb),) if ta < 0 else (int(ta), int(tb))
        self.reports.add(
            "race",
            f"{b.buffer}: {who_a} {verb_a} it at {a.where()} ({a.op} of {a.buffer}) and thread "
            f"{tb} {verb_b} it at {b.where()} ({b.op}) with no barrier in between (arena byte "
            f"{byte})", b.buffer, threads, (a, b))


__all__ = ["Site", "Report", "Reports", "SharedTracker"]
