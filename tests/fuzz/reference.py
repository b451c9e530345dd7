"""What a fuzz program should compute, from its spec alone, in numpy.

`expected(spec, arrays)` gives {output name: Expect} for one launch, where arrays holds the
launch's inputs by parameter name (and the scalar `count` of a dynamic pipelined loop). Tiles
are modelled as the language defines them: a tile copied from past a tensor's edge holds
zeros, and what is stored past the edge is dropped, so each kind first pads its inputs to
whole tiles and crops its outputs.
"""
from __future__ import annotations

import numpy as np

from .numerics import (UNIT, Expect, Index, Value, apply_step, is_int, log2_ceil, round_to,
                       tiles_of)


def _pad(value: Value, shape: tuple) -> Value:
    pads = [(0, s - n) for n, s in zip(value.v.shape, shape)]
    return Value(np.pad(value.v, pads), value.dtype, np.pad(value.err, pads),
                 np.pad(value.unreliable, pads))


def _map(value: Value, fn, dtype=None) -> Value:
    """fn applied alike to the values, their error bounds and their unreliable marks."""
    return Value(fn(value.v), dtype or value.dtype, fn(value.err), fn(value.unreliable))


def _steps(value: Value, steps, w: Value | None, store_dtype: str | None, n_cols: int) -> Value:
    at = Index.of(value.v.shape, n_cols)
    for step in steps:
        value = apply_step(value, step.op, step.const, w, at)
        if store_dtype is not None:
            value = value.converted(store_dtype)
    return value


def elementwise(spec, a):
    x = Value.exact(a["X"], spec.x_dtype)
    w = Value.exact(a["W"], spec.w_dtype) if "W" in a else None
    if spec.staging == "global":  # one expression, in the dtypes its operations promote to
        return {"Y": Expect.of(_steps(x, spec.steps, w, None, x.v.shape[1]), spec.y_dtype)}
    v = _steps(x.converted(spec.work_dtype), spec.steps, w, spec.work_dtype, x.v.shape[1])
    return {"Y": Expect.of(v, spec.y_dtype)}


_REDUCE = {"sum": np.sum, "abssum": np.sum, "max": np.max, "absmax": np.max, "min": np.min}
_COMBINE = {"sum": np.add, "abssum": np.add, "max": np.maximum, "absmax": np.maximum,
            "min": np.minimum}


def _reduce(x: Value, op: str, axis: int, init: Value | None) -> Value:
    src = np.abs(x.v) if op.startswith("abs") else x.v
    out = _REDUCE[op](src, axis=axis, keepdims=True)
    if op in ("sum", "abssum"):
        n = x.v.shape[axis]
        err = (np.sum(np.abs(x.v), axis=axis, keepdims=True) * UNIT[x.dtype] * (log2_ceil(n) + 2)
               + np.sum(x.err, axis=axis, keepdims=True))
    else:
        err = np.max(x.err, axis=axis, keepdims=True)
    bad = np.any(x.unreliable, axis=axis, keepdims=True)
    if init is not None:
        out = _COMBINE[op](init.v, out)
        err, bad = err + init.err, bad | init.unreliable
    rounded = round_to(out, x.dtype)
    if op in ("sum", "abssum"):
        err = err + UNIT[x.dtype] * np.abs(rounded)
    return Value(rounded, x.dtype, err, bad)


def reduce(spec, a):
    bm, bn = spec.bm, spec.bn
    M, N = a["X"].shape
    xp = tiles_of(a["X"], (bm, bn))
    gm, gn = xp.shape[0] // bm, xp.shape[1] // bn
    x = Value.exact(xp, spec.x_dtype).converted(spec.work_dtype)
    x = _steps(x, spec.pre_steps, None, spec.work_dtype, N)
    x = _map(x, lambda t: t.reshape(gm, bm, gn, bn))   # [by, i, bx, j]
    out = {}
    for n, r in enumerate(spec.reductions):
        axis = 3 if r.dim == 1 else 1
        init = None
        if not r.clear and r.init == "tensor":
            i = a[f"I{n}"].astype(np.float64)
            if r.dim == 1:   # I[bx, by * bm + i]
                i = tiles_of(i, (1, bm)).reshape(gn, gm, bm).transpose(1, 2, 0)[..., None]
            else:            # I[by, bx * bn + j]
                i = tiles_of(i, (1, bn)).reshape(gm, gn, bn)[:, None]
            init = Value.exact(i, spec.work_dtype)
        elif not r.clear:
            init = Value.exact(round_to(np.full((1, 1, 1, 1), r.init_value), spec.work_dtype),
                               spec.work_dtype)
        red = _reduce(x, r.op, axis, init)
        if r.dim == 1:
            y = _map(red, lambda t: t[..., 0].transpose(2, 0, 1).reshape(gn, gm * bm)[:, :M])
        else:
            y = _map(red, lambda t: t[:, 0].reshape(gm, gn * bn)[:, :N])
        out[f"Y{n}"] = Expect.of(y, spec.y_dtype)
        if r.broadcast:
            x = apply_step(x, "sub_w", 0, _map(red, lambda t: np.broadcast_to(t, x.v.shape)))
    if any(r.broadcast for r in spec.reductions):
        z = _map(x, lambda t: t.reshape(gm * bm, gn * bn)[:M, :N])
        out["Z"] = Expect.of(z, spec.y_dtype)
    return out


def cumsum(spec, a):
    bm, bn = spec.bm, spec.bn
    M, N = a["X"].shape
    xp = tiles_of(a["X"].astype(np.float64), (bm, bn))
    gm, gn = xp.shape[0] // bm, xp.shape[1] // bn
    t = xp.reshape(gm, bm, gn, bn)
    axis = 1 if spec.dim == 0 else 3
    flip = (lambda u: np.flip(u, axis)) if spec.reverse else (lambda u: u)
    sums = flip(np.cumsum(flip(t), axis=axis))
    bound = flip(np.cumsum(flip(np.abs(t)), axis=axis))
    n = t.shape[axis]
    out = round_to(sums, spec.dtype)
    err = bound * UNIT[spec.dtype] * (log2_ceil(n) + 2)
    value = Value(out, spec.dtype, err, np.zeros(out.shape, bool))
    return {"Y": Expect.of(_map(value, lambda u: u.reshape(gm * bm, gn * bn)[:M, :N]),
                           spec.dtype)}


def copy(spec, a):
    v = Value.exact(a["X"], spec.x_dtype)
    for _, dtype in spec.path:
        v = v.converted(dtype)
    return {"Y": Expect.of(v, spec.y_dtype)}


def gemm(spec, a):
    A = a["A"].astype(np.float64)
    B = a["B"].astype(np.float64)
    A = A.T if spec.trans_A else A
    B = B.T if spec.trans_B else B
    (M, K), N = A.shape, B.shape[1]
    bk = spec.bk
    A, B = tiles_of(A, (1, bk)), tiles_of(B, (bk, 1))
    if spec.clear_accum:  # each step restarts the accumulator: only the last one remains
        last = slice(A.shape[1] - bk, A.shape[1])
        A, B = A[:, last], B[last, :]
    product = A @ B
    magnitude = np.abs(A) @ np.abs(B)
    steps = -(-K // bk)
    # float32 operands may run on tensor cores as tf32 (10-bit mantissa)
    unit_in = 2.0 ** -11 if "float32" in (spec.a_dtype, spec.b_dtype) else 0.0
    unit_acc = UNIT[spec.accum] * (log2_ceil(K) + steps + 2)
    acc = Value(round_to(product, spec.accum), spec.accum, magnitude * (unit_in + unit_acc),
                np.zeros(product.shape, bool))
    if spec.scale != 1.0:
        acc = apply_step(acc, "scale", spec.scale, None)
    return {"C": Expect.of(acc, spec.c_dtype)}


def pipelined(spec, a):
    X = a["X"].astype(np.float64)
    M, L = X.shape
    bm, bn = spec.bm, spec.bn
    trips = int(a["count"]) if spec.dynamic_trips else spec.trips
    columns = [int(a["Idx"][k]) if spec.indexed else k for k in range(trips)]
    width = max([L] + [(c + 1) * bn for c in columns])
    xp = np.pad(X, [(0, -M % bm), (0, width - L)])
    rows = xp.shape[0]
    acc = Value.exact(np.full((rows, bn), spec.acc_init), "float32")
    sums = Value.exact(np.zeros((rows, 1)), "float32")
    stored = np.zeros((rows, width), bool)
    for c in columns:
        tile = Value.exact(xp[:, c * bn:(c + 1) * bn], spec.x_dtype)
        src = tile.converted("float32") if spec.through_fragment else tile
        for item in spec.body:
            if item == "acc_add":
                acc = apply_step(acc, "add_w", 0, src).converted("float32")
            elif item == "acc_max":
                acc = apply_step(acc, "max_w", 0, src).converted("float32")
            elif item == "row_sum":
                sums = _reduce(src.converted("float32"), "sum", 1, sums)
            else:
                stored[:, c * bn:(c + 1) * bn] = True
    out = {}
    if {"acc_add", "acc_max"} & set(spec.body):
        out["Y"] = Expect.of(_map(acc, lambda t: t[:M]), "float32")
    if "row_sum" in spec.body:
        out["S"] = Expect.of(_map(sums, lambda t: t[:M, 0]), "float32")
    if "store" in spec.body:
        z = Value.exact(xp[:M, :L], spec.x_dtype)
        out["Z"] = Expect.of(z, spec.x_dtype, written=stored[:M, :L])
    return out


def attention(spec, a):
    Q, K, V = (a[n].astype(np.float64) for n in "QKV")
    (M, d), N = Q.shape, K.shape[0]
    scores = Q @ K.T * spec.scale
    # how far float32 accumulation may move a score, per row
    slack = UNIT["float32"] * (log2_ceil(d) + 2) * np.max(np.abs(Q) @ np.abs(K).T, axis=1)
    if spec.causal:
        rows, cols = np.indices(scores.shape)
        scores = np.where(rows >= cols, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    total = p.sum(axis=1, keepdims=True)
    out = p @ V / total
    # P enters the second gemm rounded to the input dtype; exponentials of moved scores
    tiles = -(-N // spec.bn)
    relative = 3 * UNIT[spec.dtype] + 2 * spec.scale * slack[:, None] + 8 * tiles * 2.0 ** -21
    err = relative * (p @ np.abs(V)) / total
    return {"O": Expect.of(Value(round_to(out, "float32"), "float32", err,
                                 np.zeros(out.shape, bool)), spec.dtype)}


_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum}


def atomic(spec, a):
    u, bm, bn = spec.update, spec.bm, spec.bn
    combine = _ATOMIC[u.op]
    Y = a["Y"].astype(np.float64).copy()
    R, C = Y.shape
    xp = tiles_of(a["X"].astype(np.float64), (bm, bn))
    magnitude, count = np.abs(Y), np.zeros(Y.shape)
    rows, cols = np.meshgrid(np.arange(bm), np.arange(bn), indexing="ij")
    scattered = (rows % u.row_mod, (cols * u.col_mul) % C)
    for by in range(xp.shape[0] // bm):
        for bx in range(xp.shape[1] // bn):
            tile = xp[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn]
            if u.form == "tile":
                r0 = (by % 2) * bm if u.shift_rows else 0
                part = tile[:max(0, min(bm, R - r0)), :min(bn, C)]
                where = (slice(r0, r0 + part.shape[0]), slice(0, part.shape[1]))
                Y[where] = combine(Y[where], part)
                magnitude[where] += np.abs(part)
                count[where] += 1
            elif u.form == "scalar":
                combine.at(Y, scattered, tile)
                np.add.at(magnitude, scattered, np.abs(tile))
                np.add.at(count, scattered, 1)
            else:  # into a zeroed shared tile, which is then added to Y as a whole
                acc = np.zeros((R, C))
                combine.at(acc, scattered, tile)
                Y = combine(Y, acc)
                np.add.at(magnitude, scattered, np.abs(tile))
                np.add.at(count, scattered, 1)
                count += 1
    if u.op != "add" or is_int(spec.dtype):
        err = np.zeros_like(Y)
    else:  # the adds land in any order, each rounded
        err = UNIT[spec.dtype] * (count + 2) * magnitude
    return {"Y": Expect.of(Value(round_to(Y, spec.dtype), spec.dtype, err,
                                 np.zeros(Y.shape, bool)), spec.dtype)}


def element_access(spec, a):
    f = a["X"].astype(np.float64).copy()
    reads = []
    for access in spec.accesses:
        if access[0] == "write":
            _, i, j, value = access
            f[i, j] = round_to(np.float64(value), spec.dtype)
        else:
            _, i, j, k = access
            reads.append((k, f[i, j]))
    p = np.zeros(max(len(reads), 1))
    written = np.zeros(p.shape, bool)
    for k, value in reads:
        p[k], written[k] = value, True
    return {"Y": Expect.of(Value.exact(f, spec.dtype), spec.dtype),
            "P": Expect.of(Value.exact(p, spec.dtype), spec.dtype, written=written)}


KINDS = {"elementwise": elementwise, "reduce": reduce, "cumsum": cumsum, "copy": copy,
         "gemm": gemm, "attention": attention, "pipelined": pipelined, "atomic": atomic,
         "element_access": element_access}


def expected(spec, arrays: dict) -> dict:
    return KINDS[spec.kind](spec, arrays)
