"""The fuzzer's description of a program: one frozen dataclass per program kind.

A spec says what the program computes, in terms both the renderer (render.py: TileLang source)
and the reference (reference.py: numpy) read independently. Fields that the shrinker may
simplify carry `simpler`: the values it tries in its stead, simplest first. Tuples of specs
(element-wise steps, reductions, launches) shrink by dropping members.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def simpler(*values, default=None):
    """A field whose shrink candidates are `values` (tried in order)."""
    return field(default=default, metadata={"simpler": values})


@dataclass(frozen=True)
class Step:
    """One element-wise update `v = op(v, w)` of the working tile (numerics.STEPS and
    render.STEP_SOURCE name the same ops); `new_loop` starts another T.Parallel nest."""
    op: str
    const: float = 1.0
    new_loop: bool = simpler(False, default=False)


@dataclass(frozen=True)
class Tiled:
    """What most kinds share: the launches' sizes (one tuple per launch, in the order of
    SIZE_NAMES; several launches make a symbolic program), a (bm, bn) tile per block and the
    block's threads."""
    sizes: tuple
    bm: int = simpler(8, 16)
    bn: int = simpler(8, 16, 32)
    threads: int = simpler(32, 64, 128)


@dataclass(frozen=True)
class Elementwise(Tiled):
    """Y = steps(X, W) element by element, staged in fragments, shared tiles or read straight
    from global memory inside T.Parallel."""
    x_dtype: str = simpler("float32")
    w_dtype: str = simpler("float32")
    work_dtype: str = simpler("float32")
    y_dtype: str = simpler("float32")
    staging: str = simpler("fragment", "shared")   # or "global"
    via_shared: bool = simpler(False)              # fragments loaded through a shared tile
    steps: tuple = ()
    symbolic: bool = simpler(False)
    w_scope: str = simpler("")                     # W's tile when not the staging's scope
    # (bm, bn, threads) of a second launch: the first stores into a workspace (T.alloc_global)
    # that the second copies to Y with these tiles
    relaunch: tuple = simpler(())
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "elementwise"


@dataclass(frozen=True)
class Reduction:
    op: str                          # sum, max, min, abssum, absmax
    dim: int
    clear: bool = simpler(True)
    init: str = simpler("fill")      # clear=False starts from: "fill" (init_value) or "tensor"
    init_value: float = 0.5
    broadcast: bool = simpler(False)  # subtract the result back from the tile afterwards


@dataclass(frozen=True)
class Reduce(Tiled):
    """Each block reduces its (bm, bn) tile of X (zeros past the tensor's edge); one output
    tensor per reduction, indexed by the block along the reduced dimension."""
    x_dtype: str = simpler("float32")
    work_dtype: str = simpler("float32")
    y_dtype: str = simpler("float32")
    via_shared: bool = simpler(False)
    pre_steps: tuple = ()
    reductions: tuple = ()
    symbolic: bool = simpler(False)
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "reduce"


@dataclass(frozen=True)
class CumSum(Tiled):
    """Y = inclusive prefix sums of each (bm, bn) tile of X along dim."""
    dtype: str = simpler("float32")
    scope: str = simpler("fragment")   # or "shared"
    dim: int = simpler(0)
    reverse: bool = simpler(False)
    separate_dst: bool = simpler(False)
    symbolic: bool = simpler(False)
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "cumsum"


@dataclass(frozen=True)
class Copy(Tiled):
    """Y = X tile by tile through a chain of on-chip tiles, each converting to its dtype."""
    x_dtype: str = simpler("float32")
    y_dtype: str = simpler("float32")
    path: tuple = ()                   # ((scope, dtype), ...) between X and Y
    slices: bool = simpler(False)      # X[a:b, c:d] instead of the tile origin X[a, c]
    one_dim: bool = simpler(False)     # 1-d tensors (sizes hold (N,)); bm is unused
    option: str = simpler("")          # keyword text of the copies in and out of global
    symbolic: bool = simpler(False)
    batch: int = simpler(0)            # > 0: 3-d tensors (batch, M, N), one grid z per batch
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "copy"


@dataclass(frozen=True)
class Gemm:
    """C = op(A) @ op(B) over a K loop of ceil(K / bk) steps, then an optional scale."""
    sizes: tuple                       # ((M, N, K), ...)
    bm: int = simpler(16, 32)
    bn: int = simpler(8, 16, 32)
    bk: int = simpler(16, 32)
    threads: int = simpler(32, 64, 128)
    a_dtype: str = simpler("float16")
    b_dtype: str = simpler("float16")
    accum: str = simpler("float32")
    c_dtype: str = simpler("float32")
    trans_A: bool = simpler(False)
    trans_B: bool = simpler(False)
    a_in_registers: bool = simpler(False)
    policy: str = simpler("Square")
    loop: str = simpler("serial")      # "pipelined" or "serial"
    num_stages: int = simpler(0, 1)
    clear_accum: bool = simpler(False)  # clear_accum=True on the gemm instead of T.clear
    scale: float = simpler(1.0, default=1.0)
    store_via_shared: bool = simpler(False)
    symbolic: bool = simpler(False)
    swizzle: tuple = simpler(())         # T.use_swizzle(panel_size, order)
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "gemm"


@dataclass(frozen=True)
class Attention:
    """O = softmax(Q K^T * scale) V, a block of bm query rows per block streaming bn-key tiles
    of K and V with an online softmax; keys past N (and, causal, after the query) masked."""
    sizes: tuple                       # ((M, N),): queries, keys
    d: int = simpler(16)
    dv: int = simpler(16)
    bm: int = simpler(16, 32)
    bn: int = simpler(16, 32)
    threads: int = simpler(32, 64, 128)
    dtype: str = simpler("float16")
    policy_qk: str = simpler("FullRow")   # the scores' gemm
    policy_pv: str = simpler("FullRow")   # the output's gemm
    p_in_registers: bool = simpler(False)
    num_stages: int = simpler(0, 1)
    scale: float = 0.5
    causal: bool = simpler(False)
    symbolic: bool = simpler(False)
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "attention"


@dataclass(frozen=True)
class Pipelined(Tiled):
    """A T.Pipelined loop streaming (bm, bn) tiles of X (rows of blocks) into accumulators;
    `trips` is the trip count (a literal, or the scalar argument `count` when dynamic)."""
    trips: int = simpler(0, 1)
    dynamic_trips: bool = simpler(False)
    num_stages: int = simpler(1)
    x_dtype: str = simpler("float32")
    through_fragment: bool = simpler(False)
    body: tuple = ()                   # of "acc_add", "acc_max", "row_sum", "store"
    acc_init: float = 0.25
    indexed: bool = simpler(False)     # tile k is column tile Idx[k], not k
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "pipelined"
    symbolic = False


@dataclass(frozen=True)
class AtomicUpdate:
    op: str                            # add, max, min
    form: str                          # "tile", "scalar", "shared"
    row_mod: int = simpler(1, 2)       # scalar forms: Y[i % row_mod, (j * col_mul) % cols]
    col_mul: int = simpler(1)
    shift_rows: bool = simpler(False)  # tile form: blocks add at (by % 2) * bm
    use_tma: bool = simpler(False)     # tile form from shared memory: TMA adds on sm_90


@dataclass(frozen=True)
class Atomic(Tiled):
    """Y (given, not poisoned) updated atomically by every block's (bm, bn) tile of X."""
    dtype: str = simpler("float32")
    source_scope: str = simpler("fragment")   # or "shared"
    update: AtomicUpdate = None
    configs: tuple = ()                # ((pass config, value), ...) to compile with
    kind = "atomic"
    symbolic = False


@dataclass(frozen=True)
class ElementAccess:
    """One block: X into a fragment, then single elements written and read outside any
    T.Parallel (`f[i, j] = c`, `P[k] = f[i, j]`), then the fragment stored to Y."""
    sizes: tuple                       # ((bm, bn),)
    threads: int = simpler(32, 64, 128)
    dtype: str = simpler("float32")
    accesses: tuple = ()               # (("write", i, j, value) | ("read", i, j, k), ...)
    kind = "element_access"
    symbolic = False
    configs = ()


KINDS = (Elementwise, Reduce, CumSum, Copy, Gemm, Attention, Pipelined, Atomic, ElementAccess)
SIZE_NAMES = {"elementwise": ("M", "N"), "reduce": ("M", "N"), "cumsum": ("M", "N"),
              "copy": ("M", "N"), "gemm": ("M", "N", "K"), "attention": ("M", "N"),
              "pipelined": ("M", "L"),
              "atomic": ("M", "N", "R", "C"), "element_access": ("M", "N")}


@dataclass(frozen=True)
class Tensor:
    """A tensor parameter. dims: a size name, an int, or ("cdiv", name, block); role: "in"
    (random), "out" (poisoned before the run) or "inout" (random, updated in place);
    `bound` (a dim) makes an input of indices, each in [0, bound)."""
    name: str
    dims: tuple
    dtype: str
    role: str = "in"
    bound: object = None


def size_names(spec) -> tuple:
    names = SIZE_NAMES[spec.kind]
    return names[1:] if spec.kind == "copy" and spec.one_dim else names


def launch_sizes(spec) -> list[dict]:
    """{size name: value} for each launch of the program."""
    return [dict(zip(size_names(spec), s)) for s in spec.sizes]


def dim_value(d, sizes: dict) -> int:
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        return sizes[d]
    _, name, block = d
    return -(-sizes[name] // block)


def shape(tensor: Tensor, sizes: dict) -> tuple:
    return tuple(dim_value(d, sizes) for d in tensor.dims)


def uses_w(steps) -> bool:
    return any(s.op.endswith("_w") or s.op == "select" for s in steps)


def tensors(spec) -> list[Tensor]:
    """The program's tensor parameters, in order."""
    k = spec.kind
    if k == "elementwise":
        w = [Tensor("W", ("M", "N"), spec.w_dtype)] if uses_w(spec.steps) else []
        return [Tensor("X", ("M", "N"), spec.x_dtype), *w,
                Tensor("Y", ("M", "N"), spec.y_dtype, "out")]
    if k == "reduce":
        out = [Tensor("X", ("M", "N"), spec.x_dtype)]
        for n, r in enumerate(spec.reductions):
            dims = (("cdiv", "N", spec.bn), "M") if r.dim == 1 else (("cdiv", "M", spec.bm), "N")
            if not r.clear and r.init == "tensor":
                out.append(Tensor(f"I{n}", dims, spec.work_dtype))
            out.append(Tensor(f"Y{n}", dims, spec.y_dtype, "out"))
        if any(r.broadcast for r in spec.reductions):
            out.append(Tensor("Z", ("M", "N"), spec.y_dtype, "out"))
        return out
    if k == "cumsum":
        return [Tensor("X", ("M", "N"), spec.dtype), Tensor("Y", ("M", "N"), spec.dtype, "out")]
    if k == "copy":
        dims = ("N",) if spec.one_dim else (spec.batch, "M", "N") if spec.batch else ("M", "N")
        return [Tensor("X", dims, spec.x_dtype), Tensor("Y", dims, spec.y_dtype, "out")]
    if k == "gemm":
        return [Tensor("A", ("K", "M") if spec.trans_A else ("M", "K"), spec.a_dtype),
                Tensor("B", ("N", "K") if spec.trans_B else ("K", "N"), spec.b_dtype),
                Tensor("C", ("M", "N"), spec.c_dtype, "out")]
    if k == "attention":
        return [Tensor("Q", ("M", spec.d), spec.dtype), Tensor("K", ("N", spec.d), spec.dtype),
                Tensor("V", ("N", spec.dv), spec.dtype),
                Tensor("O", ("M", spec.dv), spec.dtype, "out")]
    if k == "pipelined":
        out = [Tensor("X", ("M", "L"), spec.x_dtype)]
        if spec.indexed:
            out.append(Tensor("Idx", (5,), "int32", bound=("cdiv", "L", spec.bn)))
        if {"acc_add", "acc_max"} & set(spec.body):
            out.append(Tensor("Y", ("M", spec.bn), "float32", "out"))
        if "row_sum" in spec.body:
            out.append(Tensor("S", ("M",), "float32", "out"))
        if "store" in spec.body:
            out.append(Tensor("Z", ("M", "L"), spec.x_dtype, "out"))
        return out
    if k == "atomic":
        return [Tensor("X", ("M", "N"), spec.dtype), Tensor("Y", ("R", "C"), spec.dtype, "inout")]
    n_reads = sum(1 for a in spec.accesses if a[0] == "read")
    return [Tensor("X", ("M", "N"), spec.dtype), Tensor("Y", ("M", "N"), spec.dtype, "out"),
            Tensor("P", (max(n_reads, 1),), spec.dtype, "out")]


def label(spec) -> str:
    """The kind a spec is counted under: symbolic programs are a kind of their own."""
    return "symbolic" if spec.symbolic else spec.kind
