"""Shared-memory bytes that a wgmma still in flight reads, and writes that land on them.

The hardware reads a wgmma's shared operands at some moment between its issue and the
wgmma_wait_group that retires it; the emulator reads them at the retirement, the latest such
moment. A store, cp.async or TMA load into those bytes in between is a race the numbers only
sometimes show (they change only when the hardware happens to read late), so every write is
checked here against the bytes of the wgmma not yet retired: the writer, the wgmma's line and
the byte are reported. This is what makes a wait moved later than its reads allow (a batch
kept in flight across a loop iteration that rewrites an operand tile) visible on the CPU.
"""
from __future__ import annotations

import numpy as np


class OperandReads:
    def __init__(self, m):
        self.m = m
        self.count = None      # per arena byte: wgmma in flight reading it
        self.site = None       # per arena byte: tracker site of the latest such wgmma
        self.group = None      # per arena byte: its warpgroup

    def issue(self, raw: np.ndarray, sid: int, group: int) -> np.ndarray:
        """Mark the bytes a wgmma issued now reads; returns what release() needs."""
        if self.count is None:
            size = self.m.mem.arena.size
            self.count = np.zeros(size, np.int32)
            self.site = np.full(size, -1, np.int32)
            self.group = np.zeros(size, np.int32)
        raw = np.unique(raw)
        self.count[raw] += 1
        self.site[raw] = sid
        self.group[raw] = group
        return raw

    def release(self, raw: np.ndarray) -> None:
        self.count[raw] -= 1

    def check(self, addr, tid, sid: int, verb: str) -> None:
        """A write by thread(s) tid at tracker site sid into bytes addr."""
        if self.count is None or addr.size == 0:
            return
        busy = self.count[addr] > 0
        if not busy.any():
            return
        i = int(np.argmax(busy))
        byte = int(addr[i])
        t = self.m.tracker
        writer, reader = t.sites[sid], t.sites[int(self.site[byte])]
        who = int(np.broadcast_to(np.asarray(tid), addr.shape)[i])
        self.m.reports.add(
            "race", f"{writer.buffer}: thread {who} {verb} it at {writer.where()} while the "
            f"wgmma issued at {reader.where()} (warpgroup {int(self.group[byte])}) may still be "
            f"reading it: no wgmma_wait_group retired that wgmma first (arena byte {byte})",
            writer.buffer, (who, int(self.group[byte]) * 128), (reader, writer))
