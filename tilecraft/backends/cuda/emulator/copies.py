"""cp.async: copies in flight per thread, grouped by commits, landing at the covering wait.

A copy issued by thread t joins t's open group (numbered by how many commits t has executed).
`cp_async_wait<N>` by t completes every copy of t in a group older than t's newest N committed
groups; `cp_async_wait_all` commits the open group and completes everything. Until then the
destination bytes keep their old contents and the checker treats them as in flight; the
source bytes are read when the copy is issued.
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from ....ir.buffer import is_shared


class AsyncCopies:
    def __init__(self, machine):
        self.m = machine
        self.committed = np.zeros(machine.T, np.int64)
        self.records: list = []  # [lanes, group, addr [k, n], data [k, n]]

    def issue(self, dst, data: np.ndarray, lanes, nbytes: int):
        m = self.m
        if not is_shared(dst.buffer.scope):
            raise TileError(f"cp.async must write shared memory, not {dst.buffer.name}", m.span)
        lanes, first = m.mem.byte_range(dst, nbytes, lanes, "cp.async", m.span)
        if lanes.size == 0:
            return
        addr = first[:, None] + np.arange(nbytes)
        sid = m.tracker.site("cp.async", dst.buffer.name, m.span)
        m.tracker.async_issue(addr.reshape(-1), np.repeat(lanes, nbytes).astype(np.int32), sid,
                              data[lanes].reshape(-1), m.mem.arena)
        self.records.append([lanes, self.committed[lanes].copy(), addr, data[lanes]])

    def commit(self, lanes):
        self.committed[lanes] += 1

    def wait(self, lanes, newest_in_flight):
        """newest_in_flight: N of cp_async_wait<N>, or None for wait_all."""
        if newest_in_flight is None:
            self.commit(lanes)
            newest_in_flight = 0
        live = np.zeros(self.m.T, bool)
        live[lanes] = True
        limit = self.committed - newest_in_flight
        self._complete(lambda t, g: live[t] & (g < limit[t]))

    def finish(self):
        """End of the block: copies never waited for are reported, then land."""
        if not self.records:
            return
        t = self.m.tracker
        lanes = self.records[0][0]
        addr = int(self.records[0][2][0, 0])
        site = t.sites[t.pending_site[addr]]
        self.m.reports.add("async-not-waited",
                           f"{site.buffer}: thread {lanes[0]} issued a cp.async at "
                           f"{site.where()} that no cp_async_wait covers before the kernel ends",
                           site.buffer, (lanes[0],), (site,))
        self._complete(lambda t, g: np.ones(t.shape, bool))

    def _complete(self, done_fn):
        keep = []
        arena, tracker = self.m.mem.arena, self.m.tracker
        for rec in self.records:
            lanes, group, addr, data = rec
            done = done_fn(lanes, group)
            if done.any():
                arena[addr[done]] = data[done]
                n = addr.shape[1]
                tracker.async_complete(addr[done].reshape(-1),
                                       np.repeat(lanes[done], n).astype(np.int32))
            if not done.all():
                keep.append([x[~done] for x in rec])
        self.records = keep


__all__ = ["AsyncCopies"]
