"""The fused tile graph (FTG, paper section 4.1): a view of one kernel as a dataflow graph.

Nodes are tile operators and element-wise regions (a T.Parallel nest, a lone store, an
extern call), in program order; edges are buffer def-use: a flow edge from the last writer of a
buffer to each later reader, an anti edge from a reader to the next writer, an output edge
between successive writers. Inside a loop, uses that reach around the back edge (a buffer read
at the top of the body and written further down) are marked loop_carried: these are what
pipelining must respect.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .buffer import Buffer
from .expr import BufferLoad
from .stmt import BufferStore, Evaluate, For, IfThenElse, Kernel, SeqStmt, Allocate
from .tileop import TileOp
from .visitor import walk


@dataclass(eq=False)
class FTGNode:
    index: int
    stmt: object
    kind: str
    reads: tuple
    writes: tuple
    loops: tuple  # enclosing serial/pipelined loops, outermost first

    @property
    def span(self):
        return self.stmt.span


@dataclass(frozen=True)
class FTGEdge:
    src: int
    dst: int
    buffer: Buffer = field(compare=False)
    kind: str  # "flow" (read after write), "anti" (write after read), "output" (write after write)
    loop_carried: bool = False


def _unique(buffers) -> tuple:
    seen, out = set(), []
    for b in buffers:
        if id(b) not in seen:
            seen.add(id(b))
            out.append(b)
    return tuple(out)


def element_accesses(stmt) -> tuple[tuple, tuple]:
    """The buffers read and written anywhere under stmt (tile ops and element loads and
    stores), each once, in first-use order."""
    reads, writes = [], []
    for n in walk(stmt):
        if isinstance(n, BufferLoad):
            reads.append(n.buffer)
        elif isinstance(n, BufferStore):
            writes.append(n.buffer)
        elif isinstance(n, TileOp):
            reads.extend(n.reads())
            writes.extend(n.writes())
    return _unique(reads), _unique(writes)


class FTG:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.nodes: list[FTGNode] = []
        self.edges: list[FTGEdge] = []
        self._collect(kernel.body, ())
        self._connect()

    # --- nodes ----------------------------------------------------------------
    def _add(self, stmt, kind, reads, writes, loops):
        self.nodes.append(FTGNode(len(self.nodes), stmt, kind, tuple(reads), tuple(writes),
                                  loops))

    def _collect(self, s, loops):
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self._collect(x, loops)
        elif isinstance(s, For) and s.kind != "parallel":
            self._collect(s.body, loops + (s,))
        elif isinstance(s, IfThenElse):
            # The condition is read where the branch is taken; branches keep program order.
            cond_reads = [n.buffer for n in walk(s.cond) if isinstance(n, BufferLoad)]
            if cond_reads:
                self._add(s, "branch", _unique(cond_reads), (), loops)
            self._collect(s.then_body, loops)
            if s.else_body is not None:
                self._collect(s.else_body, loops)
        elif isinstance(s, TileOp):
            reads, writes = element_accesses(s)
            self._add(s, s.op_name, reads, writes, loops)
        elif isinstance(s, For):
            reads, writes = element_accesses(s)
            self._add(s, "parallel", reads, writes, loops)
        elif isinstance(s, (BufferStore, Evaluate)):
            reads, writes = element_accesses(s)
            self._add(s, "store" if isinstance(s, BufferStore) else "call", reads, writes, loops)
        elif isinstance(s, Allocate):
            pass

    # --- edges ----------------------------------------------------------------
    def _connect(self):
        self._scan(self.nodes, carried=False)
        # A second pass over each loop's nodes finds the uses that wrap around its back edge.
        loops = {id(l): l for n in self.nodes for l in n.loops}
        for loop_id in loops:
            body = [n for n in self.nodes if any(id(l) == loop_id for l in n.loops)]
            self._scan(body + body, carried=True, first_round=len(body))

    def _scan(self, nodes, carried: bool, first_round: int | None = None):
        last_writer: dict[int, FTGNode] = {}
        readers: dict[int, list] = {}
        seen = set((e.src, e.dst, id(e.buffer), e.kind) for e in self.edges)
        for position, n in enumerate(nodes):
            wrapped = first_round is not None and position >= first_round
            for b in n.reads:
                w = last_writer.get(id(b))
                if w is not None and (not carried or wrapped and w.index >= n.index):
                    self._edge(w, n, b, "flow", carried and wrapped, seen)
                readers.setdefault(id(b), []).append(n)
            for b in n.writes:
                w = last_writer.get(id(b))
                if w is not None and w is not n and (not carried or wrapped and w.index >= n.index):
                    self._edge(w, n, b, "output", carried and wrapped, seen)
                for r in readers.get(id(b), []):
                    if r is not n and (not carried or wrapped and r.index >= n.index):
                        self._edge(r, n, b, "anti", carried and wrapped, seen)
                last_writer[id(b)] = n
                readers[id(b)] = []

    def _edge(self, src, dst, buffer, kind, loop_carried, seen):
        key = (src.index, dst.index, id(buffer), kind)
        if key in seen:
            return
        seen.add(key)
        self.edges.append(FTGEdge(src.index, dst.index, buffer, kind, loop_carried))

    # --- queries ----------------------------------------------------------------
    def producers(self, node: FTGNode) -> list[FTGNode]:
        return [self.nodes[e.src] for e in self.edges if e.dst == node.index and e.kind == "flow"]

    def consumers(self, node: FTGNode) -> list[FTGNode]:
        return [self.nodes[e.dst] for e in self.edges if e.src == node.index and e.kind == "flow"]

    def edges_of(self, buffer: Buffer) -> list[FTGEdge]:
        return [e for e in self.edges if e.buffer is buffer]

    def describe(self) -> str:
        """One line per node and per edge; stable, for dumps and tests."""
        lines = []
        for n in self.nodes:
            line = n.span.line if n.span is not None else "?"
            lines.append(f"n{n.index} {n.kind} reads[{', '.join(b.name for b in n.reads)}] "
                         f"writes[{', '.join(b.name for b in n.writes)}] (line {line})")
        for e in self.edges:
            tag = " loop-carried" if e.loop_carried else ""
            lines.append(f"n{e.src} -> n{e.dst} {e.kind} {e.buffer.name}{tag}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        out = ["digraph ftg {"]
        for n in self.nodes:
            out.append(f'  n{n.index} [label="{n.kind}"];')
        for e in self.edges:
            style = ", style=dashed" if e.loop_carried else ""
            out.append(f'  n{e.src} -> n{e.dst} [label="{e.buffer.name} ({e.kind})"{style}];')
        out.append("}")
        return "\n".join(out)


def build_ftgs(func) -> list[FTG]:
    """One FTG per T.Kernel launch of a PrimFunc."""
    return [FTG(k) for k in func.kernels()]
