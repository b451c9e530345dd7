"""A spec as TileLang source text, and that text built into a prim_func.

What the fuzzer runs is exactly the source it prints: `build` executes the rendered text, so a
failing program pasted into a test reproduces the failure. Each program is a factory
`program()` returning the prim_func; static sizes are plain numbers, symbolic ones come from
T.symbolic and are bound by each launch's tensors.
"""
from __future__ import annotations

import itertools
import linecache

from .spec import Tensor, launch_sizes, size_names, tensors, uses_w

STEP_SOURCE = {
    "scale": "{v} * {c}", "shift": "{v} + {c}", "max_c": "T.max({v}, {c})",
    "min_c": "T.min({v}, {c})", "clamp": "T.clamp({v}, -{c}, {c})", "floordiv": "{v} // {c}",
    "mod": "{v} % {c}", "truncdiv": "{v} / {c}", "add_w": "{v} + {w}", "sub_w": "{v} - {w}",
    "mul_w": "{v} * {w}", "max_w": "T.max({v}, {w})", "div_w": "{v} / (T.abs({w}) + 0.5)",
    "select": "T.if_then_else({v} > {c}, {v}, {w})", "abs": "T.abs({v})", "neg": "-{v}",
    "exp": "T.exp(T.min({v}, 2.0))", "exp2": "T.exp2(T.min({v}, 3.0))",
    "log": "T.log(T.abs({v}) + 1.0)", "log2": "T.log2(T.abs({v}) + 1.0)",
    "sqrt": "T.sqrt(T.abs({v}) + 0.25)", "rsqrt": "T.rsqrt(T.abs({v}) + 0.5)",
    "tanh": "T.tanh({v})", "sigmoid": "T.sigmoid({v})", "sin": "T.sin({v})", "cos": "T.cos({v})",
    "pow": "T.pow(T.abs({v}) + 0.5, {c})", "floor": "T.floor({v} * {c})",
    "mask_tri": "T.if_then_else({row} + {c} >= {col}, {v}, -{v})",
    "mask_edge": "T.if_then_else({col} + {c} < N, {v}, -{v})",
}
STEP_SOURCE.update({f"cast_{d}": 'T.cast({v}, "%s")' % d
                    for d in ("float16", "bfloat16", "float32", "int32")})


def step_text(step, v: str, w: str, spec, v_is_atom: bool = True) -> str:
    """One step applied to the expression v (parenthesized unless it is a load or a call);
    the constant is written as the spec holds it (an int for integer values)."""
    return STEP_SOURCE[step.op].format(v=v if v_is_atom else f"({v})", w=w, c=repr(step.const),
                                       row=f"by * {spec.bm} + i", col=f"bx * {spec.bn} + j")


def is_atom(step) -> bool:
    """Whether a step's expression is a call, which needs no parentheses around it."""
    return STEP_SOURCE[step.op].startswith("T.")


def dim_text(d) -> str:
    if isinstance(d, (int, str)):
        return str(d)
    _, name, block = d
    return f"T.ceildiv({name}, {block})"


def param_text(t: Tensor) -> str:
    dims = ", ".join(dim_text(d) for d in t.dims) + ("," if len(t.dims) == 1 else "")
    return f'{t.name}: T.Tensor(({dims}), "{t.dtype}")'


class Lines:
    """Source lines at the kernel body's indentation."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str, depth: int = 0):
        self.lines.append("    " * (2 + depth) + text)


def render(spec) -> str:
    """The spec as a Python module defining program()."""
    names = size_names(spec)
    sizes = launch_sizes(spec)[0]
    head = (f'{", ".join(names)} = T.symbolic("{", ".join(names)}")' if spec.symbolic else
            f'{", ".join(names)} = {", ".join(str(sizes[n]) for n in names)}')
    params = [param_text(t) for t in tensors(spec)]
    if spec.kind == "pipelined" and spec.dynamic_trips:
        params.insert(1, "count: T.int32")
    body = Lines()
    KERNELS[spec.kind](spec, body)
    configs = [f"PASS_CONFIGS = {dict(spec.configs)!r}", ""] if spec.configs else []
    return "\n".join(["import tilecraft.language as T", "", *configs, "", "def program():",
                      f"    {head}", "", "    @T.prim_func",
                      f"    def main({', '.join(params)}):", *body.lines,
                      "", "    return main", ""])


_built = itertools.count()


def build(source: str):
    """Execute rendered source: (its prim_func, the pass configs it compiles with). The
    frontend reads the text back through linecache, as it would a file."""
    filename = f"<fuzz program {next(_built)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {}
    # dont_inherit: this module's `from __future__ import annotations` would turn the
    # program's T.Tensor annotations into strings
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # noqa: S102
    return namespace["program"](), namespace.get("PASS_CONFIGS")


def _grid2(out: Lines, spec, m="M", n="N"):
    out(f"with T.Kernel(T.ceildiv({n}, {spec.bn}), T.ceildiv({m}, {spec.bm}), "
        f"threads={spec.threads}) as (bx, by):")


def _origin(spec) -> str:
    return f"by * {spec.bm}, bx * {spec.bn}"


def _parallel_steps(out: Lines, spec, steps, tile: str, w: str):
    """Each step a statement `tile[i, j] = ...` (stored in the tile's dtype); new_loop opens
    another T.Parallel nest."""
    for n, step in enumerate(steps):
        if n == 0 or step.new_loop:
            out(f"for i, j in T.Parallel({spec.bm}, {spec.bn}):", 1)
        out(f"{tile}[i, j] = {step_text(step, f'{tile}[i, j]', f'{w}[i, j]', spec)}", 2)


def elementwise(spec, out: Lines):
    _grid2(out, spec)
    tile = f"({spec.bm}, {spec.bn})"
    has_w = uses_w(spec.steps)
    y = "Y"
    if spec.relaunch:
        y = "Ws"
        out(f'Ws = T.alloc_global((M, N), "{spec.y_dtype}")', 1)
    if spec.staging == "global":
        at = f"by * {spec.bm} + i, bx * {spec.bn} + j"
        v, atom = f"X[{at}]", True
        for step in spec.steps:
            v, atom = step_text(step, v, f"W[{at}]", spec, atom), is_atom(step)
        out(f"for i, j in T.Parallel({spec.bm}, {spec.bn}):", 1)
        out(f"{y}[{at}] = {v}", 2)
    else:
        _staged_steps(spec, out, tile, has_w, y)
    if spec.relaunch:
        bm, bn, threads = spec.relaunch
        out(f"with T.Kernel(T.ceildiv(N, {bn}), T.ceildiv(M, {bm}), threads={threads}) as "
            "(bx, by):")
        out(f'y = T.alloc_fragment(({bm}, {bn}), "{spec.y_dtype}")', 1)
        out(f"T.copy(Ws[by * {bm}, bx * {bn}], y)", 1)
        out(f"T.copy(y, Y[by * {bm}, bx * {bn}])", 1)


def _staged_steps(spec, out: Lines, tile: str, has_w: bool, y: str):
    alloc = {"shared": "T.alloc_shared", "fragment": "T.alloc_fragment"}
    w_scope = spec.w_scope or spec.staging
    out(f'x = {alloc[spec.staging]}({tile}, "{spec.work_dtype}")', 1)
    if has_w:
        out(f'w = {alloc[w_scope]}({tile}, "{spec.w_dtype}")', 1)
    for name, tensor, dtype, scope in (("x", "X", spec.x_dtype, spec.staging),
                                       ("w", "W", spec.w_dtype, w_scope)):
        if name == "w" and not has_w:
            continue
        if spec.via_shared and scope == "fragment":
            out(f'{name}_s = T.alloc_shared({tile}, "{dtype}")', 1)
            out(f"T.copy({tensor}[{_origin(spec)}], {name}_s)", 1)
            out(f"T.copy({name}_s, {name})", 1)
        else:
            out(f"T.copy({tensor}[{_origin(spec)}], {name})", 1)
    _parallel_steps(out, spec, spec.steps, "x", "w")
    out(f"T.copy(x, {y}[{_origin(spec)}])", 1)


def reduce(spec, out: Lines):
    _grid2(out, spec)
    tile = f"({spec.bm}, {spec.bn})"
    out(f'x = T.alloc_fragment({tile}, "{spec.work_dtype}")', 1)
    if spec.via_shared:
        out(f'x_s = T.alloc_shared({tile}, "{spec.x_dtype}")', 1)
        out(f"T.copy(X[{_origin(spec)}], x_s)", 1)
        out("T.copy(x_s, x)", 1)
    else:
        out(f"T.copy(X[{_origin(spec)}], x)", 1)
    _parallel_steps(out, spec, spec.pre_steps, "x", "x")
    for n, r in enumerate(spec.reductions):
        length, at, index = ((spec.bm, f"bx, by * {spec.bm}", "i") if r.dim == 1 else
                             (spec.bn, f"by, bx * {spec.bn}", "j"))
        out(f'r{n} = T.alloc_fragment(({length},), "{spec.work_dtype}")', 1)
        if not r.clear:
            if r.init == "tensor":
                out(f"T.copy(I{n}[{at}], r{n})", 1)
            else:
                out(f"T.fill(r{n}, {r.init_value!r})", 1)
        clear = "" if r.clear else ", clear=False"
        out(f"T.reduce_{r.op}(x, r{n}, dim={r.dim}{clear})", 1)
        out(f"T.copy(r{n}, Y{n}[{at}])", 1)
        if r.broadcast:
            out(f"for i, j in T.Parallel({spec.bm}, {spec.bn}):", 1)
            out(f"x[i, j] = x[i, j] - r{n}[{index}]", 2)
    if any(r.broadcast for r in spec.reductions):
        out(f"T.copy(x, Z[{_origin(spec)}])", 1)


def cumsum(spec, out: Lines):
    _grid2(out, spec)
    alloc = "T.alloc_shared" if spec.scope == "shared" else "T.alloc_fragment"
    out(f'x = {alloc}(({spec.bm}, {spec.bn}), "{spec.dtype}")', 1)
    out(f"T.copy(X[{_origin(spec)}], x)", 1)
    reverse = ", reverse=True" if spec.reverse else ""
    if spec.separate_dst:
        out(f'y = {alloc}(({spec.bm}, {spec.bn}), "{spec.dtype}")', 1)
        out(f"T.cumsum(x, y, dim={spec.dim}{reverse})", 1)
    else:
        out(f"T.cumsum(x, dim={spec.dim}{reverse})", 1)
    out(f"T.copy({'y' if spec.separate_dst else 'x'}, Y[{_origin(spec)}])", 1)


def copy(spec, out: Lines):
    if spec.one_dim:
        out(f"with T.Kernel(T.ceildiv(N, {spec.bn}), threads={spec.threads}) as bx:")
        tile, origin = f"({spec.bn},)", f"bx * {spec.bn}"
        sliced = f"bx * {spec.bn}:(bx + 1) * {spec.bn}"
    else:
        if spec.batch:
            out(f"with T.Kernel(T.ceildiv(N, {spec.bn}), T.ceildiv(M, {spec.bm}), {spec.batch}, "
                f"threads={spec.threads}) as (bx, by, bz):")
        else:
            _grid2(out, spec)
        tile, origin = f"({spec.bm}, {spec.bn})", _origin(spec)
        sliced = f"by * {spec.bm}:(by + 1) * {spec.bm}, bx * {spec.bn}:(bx + 1) * {spec.bn}"
        if spec.batch:
            origin, sliced = f"bz, {origin}", f"bz, {sliced}"
    at = sliced if spec.slices else origin
    names = []
    # Two tile origins would be one element (X[i, j] to Y[i, j]): a direct global copy
    # names its extent by a slice.
    first = sliced if not spec.path else at
    for n, (scope, dtype) in enumerate(spec.path):
        alloc = "T.alloc_shared" if scope == "shared" else "T.alloc_fragment"
        names.append(f"t{n}")
        out(f't{n} = {alloc}({tile}, "{dtype}")', 1)
    chain = [f"X[{first}]", *names, f"Y[{at}]"]
    for n, (src, dst) in enumerate(zip(chain, chain[1:])):
        ends = n == 0 or n == len(chain) - 2
        out(f"T.copy({src}, {dst}{', ' + spec.option if spec.option and ends else ''})", 1)


def gemm(spec, out: Lines):
    bm, bn, bk = spec.bm, spec.bn, spec.bk
    _grid2(out, spec)
    if spec.swizzle:
        panel, order = spec.swizzle
        out(f'T.use_swizzle(panel_size={panel}, order="{order}")', 1)
    a_tile = f"({bk}, {bm})" if spec.trans_A else f"({bm}, {bk})"
    b_tile = f"({bn}, {bk})" if spec.trans_B else f"({bk}, {bn})"
    out(f'A_s = T.alloc_shared({a_tile}, "{spec.a_dtype}")', 1)
    out(f'B_s = T.alloc_shared({b_tile}, "{spec.b_dtype}")', 1)
    if spec.a_in_registers:
        out(f'A_f = T.alloc_fragment({a_tile}, "{spec.a_dtype}")', 1)
    out(f'C_f = T.alloc_fragment(({bm}, {bn}), "{spec.accum}")', 1)
    if not spec.clear_accum:
        out("T.clear(C_f)", 1)
    trips = f"T.ceildiv(K, {bk})"
    out(f"for k in T.Pipelined({trips}, num_stages={spec.num_stages}):" if spec.loop == "pipelined"
        else f"for k in T.serial({trips}):", 1)
    out(f"T.copy(A[{f'k * {bk}, by * {bm}' if spec.trans_A else f'by * {bm}, k * {bk}'}], A_s)", 2)
    out(f"T.copy(B[{f'bx * {bn}, k * {bk}' if spec.trans_B else f'k * {bk}, bx * {bn}'}], B_s)", 2)
    a = "A_s"
    if spec.a_in_registers:
        out("T.copy(A_s, A_f)", 2)
        a = "A_f"
    options = [f"transpose_A={spec.trans_A}", f"transpose_B={spec.trans_B}",
               f"policy=T.GemmWarpPolicy.{spec.policy}"]
    if spec.clear_accum:
        options.append("clear_accum=True")
    out(f"T.gemm({a}, B_s, C_f, {', '.join(options)})", 2)
    if spec.scale != 1.0:
        out(f"for i, j in T.Parallel({bm}, {bn}):", 1)
        out(f"C_f[i, j] = C_f[i, j] * {spec.scale!r}", 2)
    c = "C_f"
    if spec.store_via_shared:
        out(f'C_s = T.alloc_shared(({bm}, {bn}), "{spec.c_dtype}")', 1)
        out("T.copy(C_f, C_s)", 1)
        c = "C_s"
    out(f"T.copy({c}, C[by * {bm}, bx * {bn}])", 1)


def attention(spec, out: Lines):
    bm, bn, d, dv = spec.bm, spec.bn, spec.d, spec.dv
    f32 = '"float32"'
    out(f"with T.Kernel(T.ceildiv(M, {bm}), threads={spec.threads}) as bx:")
    for name, shape_text, dtype in (("q", f"{bm}, {d}", spec.dtype), ("k_s", f"{bn}, {d}",
                                    spec.dtype), ("v_s", f"{bn}, {dv}", spec.dtype)):
        out(f'{name} = T.alloc_shared(({shape_text}), "{dtype}")', 1)
    out(f"s = T.alloc_fragment(({bm}, {bn}), {f32})", 1)
    p_alloc = "T.alloc_fragment" if spec.p_in_registers else "T.alloc_shared"
    out(f'p = {p_alloc}(({bm}, {bn}), "{spec.dtype}")', 1)
    out(f"o = T.alloc_fragment(({bm}, {dv}), {f32})", 1)
    for name in ("m", "m_prev", "rescale", "row_sum", "l"):
        out(f"{name} = T.alloc_fragment(({bm},), {f32})", 1)
    out(f"T.copy(Q[bx * {bm}, 0], q)", 1)
    out("T.clear(o)", 1)
    out("T.clear(l)", 1)
    out(f"T.fill(m, -T.infinity({f32}))", 1)
    out(f"for t in T.Pipelined(T.ceildiv(N, {bn}), num_stages={spec.num_stages}):", 1)
    out(f"T.copy(K[t * {bn}, 0], k_s)", 2)
    out(f"T.copy(V[t * {bn}, 0], v_s)", 2)
    out("T.clear(s)", 2)
    first, second = (f"policy=T.GemmWarpPolicy.{p}" for p in (spec.policy_qk, spec.policy_pv))
    out(f"T.gemm(q, k_s, s, transpose_B=True, {first})", 2)
    keep = f"t * {bn} + j < N"
    if spec.causal:
        keep += f" and bx * {bm} + i >= t * {bn} + j"
    out(f"for i, j in T.Parallel({bm}, {bn}):", 2)
    out(f"s[i, j] = T.if_then_else({keep}, s[i, j] * {spec.scale!r}, -T.infinity({f32}))", 3)
    out("T.copy(m, m_prev)", 2)
    out("T.reduce_max(s, m, dim=1, clear=False)", 2)
    out(f"for i in T.Parallel({bm}):", 2)
    out("rescale[i] = T.exp(m_prev[i] - m[i])", 3)
    out(f"for i, j in T.Parallel({bm}, {bn}):", 2)
    out("s[i, j] = T.exp(s[i, j] - m[i])", 3)
    out("T.reduce_sum(s, row_sum, dim=1)", 2)
    out(f"for i in T.Parallel({bm}):", 2)
    out("l[i] = l[i] * rescale[i] + row_sum[i]", 3)
    out(f"for i, j in T.Parallel({bm}, {dv}):", 2)
    out("o[i, j] *= rescale[i]", 3)
    out("T.copy(s, p)", 2)
    out(f"T.gemm(p, v_s, o, {second})", 2)
    out(f"for i, j in T.Parallel({bm}, {dv}):", 1)
    out("o[i, j] /= l[i]", 2)
    out(f"T.copy(o, O[bx * {bm}, 0])", 1)


def pipelined(spec, out: Lines):
    bm, bn = spec.bm, spec.bn
    out(f"with T.Kernel(T.ceildiv(M, {bm}), threads={spec.threads}) as bx:")
    out(f'x_s = T.alloc_shared(({bm}, {bn}), "{spec.x_dtype}")', 1)
    src = "x_s"
    if spec.through_fragment:
        out(f'x_f = T.alloc_fragment(({bm}, {bn}), "float32")', 1)
        src = "x_f"
    body = set(spec.body)
    if {"acc_add", "acc_max"} & body:
        out(f'acc = T.alloc_fragment(({bm}, {bn}), "float32")', 1)
        out(f"T.fill(acc, {spec.acc_init!r})", 1)
    if "row_sum" in body:
        out(f'sums = T.alloc_fragment(({bm},), "float32")', 1)
        out("T.clear(sums)", 1)
    trips = "count" if spec.dynamic_trips else str(spec.trips)
    out(f"for k in T.Pipelined({trips}, num_stages={spec.num_stages}):", 1)
    column = "Idx[k]" if spec.indexed else "k"
    out(f"T.copy(X[bx * {bm}, {column} * {bn}], x_s)", 2)
    if spec.through_fragment:
        out("T.copy(x_s, x_f)", 2)
    for item in spec.body:
        if item in ("acc_add", "acc_max"):
            out(f"for i, j in T.Parallel({bm}, {bn}):", 2)
            out(f"acc[i, j] += {src}[i, j]" if item == "acc_add" else
                f"acc[i, j] = T.max(acc[i, j], {src}[i, j])", 3)
        elif item == "row_sum":
            out(f"T.reduce_sum({src}, sums, dim=1, clear=False)", 2)
        else:
            out(f"T.copy(x_s, Z[bx * {bm}, {column} * {bn}])", 2)
    if {"acc_add", "acc_max"} & body:
        out(f"T.copy(acc, Y[bx * {bm}, 0])", 1)
    if "row_sum" in body:
        out(f"T.copy(sums, S[bx * {bm}])", 1)


def atomic(spec, out: Lines):
    u = spec.update
    _grid2(out, spec)
    alloc = "T.alloc_shared" if spec.source_scope == "shared" else "T.alloc_fragment"
    out(f'x = {alloc}(({spec.bm}, {spec.bn}), "{spec.dtype}")', 1)
    out(f"T.copy(X[{_origin(spec)}], x)", 1)
    fn = f"T.atomic_{u.op}"
    if u.form == "tile":
        row = f"(by % 2) * {spec.bm}" if u.shift_rows else "0"
        out(f"{fn}(Y[{row}, 0], x{', use_tma=True' if u.use_tma else ''})", 1)
        return
    index = f"i % {u.row_mod}, (j * {u.col_mul}) % C"
    if u.form == "scalar":
        out(f"for i, j in T.Parallel({spec.bm}, {spec.bn}):", 1)
        out(f"{fn}(Y[{index}], x[i, j])", 2)
        return
    out(f'acc = T.alloc_shared((R, C), "{spec.dtype}")', 1)
    out("T.clear(acc)", 1)
    out(f"for i, j in T.Parallel({spec.bm}, {spec.bn}):", 1)
    out(f"{fn}(acc[{index}], x[i, j])", 2)
    out(f"{fn}(Y[0, 0], acc)", 1)


def element_access(spec, out: Lines):
    out(f"with T.Kernel(1, threads={spec.threads}) as bx:")
    out(f'f = T.alloc_fragment((M, N), "{spec.dtype}")', 1)
    out("T.copy(X, f)", 1)
    for access in spec.accesses:
        if access[0] == "write":
            _, i, j, value = access
            out(f"f[{i}, {j}] = {value!r}", 1)
        else:
            _, i, j, k = access
            out(f"P[{k}] = f[{i}, {j}]", 1)
    out("T.copy(f, Y)", 1)


KERNELS = {"elementwise": elementwise, "reduce": reduce, "cumsum": cumsum, "copy": copy,
           "gemm": gemm, "attention": attention, "pipelined": pipelined, "atomic": atomic,
           "element_access": element_access}
