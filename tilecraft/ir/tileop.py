"""Tile-operator nodes: whole-tile operations the compiler lowers onto threads.

Each node says which buffers it reads and writes (the FTG's dataflow edges come from that).
What an op means everywhere else is its contract (TileOpContract): its text in the printer,
its effect on the reference interpreter and its charges in the cost model, written in one
module of tilecraft/ops and registered here for the node class. The registry lives in ir, the
bottom layer, so that the printer, the interpreter and the cost model can look a contract up
without importing the modules that define them (those import the interpreter and the cost
model's helpers). A backend keeps its own table of lowerings per node class.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable

from .buffer import Buffer, BufferRegion, is_shared
from .expr import Const, Expr
from .stmt import Stmt
from ..errors import Span, TileError


class GemmWarpPolicy(IntEnum):
    """How a block's warps are split between the M and N dimensions of a gemm."""
    Square = 0
    FullRow = 1
    FullCol = 2


class TileOp(Stmt):
    op_name = "tileop"

    def reads(self) -> tuple:
        return ()

    def writes(self) -> tuple:
        return ()


@dataclass(frozen=True)
class TileOpContract:
    """What a tile op means, target-neutrally.

    text(printer, op) -> str: the op as the user's T.* call (ir/printer.py);
    interpret(machine, op, mask): its effect on the reference interpreter's numpy arrays
        (interp/machine.py); mask marks the live lanes inside a T.Parallel nest, or is None;
    charge(op, count, gemm_plan): fills count (analysis/counts.py's NodeCount) with what one
        execution moves and computes; gemm_plan(gemm, m, n) -> (instruction, split along M,
        split along N) answers a gemm's instruction and warp split.
    """
    text: Callable
    interpret: Callable
    charge: Callable


_CONTRACTS: dict = {}


def register_contract(node_class: type, contract: TileOpContract):
    """Make `contract` the meaning of every node of exactly `node_class`."""
    if node_class in _CONTRACTS:
        raise ValueError(f"{node_class.__name__} already has a contract")
    _CONTRACTS[node_class] = contract


def contract_of(op) -> TileOpContract:
    """The contract of a tile-op node. The contracts register when tilecraft.ops is imported,
    which importing tilecraft does."""
    try:
        return _CONTRACTS[type(op)]
    except KeyError:
        raise TileError(f"internal: T.{op.op_name} ({type(op).__name__}) has no contract; "
                        "register one in tilecraft/ops", getattr(op, "span", None)) from None


def has_contract(op) -> bool:
    return type(op) in _CONTRACTS


def registered_contracts() -> dict:
    """Node class -> contract, for every op registered so far."""
    return dict(_CONTRACTS)


@dataclass(eq=False, repr=False)
class Copy(TileOp):
    src: BufferRegion
    dst: BufferRegion
    annotations: dict = field(default_factory=dict)
    span: Span | None = field(default=None, compare=False)
    op_name = "copy"

    def reads(self): return (self.src.buffer,)
    def writes(self): return (self.dst.buffer,)


@dataclass(eq=False, repr=False)
class Gemm(TileOp):
    """C (+)= op(A) @ op(B); transpose_B means B is stored [N, K]."""
    A: BufferRegion
    B: BufferRegion
    C: BufferRegion
    transpose_A: bool = False
    transpose_B: bool = False
    policy: GemmWarpPolicy = GemmWarpPolicy.Square
    clear_accum: bool = False
    k_pack: int = 1
    wg_wait: int = 0
    # Which instruction lowers it ("mma", "wgmma", or "fma": scalar multiply-adds on the CUDA
    # cores); infer_instructions decides.
    instruction: str = ""
    span: Span | None = field(default=None, compare=False)
    op_name = "gemm"

    def reads(self):
        return (self.A.buffer, self.B.buffer) + (() if self.clear_accum else (self.C.buffer,))

    def writes(self): return (self.C.buffer,)

    def multiply_dtype(self) -> str:
        """The operand type the products are computed in. As in TileLang, float32 operands
        accumulated in float32 multiply on the TF32 tensor cores (10-bit mantissa products,
        float32 sums), like tfloat32 ones: a float32 T.gemm is a tensor-core gemm. A gemm
        pinned to "fma" (the pass config tl.exact_float32_gemm), or whose K is not a multiple
        of 8, multiplies in float32 (scalar FMAs)."""
        a, b = self.A.buffer.dtype.name, self.B.buffer.dtype.name
        if not ({a, b} <= {"float32", "tfloat32"} and self.C.buffer.dtype.name == "float32"):
            return a
        # The TF32 instructions take k in steps of 8 and read 16-byte rows of a K-contiguous
        # operand: a K off that grid, or a row that starts between 16-byte chunks, stays
        # float32, as does a gemm pinned to scalar FMAs.
        if self.instruction == "fma" or \
                None in (self.A.static_extents(), self.B.static_extents()) or \
                self.dims()[2] % 8 or not (_chunk_aligned(self.A) and _chunk_aligned(self.B)):
            return "float32"
        return "tfloat32"

    def dims(self) -> tuple:
        """(M, N, K) of the product, from the operands' static extents."""
        a, b = matrix_extents(self.A), matrix_extents(self.B)
        m, k = (a[1], a[0]) if self.transpose_A else (a[0], a[1])
        n = b[0] if self.transpose_B else b[1]
        return m, n, k


def _chunk_aligned(region: BufferRegion) -> bool:
    """The region's rows start on 16-byte chunks of its 4-byte elements where its start along
    the contiguous dimension is known (a start that is an expression is taken as aligned, as
    for every tensor-core operand)."""
    start = region.starts[-1]
    return not is_shared(region.buffer.scope) or not isinstance(start, Const) or \
        int(start.value) % 4 == 0


def matrix_extents(region: BufferRegion) -> list:
    """The 2-d extents of a gemm operand: its non-unit extents, or the last two when a
    dimension of the matrix itself is 1 (a single row or column)."""
    ext = list(region.static_extents())
    non_unit = [e for e in ext if e != 1]
    return non_unit if len(non_unit) == 2 else ext[-2:]


REDUCE_KINDS = ("max", "min", "sum", "abssum", "absmax")


@dataclass(eq=False, repr=False)
class Reduce(TileOp):
    kind: str
    src: BufferRegion
    dst: BufferRegion
    dim: int
    clear: bool = True
    span: Span | None = field(default=None, compare=False)
    # insert_barriers clears it where a reduction across warps needs no barrier after reading
    # its partials: another barrier always comes before it runs again (tileops/reduce.py).
    trailing_barrier: bool = True
    op_name = "reduce"

    def reads(self):
        return (self.src.buffer,) + (() if self.clear else (self.dst.buffer,))

    def writes(self): return (self.dst.buffer,)


@dataclass(eq=False, repr=False)
class CumSum(TileOp):
    src: BufferRegion
    dst: BufferRegion
    dim: int = 0
    reverse: bool = False
    span: Span | None = field(default=None, compare=False)
    op_name = "cumsum"

    def reads(self): return (self.src.buffer,)
    def writes(self): return (self.dst.buffer,)


@dataclass(eq=False, repr=False)
class Fill(TileOp):
    dst: BufferRegion
    value: Expr
    span: Span | None = field(default=None, compare=False)
    op_name = "fill"

    def writes(self): return (self.dst.buffer,)


ATOMIC_KINDS = ("add", "max", "min")


@dataclass(eq=False, repr=False)
class Atomic(TileOp):
    """dst op= value, atomically; value is a scalar Expr or (tile form) a BufferRegion.
    annotations: use_tma (asked for by the user), instruction ("tma" once chosen)."""
    kind: str
    dst: BufferRegion
    value: object
    span: Span | None = field(default=None, compare=False)
    annotations: dict = field(default_factory=dict)
    op_name = "atomic"

    def reads(self):
        return (self.dst.buffer,) + ((self.value.buffer,) if isinstance(self.value, BufferRegion)
                                     else ())

    def writes(self): return (self.dst.buffer,)


@dataclass(eq=False, repr=False)
class AnnotateLayout(TileOp):
    layouts: dict  # Buffer -> layout object (or a callable index map)
    span: Span | None = field(default=None, compare=False)
    op_name = "annotate_layout"


@dataclass(eq=False, repr=False)
class UseSwizzle(TileOp):
    """Rasterize blocks in panels of `panel_size` for L2 reuse (order 'row' or 'column')."""
    panel_size: int
    order: str = "row"
    enable: bool = True
    span: Span | None = field(default=None, compare=False)
    op_name = "use_swizzle"


@dataclass(eq=False, repr=False)
class Print(TileOp):
    """T.print: a scalar expression or a whole buffer, with a message prefix."""
    value: object  # Expr or Buffer
    msg: str = ""
    span: Span | None = field(default=None, compare=False)
    op_name = "print"

    def reads(self):
        return (self.value,) if isinstance(self.value, Buffer) else ()
