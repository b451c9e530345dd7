"""The tile IR: data only (types, expressions, statements, buffers, tile ops, functions)."""
from .dtypes import DType, dtype
from .expr import (Binary, BufferLoad, Call, Cast, Const, Expr, Select, Unary, Var, const,
                   convert)
from .buffer import Buffer, BufferRegion
from .stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, Kernel, PrimFunc, SeqStmt,
                   Stmt, seq)
from .tileop import (AnnotateLayout, Atomic, Copy, CumSum, Fill, Gemm, GemmWarpPolicy, Print,
                     Reduce, TileOp, UseSwizzle)
