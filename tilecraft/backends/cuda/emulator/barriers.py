"""mbarriers, named barriers and the ordering they give a warp-specialized block (sm_90a).

An mbarrier (sync.h) lives at an 8-byte shared address: the arrivals it expects per phase, the
arrivals still missing, the transaction bytes still expected, and how many phases completed.
A phase completes when no arrival is missing and the transaction count is back to zero; then
the TMA boxes counted in it land in shared memory, and waiters whose parity differs from the
current phase's pass. Named barriers count arriving warps (bar.sync counts whole warps).

Ordering between roles is tracked with vector clocks over warpgroups (the unit every role is
made of), plus one component per mbarrier counting the phases a warpgroup has seen complete:
an arrival publishes the arriving warpgroups' clocks into the open phase, a wait that passes
takes in everything published into completed phases, a named barrier joins its participants.
With them, the checker finds (a) generic reads or writes of bytes a TMA brought in by threads
that never waited for that phase, and (b) TMA loads overwriting bytes whose last generic access
the issuing thread is not ordered after (a consumer released a stage too early). It also keeps,
in kernels that issue wgmma, which thread last wrote each shared byte through the generic proxy
without a fence.proxy.async since: wgmma reading such bytes is reported.
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from .checker import NONE, Site
from .hopper import shared_address

UNIT = 128            # threads per clock: a warpgroup
MAX_MBARRIERS = 64


class MBarrier:
    def __init__(self, index: int, buffer, elem: int, count: int, width: int):
        self.index, self.buffer, self.elem = index, buffer, elem
        self.count = self.pending = count
        self.tx = 0
        self.phase = 0                                  # phases completed so far
        self.published = np.zeros(width, np.int64)      # clocks released into the open phase
        self.completed = np.zeros(width, np.int64)      # clocks of every completed phase
        self.transfers: list = []                       # TMA boxes counted in the open phase

    def label(self) -> str:
        return f"{self.buffer.name}[{self.elem}]"

    def state(self) -> str:
        return (f"its phase {self.phase} still misses {self.pending} of {self.count} "
                f"arrival(s) and {self.tx} transaction byte(s)")


class Wait:
    """What a blocked agent waits for (agents.py): ready() says when it may go on."""

    def __init__(self, ready, lanes, buffer: str, span, what: str, op: str):
        self.ready, self.lanes, self.buffer, self.span = ready, lanes, buffer, span
        self.what, self.op = what, op
        self.on_pass = None                 # run when the agent goes on


class Barriers:
    def __init__(self, m, tma: bool, wgmma: bool):
        self.m = m
        self.G = -(-m.T // UNIT)
        self.width = self.G + MAX_MBARRIERS
        self.vc = np.zeros((self.G, self.width), np.int64)
        self.vc[np.arange(self.G), np.arange(self.G)] = 1
        self.mbars: dict[int, MBarrier] = {}
        self.named: dict[int, dict] = {}
        n = m.mem.arena.size
        check = m.tracker.enabled
        # per shared byte: the phase a TMA landed it in, the last generic access (clock,
        # thread, site) since, and the unfenced generic writer
        self.land_bar = np.full(n, -1, np.int32) if tma and check else None
        # per shared byte and warpgroup: its clock at its last access of the byte (the
        # checker asks whether that access is ordered before another warpgroup's)
        self.acc_clock = np.zeros((n, self.G), np.int64) if check else None
        self.write_clock = np.zeros(n, np.int64) if check else None   # its last writer's
        if self.land_bar is not None:
            self.land_phase = np.zeros(n, np.int64)
            self.acc_tid = np.zeros(n, np.int32)
            self.acc_site = np.zeros(n, np.int32)
        self.proxy = np.full(n, NONE, np.int32) if wgmma and check else None
        if self.proxy is not None:   # the writer's clock, and each warpgroup's at its fence
            self.proxy_clock = np.zeros(n, np.int64)
            self.fenced = np.zeros((self.G, self.G), np.int64)

    # --- clocks --------------------------------------------------------------------------
    def units(self, lanes):
        return np.unique(np.asarray(lanes) // UNIT)

    def release(self, lanes, into: np.ndarray):
        u = self.units(lanes)
        np.maximum(into, self.vc[u].max(0), out=into)
        self.vc[u, u] += 1

    def join(self, lanes):
        """A barrier over lanes: their warpgroups learn each other's clocks."""
        u = self.units(lanes)
        self.vc[u] = self.vc[u].max(0)
        self.vc[u, u] += 1

    # --- mbarriers ---------------------------------------------------------------------
    def _lookup(self, ptr, lanes, op: str):
        """{MBarrier: lanes using it} for a pointer evaluated per lane. A barrier used before
        its mbarrier_init is reported and taken as one expecting a single arrival."""
        m = self.m
        addr = shared_address(m, ptr, lanes)
        out = {}
        t = m.tracker
        for a in np.unique(addr):
            a = int(a)
            users = lanes[addr == a]
            raw = (a + np.arange(8))[None, :].repeat(users.size, 0).reshape(-1)
            t.read(raw, np.repeat(users, 8).astype(np.int32), t.site(op, ptr.buffer.name, m.span))
            mb = self.mbars.get(a)
            if mb is None:
                elem = (a - m.mem.offsets[id(ptr.buffer)]) // 8
                mb = self._create(a, ptr.buffer, elem, 1)
                site = Site(op, ptr.buffer.name, m.span)
                m.reports.add("mbarrier", f"{mb.label()}: thread {users[0]} uses it at "
                              f"{site.where()} ({op}) before any mbarrier_init", mb.buffer.name,
                              (int(users[0]),), (site,))
            out[mb] = users
        return out

    def _create(self, addr: int, buffer, elem: int, count: int) -> MBarrier:
        index = self.mbars[addr].index if addr in self.mbars else len(self.mbars)
        if index >= MAX_MBARRIERS:
            raise TileError(f"the emulator tracks at most {MAX_MBARRIERS} mbarriers per block",
                            self.m.span)
        mb = self.mbars[addr] = MBarrier(index, buffer, elem, count, self.width)
        return mb

    def init(self, ptr, count):
        m = self.m
        lanes = m.lanes
        addr = shared_address(m, ptr, lanes)
        count = np.broadcast_to(np.asarray(count, np.int64), (m.T,))[lanes]
        es = ptr.buffer.dtype.bits // 8
        elem = (addr - m.mem.offsets[id(ptr.buffer)]) // es
        for a, c, e, lane in zip(addr, count, elem, lanes):
            a = int(a)
            if a % 8 or not 0 < c < 1 << 20:
                raise TileError(f"mbarrier_init of {ptr.buffer.name}: a misaligned address or "
                                f"an arrival count ({int(c)}) outside 1..2^20-1", m.span)
            self._create(a, ptr.buffer, int(e), int(c))
            data = np.array([int(c)], np.uint64).view(np.uint8)
            t = m.tracker
            t.write(a + np.arange(8), np.full(8, lane, np.int32),
                    t.site("mbarrier_init", ptr.buffer.name, m.span), data, m.mem.arena)
            m.mem.arena[a:a + 8] = data

    def arrive(self, ptr, tx=0, per_warp=False):
        m = self.m
        lanes = m.lanes
        if per_warp:
            from .shuffles import whole_warps
            whole_warps(m, "mbarrier_arrive_warp")
            lanes = lanes[lanes % 32 == 0]
        tx = np.broadcast_to(np.asarray(tx, np.int64), (m.T,))
        for mb, users in self._lookup(ptr, lanes, "mbarrier_arrive").items():
            self.release(users, mb.published)
            mb.tx += int(tx[users].sum())
            left = users.size
            while left:
                take = min(left, mb.pending)
                mb.pending -= take
                left -= take
                completed = self._complete(mb)
                if left and not completed:
                    site = Site("mbarrier_arrive", mb.buffer.name, m.span)
                    m.reports.add("mbarrier", f"{mb.label()}: {left} more arrival(s) at "
                                  f"{site.where()} than its phase {mb.phase} expects "
                                  f"({mb.count})", mb.buffer.name, (int(users[0]),), (site,))
                    break

    def expect_tx(self, ptr, nbytes):
        m = self.m
        nbytes = np.broadcast_to(np.asarray(nbytes, np.int64), (m.T,))
        for mb, users in self._lookup(ptr, m.lanes, "mbarrier_expect_tx").items():
            mb.tx += int(nbytes[users].sum())
            self._complete(mb)

    def _complete(self, mb: MBarrier) -> bool:
        if mb.pending or mb.tx:
            return False
        for transfer in mb.transfers:
            self._land(mb, *transfer)
        np.maximum(mb.completed, mb.published, out=mb.completed)
        mb.completed[self.G + mb.index] = mb.phase + 1
        mb.published[:] = 0
        mb.transfers = []
        mb.phase += 1
        mb.pending = mb.count
        return True

    def passed(self, ptr, parity):
        """(per-lane pass flags, {MBarrier: lanes}) of try_wait.parity now."""
        m = self.m
        parity = np.broadcast_to(np.asarray(parity, np.int64) & 1, (m.T,))
        ok = np.zeros(m.T, bool)
        found = self._lookup(ptr, m.lanes, "mbarrier_wait_parity")
        for mb, users in found.items():
            ok[users] = (mb.phase & 1) != parity[users]
        return ok, found

    def observe(self, found: dict, ok):
        for mb, users in found.items():
            u = self.units(users[ok[users]])
            if u.size:
                self.vc[u] = np.maximum(self.vc[u], mb.completed)

    def wait_request(self, ptr, parity):
        """None when every lane may pass now (and then has seen the phases), else a Wait."""
        m = self.m
        ok, found = self.passed(ptr, parity)
        lanes = m.lanes
        if ok[lanes].all():
            self.observe(found, ok)
            return None
        parity = np.broadcast_to(np.asarray(parity, np.int64) & 1, (m.T,))

        def ready():
            return all(((mb.phase & 1) != parity[users]).all() for mb, users in found.items())
        mb, users = next((mb, u) for mb, u in found.items() if not ok[u].all())
        p = int(parity[users[0]])

        def what():
            return (f"{mb.label()} to complete its phase of parity {p}, which can no longer "
                    f"happen: {mb.state()}")
        w = Wait(ready, lanes, mb.buffer.name, m.span, what, "mbarrier_wait_parity")
        w.on_pass = lambda: self.observe(found, np.ones(m.T, bool))
        return w

    # --- named barriers -----------------------------------------------------------------
    def named_arrive(self, ident, count, wait: bool = True):
        m = self.m
        idents = np.asarray(ident).reshape(-1)
        if idents.size == m.T:  # one per thread: the executing ones count
            idents = idents[m.lanes]
        idents = np.unique(idents)
        if len(idents) > 1:
            raise TileError(f"named barriers {', '.join(map(str, idents))} used by the threads "
                            "of one warpgroup in one statement; the emulator runs each "
                            "warpgroup in lock-step", m.span)
        ident = int(idents[0])
        count = int(np.asarray(count).reshape(-1)[0])
        site = Site(f"named_barrier {ident}", "", m.span)
        if count % 32 or not 0 < count <= m.T:
            raise TileError(f"named barrier {ident}: {count} threads is not a positive "
                            f"multiple of 32 up to the block's {m.T}", m.span)
        st = self.named.setdefault(ident, dict(count=count, warps=set(), lanes=[], gen=0))
        if st["warps"] and st["count"] != count:
            m.reports.add("barrier-divergence", f"named barrier {ident} is used with "
                          f"{st['count']} and {count} threads at {site.where()}", None,
                          (int(m.lanes[0]),), (site,))
        st["count"] = count
        st["warps"].update(int(w) for w in np.unique(m.lanes // 32))
        st["lanes"].append(m.lanes)
        gen = st["gen"]
        if 32 * len(st["warps"]) >= count:
            lanes = np.concatenate(st["lanes"])
            self.join(lanes)
            if m.tracker.partial and lanes.size < m.T:
                # The threads that met are ordered among themselves, the others are not.
                groups = np.full(m.T, -1)
                groups[lanes] = 0
                m.tracker.partial_barrier(groups)
            else:
                m.tracker.barrier()
            st.update(warps=set(), lanes=[], gen=gen + 1)
            return None
        if not wait:
            return None

        def what():
            return (f"named barrier {ident} ({count} threads), which can no longer complete: "
                    f"{32 * len(st['warps'])} of its threads arrived")
        return Wait(lambda: st["gen"] > gen, m.lanes, f"barrier {ident}", m.span, what,
                    "named_barrier_sync")

    # --- TMA and the async proxy ---------------------------------------------------------
    def tma_write(self, lane: int, mbar, phys, raw, site: Site):
        """A TMA box issued by `lane`: checked against earlier accesses, in flight until the
        mbarrier phase it is counted in completes."""
        m = self.m
        t = m.tracker
        sid = t.site(site.op, site.buffer, site.span)
        if self.land_bar is not None:
            u = lane // UNIT
            stale = (self.acc_clock[phys] > self.vc[u, :self.G]).any(1)
            if stale.any():
                i = int(np.argmax(stale))
                other = t.sites[self.acc_site[phys[i]]]
                m.reports.add(
                    "race", f"{site.buffer}: the TMA load at {site.where()} (thread {lane}) "
                    f"overwrites shared memory that thread {self.acc_tid[phys[i]]} accessed at "
                    f"{other.where()} ({other.op} of {other.buffer}) with no mbarrier arrival "
                    f"the producer waited for in between (arena byte {phys[i]})", site.buffer,
                    (int(self.acc_tid[phys[i]]), lane), (other, site))
        if t.enabled and t.wgmma_reads is not None:
            t.wgmma_reads.check(phys, lane, sid, "starts a TMA load into")
        if t.enabled:
            m.bulk_stores.on_write(phys, np.full(phys.size, lane, np.int32), sid)
        busy = t.pending[phys] >= 0
        if t.enabled and busy.any():
            i = int(np.argmax(busy))
            other = t.sites[t.pending_site[phys[i]]]
            t._race(other, t.pending[phys[i]], "has a copy in flight to", site, lane,
                    "starts a TMA load into", phys[i])
        t.pending[phys] = lane
        t.pending_site[phys] = sid
        (mb, users), = self._lookup(mbar, np.array([lane]), "tma complete_tx").items()
        mb.tx -= raw.size
        mb.transfers.append((phys, raw, lane))
        self._complete(mb)

    def _land(self, mb: MBarrier, phys, raw, lane):
        m = self.m
        m.mem.arena[phys] = raw
        t = m.tracker
        t.pending[phys] = NONE
        t.written[phys] = True
        t.writer[phys] = NONE
        t.reader[phys] = NONE
        if self.proxy is not None:
            self.proxy[phys] = NONE
        if self.land_bar is not None:
            self.land_bar[phys] = mb.index
            self.land_phase[phys] = mb.phase
            self.acc_clock[phys] = 0

    def on_access(self, addr, tid, sid, write: bool):
        """Every generic shared access the tracker sees (hook of checker.SharedTracker); sid
        is one site id or one per byte."""
        if write and self.proxy is not None:
            self.proxy[addr] = tid
            self.proxy_clock[addr] = self.vc[tid // UNIT, tid // UNIT]
        if write:
            self.m.bulk_stores.on_write(addr, tid, sid)
        u = tid // UNIT
        if write:
            self.write_clock[addr] = self.vc[u, u]
        if self.land_bar is None:
            self.acc_clock[addr, u] = self.vc[u, u]
            return
        bar = self.land_bar[addr]
        hit = bar >= 0
        if hit.any():
            seen = self.vc[u[hit], self.G + bar[hit]]
            late = seen <= self.land_phase[addr[hit]]
            if late.any():
                i = int(np.nonzero(hit)[0][np.argmax(late)])
                self._unwaited(addr[i], int(tid[i]), int(sid[i] if np.ndim(sid) else sid))
        if write:
            self.land_bar[addr] = -1
        self.acc_clock[addr, u] = self.vc[u, u]
        self.acc_tid[addr] = tid
        self.acc_site[addr] = sid

    def write_ordered(self, addr, writer, tid):
        """Per byte: its last write, by thread `writer` (< 0: several or none), is of another
        warpgroup than tid's and ordered before tid goes on through mbarriers."""
        w = np.broadcast_to(np.asarray(writer), addr.shape)
        t = np.broadcast_to(np.asarray(tid), addr.shape) // UNIT
        u = np.where(w >= 0, w, 0) // UNIT
        return (w >= 0) & (u != t) & (self.vc[t, u] >= self.write_clock[addr])

    def ordered(self, addr, lo, hi, tid):
        """Per byte: the accesses of it by warpgroups lo..hi (-1: unknown), none of them
        thread tid's own, are ordered before tid goes on through mbarriers (an arrival after
        each, a wait passed since): the last access of each of those warpgroups is."""
        lo, hi = (np.broadcast_to(np.asarray(x), addr.shape) for x in (lo, hi))
        t = np.broadcast_to(np.asarray(tid), addr.shape) // UNIT
        ok = (lo >= 0) & ((t < lo) | (t > hi))
        if not ok.any():
            return ok
        units = np.arange(self.G)
        seen = self.vc[t, :self.G] >= self.acc_clock[addr]        # [bytes, warpgroups]
        seen |= (units < lo[:, None]) | (units > hi[:, None])
        return ok & seen.all(1)

    def _unwaited(self, byte, tid, sid):
        t = self.m.tracker
        here, tma = t.sites[sid], t.sites[t.pending_site[byte]]
        mb = next(b for b in self.mbars.values() if b.index == self.land_bar[byte])
        self.m.reports.add(
            "async-before-wait", f"{here.buffer}: thread {tid} {here.op} at {here.where()} "
            f"uses shared bytes a TMA load (at {tma.where()}) brought in on {mb.label()} in "
            f"phase {self.land_phase[byte]}, which this thread has not waited for",
            here.buffer, (tid,), (tma, here))

    def fence_proxy(self, lanes):
        """fence.proxy.async by lanes: their generic writes become visible to the async proxy,
        and so do other warpgroups' writes ordered before it (through mbarriers): a fence
        anywhere on the path from the write to the read orders them."""
        if self.proxy is None:
            return
        u = self.units(lanes)
        self.fenced[u] = self.vc[u, :self.G]
        member = np.zeros(self.m.T, bool)
        member[lanes] = True
        d = self.proxy
        idx = np.nonzero(d >= 0)[0]
        d[idx[member[d[idx]]]] = NONE

    def proxy_check(self, raw, reader: int, sid: int):
        """The async proxy (wgmma) reads bytes raw: any unfenced generic write is reported."""
        if self.proxy is None:
            return
        w = self.proxy[raw]
        bad = w >= 0
        if bad.any():
            wu, ru = np.where(bad, w, 0) // UNIT, reader // UNIT
            bad &= (wu == ru) | (self.fenced[ru, wu] < self.proxy_clock[raw])
        if bad.any():
            t = self.m.tracker
            i = int(np.argmax(bad))
            here = t.sites[sid]
            self.m.reports.add(
                "proxy-fence", f"{here.buffer}: thread {w[i]} wrote shared memory with ordinary "
                f"stores and the {here.op} at {here.where()} (warpgroup of thread {reader}) "
                "reads it through the async proxy with no fence.proxy.async in between "
                f"(arena byte {raw[i]})", here.buffer, (int(w[i]), reader), (here,))

    def finish(self):
        """End of the block: TMA boxes whose phase never completed."""
        for mb in self.mbars.values():
            if mb.transfers:
                lane = mb.transfers[0][2]
                t = self.m.tracker
                site = t.sites[t.pending_site[mb.transfers[0][0][0]]]
                self.m.reports.add("async-not-waited", f"{site.buffer}: a TMA load at "
                                   f"{site.where()} counted on {mb.label()} never lands: "
                                   f"{mb.state()} when the block ends", site.buffer, (lane,),
                                   (site,))


__all__ = ["Barriers", "MBarrier", "Wait", "UNIT"]
