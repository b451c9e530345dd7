"""The mbarriers of T.alloc_barrier on the interpreter: phases counted, waits checked.

The interpreter runs a block's statements once each, in program order, T.ws regions included
(language/warp_specialize.py): nothing ever waits. That order is a valid run of the program
only if every T.barrier_wait it reaches could pass there, that is the phase it waits for has
completed by then. So the arrivals of each mbarrier are counted (a region's T.barrier_arrive
is one arrival per thread of its warpgroups, 128 each; one outside any region, one per thread
of the block) and a wait its phase has not completed is an error: the program would need its
warpgroups to run side by side (a consumer region written before the producer region that
feeds it), and the CUDA code would deadlock where it orders such regions by a block barrier
(regions sharing a tile written by ordinary stores). A T.tma_copy's bytes land at once,
so its transaction count is met at the copy.
"""
from __future__ import annotations

from ..errors import TileError


class PhaseBook:
    def __init__(self):
        self.expected: dict = {}    # (buffer id, index) -> arrivals a phase
        self.arrived: dict = {}     # arrivals in the current phase
        self.completed: dict = {}   # phases completed
        self.names: dict = {}

    def init(self, key, count: int, name: str):
        self.expected[key], self.arrived[key], self.completed[key] = int(count), 0, 0
        self.names[key] = name

    def _known(self, key, what: str, span):
        if key not in self.expected:
            raise TileError(f"{what} on an mbarrier that T.alloc_barrier has not initialized "
                            "in this block", span)

    def arrive(self, key, threads: int, span):
        self._known(key, "T.barrier_arrive", span)
        self.arrived[key] += threads
        if self.arrived[key] > self.expected[key]:
            raise TileError(f"T.barrier_arrive: {self.arrived[key]} arrivals on mbarrier "
                            f"{self.names[key]} in one phase, which expects "
                            f"{self.expected[key]} (each thread of the region arrives once)",
                            span)
        if self.arrived[key] == self.expected[key]:
            self.arrived[key] = 0
            self.completed[key] += 1

    def wait(self, key, parity: int, span):
        """A wait for the phase of this parity passes once that phase has completed: with c
        phases completed the current one has parity c % 2, and a wait for the other passes."""
        self._known(key, "T.barrier_wait", span)
        if self.completed[key] % 2 == int(parity) % 2:
            raise TileError(f"T.barrier_wait on mbarrier {self.names[key]} (parity {parity}) "
                            f"would block here: {self.arrived[key]} of its "
                            f"{self.expected[key]} arrivals are in, and the interpreter runs "
                            "the T.ws regions one after another in program order. Write the "
                            "region that completes the phase before the one that waits for "
                            "it (on the GPU too, regions that share a tile are ordered by "
                            "program order)", span)
