"""Independent progress for the roles of a warp-specialized block: cooperative agents.

The lock-step model runs all threads of a block statement by statement. That cannot run a
producer that must get ahead of its consumers: the producer waits on an mbarrier phase only the
consumers complete, in a branch the consumers reach only after it. So a kernel that can block
(it waits on mbarrier phases or named barriers) runs as agents, each a set of threads in
lock-step (a mask, as before) with its own loop variables, driven by a Python generator:

- a statement that cannot block runs in the ordinary executor (machine.BlockMachine.exec), at
  the ordinary vectorized speed; only statements on the way to a blocking call go through the
  generators here;
- an `if` whose two sides both have threads and statements, and may block, forks: each side
  becomes a child agent, and the parent goes on once both have finished (threads reconverge at
  the end of the `if`, as they would at the end of a pre-Volta branch). An `if` with threads
  on one side only runs in place, the others waiting at its end: code in which threads past
  an `if` release threads blocked inside it would be reported as a deadlock (the compiler
  emits none);
- a wait that cannot pass yields, and the scheduler runs the next agent that can go on (round
  robin, the current one first), so a producer runs ahead until its ring is full;
- an arrival hands over to the other agents that can go on before the arriving one continues:
  a waiting producer then refills a stage as soon as it is released, so a stage released
  before its last read shows up as wrong numbers, not only as a report.

When no agent can go on and some have not finished, the block deadlocks: every blocked agent is
reported with the barrier it waits for, its threads, the user's line and the barrier's state.
"""
from __future__ import annotations

import numpy as np

from ....ir.expr import Call
from ....ir.stmt import Evaluate, For, IfThenElse, Kernel, SeqStmt
from .checker import Site
from .hopper import WARPGROUP
from ..intrinsics import (MBARRIER_ARRIVE_WARP, MBARRIER_WAIT_PARITY, NAMED_BARRIER_ARRIVE,
                          NAMED_BARRIER_SYNC, NAMESPACE)

BLOCKING = (MBARRIER_WAIT_PARITY.name, NAMED_BARRIER_SYNC.name)
# arrivals that release a resource to another role (an arrival with expect_tx is followed by
# the copies that complete its phase: handing over there would only delay them)
HANDOVER = (NAMESPACE + "mbarrier_arrive", MBARRIER_ARRIVE_WARP.name, NAMED_BARRIER_ARRIVE.name)


def blocking_statements(body) -> set:
    """ids of the statements that contain a blocking call or an arrival (statements only, no
    expressions: these calls are statements of their own)."""
    found = set()

    def visit(s) -> bool:
        if isinstance(s, SeqStmt):
            hit = any([visit(x) for x in s.stmts])
        elif isinstance(s, For):
            hit = visit(s.body)
        elif isinstance(s, IfThenElse):
            hit = any([visit(s.then_body), s.else_body is not None and visit(s.else_body)])
        elif isinstance(s, Kernel):
            hit = visit(s.body)
        elif isinstance(s, Evaluate):
            hit = isinstance(s.value, Call) and s.value.name in BLOCKING + HANDOVER
        else:
            hit = False
        if hit:
            found.add(id(s))
        return hit
    visit(body)
    return found


class Fork:
    def __init__(self, branches):
        self.branches = branches        # [(body, live mask)]


class Handover:
    """An agent that may go on but lets the others run first."""
    on_pass = None

    def ready(self) -> bool:
        return True


class Join:
    """A parent waiting for its children."""

    def __init__(self, children):
        self.children = children
        self.on_pass = None

    def ready(self) -> bool:
        return all(c.done for c in self.children)


class Agent:
    def __init__(self, gen, context):
        self.gen = gen
        self.context = context          # (mask, lanes, span, env)
        self.wait = None
        self.done = False


def _warpgroups(live) -> list:
    """The lane mask split by warpgroup (the non-empty parts)."""
    parts = []
    for start in range(0, len(live), WARPGROUP):
        part = np.zeros_like(live)
        part[start:start + WARPGROUP] = live[start:start + WARPGROUP]
        if part.any():
            parts.append(part)
    return parts


def _ranges(lanes) -> str:
    lanes = [int(x) for x in lanes]
    out, start = [], 0
    for i in range(1, len(lanes) + 1):
        if i == len(lanes) or lanes[i] != lanes[i - 1] + 1:
            a, b = lanes[start], lanes[i - 1]
            out.append(f"{a}" if a == b else f"{a}-{b}")
            start = i
    return ", ".join(out)


class Scheduler:
    def __init__(self, machine, blocking: set):
        self.m = machine
        self.blocking = blocking
        self.agents: list[Agent] = []

    # --- context switching ------------------------------------------------------------
    def _save(self, a: Agent):
        m = self.m
        a.context = (m.mask, m.lanes, m.span, m.env)

    def _restore(self, a: Agent):
        m = self.m
        m.mask, m.lanes, m.span, m.env = a.context

    def run(self, body) -> bool:
        """Runs body to its end (True) or to a deadlock, which is reported (False)."""
        m = self.m
        root = Agent(self.exec(body), (m.mask, m.lanes, m.span, m.env))
        self.agents = [root]
        current = root
        try:
            while current is not None:
                wait, current.wait = current.wait, None
                self._restore(current)
                if isinstance(wait, Join):      # finished children are of no more use
                    self.agents = [a for a in self.agents if a not in wait.children]
                elif wait is not None and wait.on_pass is not None:
                    wait.on_pass()
                try:
                    request = next(current.gen)
                except StopIteration:
                    request, current.done = None, True
                self._save(current)
                if isinstance(request, Fork):
                    children = [Agent(self._branch(b, live), (m.mask, m.lanes, m.span,
                                                              dict(m.env)))
                                for b, live in request.branches]
                    at = self.agents.index(current) + 1
                    self.agents[at:at] = children
                    current.wait = Join(children)
                elif request is not None:
                    current.wait = request
                current = self._next(current)
            return root.done or self._deadlock()
        finally:
            self._restore(root)
            for a in self.agents:
                if not a.done:
                    a.gen.close()

    def _next(self, current: Agent):
        """The agent to run: the current one while it is not blocked; else, round robin after
        it, one whose wait has passed, then one that handed over, then the current one."""
        agents = self.agents
        if not current.done and current.wait is None:
            return current
        i = agents.index(current)
        others = [a for a in agents[i + 1:] + agents[:i]
                  if not a.done and (a.wait is None or a.wait.ready())]
        for a in others:
            if not isinstance(a.wait, Handover):
                return a
        if others:
            return others[0]
        return current if not current.done and current.wait.ready() else None

    def _deadlock(self) -> bool:
        m = self.m
        # agents that handed over are always ready, so none is left here
        waits = [a.wait for a in self.agents if not a.done and not isinstance(a.wait, Join)]
        if not waits:
            return True
        summary = "; ".join(f"threads {_ranges(w.lanes)} wait at "
                            f"{Site(w.op, w.buffer, w.span).where()} for {w.buffer}"
                            for w in waits)
        for w in waits:
            site = Site(w.op, w.buffer, w.span)
            m.reports.add("deadlock", f"{w.buffer}: threads {_ranges(w.lanes)} wait at "
                          f"{site.where()} ({w.op}) for {w.what()}; every live thread of the "
                          f"block is blocked ({summary})", w.buffer,
                          tuple(int(t) for t in w.lanes), (site,))
        return False

    # --- the executor of statements that may block --------------------------------------
    def exec(self, s):
        m = self.m
        if id(s) not in self.blocking:
            m.exec(s)
            return
        outer = m.span
        if s.span is not None:
            m.span = s.span
        try:
            if isinstance(s, SeqStmt):
                for x in s.stmts:
                    yield from self.exec(x)
            elif isinstance(s, For):
                for _ in m.iterations(s):
                    yield from self.exec(s.body)
            elif isinstance(s, IfThenElse):
                yield from self._if(s)
            elif isinstance(s, Kernel):
                yield from self.exec(s.body)
            else:
                yield from self._blocking_call(s.value)
        finally:
            m.span = outer

    def _if(self, s: IfThenElse):
        m = self.m
        c = np.asarray(m.ev.eval(s.cond, m.mask), dtype=bool)
        if c.ndim == 0:
            branch = s.then_body if c else s.else_body
            if branch is not None:
                yield from self.exec(branch)
            return
        c = np.broadcast_to(c, (m.T,))
        sides = [(body, live) for body, live in
                 ((s.then_body, c if m.mask is None else m.mask & c),
                  (s.else_body, ~c if m.mask is None else m.mask & ~c))
                 if body is not None and live.any()]
        if len(sides) == 2:
            # Each warpgroup of a side goes on by itself, as on the GPU, where warpgroups never
            # reconverge: consumer warpgroups may take turns (a warpgroup waiting on a barrier
            # another one arrives on only after it).
            yield Fork([(body, part) for body, live in sides for part in _warpgroups(live)])
        elif sides:
            yield from self._branch(*sides[0])

    def _branch(self, body, live):
        with self.m.only(live):
            yield from self.exec(body)

    def _blocking_call(self, call: Call):
        m = self.m
        if call.name in HANDOVER:
            m.ev.eval(call, m.mask)
            if len(self.agents) > 1:
                yield Handover()
            return
        args = [m.ev.eval(a, m.mask) for a in call.args]
        if call.name == MBARRIER_WAIT_PARITY.name:
            wait = m.barriers.wait_request(*args)
        else:
            wait = m.barriers.named_arrive(*args)
        if wait is not None:
            yield wait


__all__ = ["Scheduler", "blocking_statements", "BLOCKING"]
