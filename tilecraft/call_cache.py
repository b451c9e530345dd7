"""The per-signature fast path of calling a compiled kernel on GPU tensors.

A call checks every argument against its parameter (dtype, rank, static sizes, sizes bound by
symbolic dimensions), works out the outputs' shapes, and lines up the values the launcher
packs: tens of microseconds of Python, longer than a small kernel runs. All of it depends only
on what the arguments look like — each tensor's dtype, shape, device and contiguity, and each
scalar's value — so the first call with a given look records its plan (where each parameter's
value comes from, the outputs to allocate, every parameter's shape) and later calls that look
the same only allocate the outputs and launch. Anything that is not a contiguous torch CUDA
tensor or a plain number takes the checked path, which also raises the errors.
"""
from __future__ import annotations

KEPT = 16          # signatures remembered per kernel (a loop over a few shapes stays fast)
_SCALARS = (int, float, bool)


def signature(args):
    """A hashable description of the arguments, or None when the fast path does not apply."""
    key = []
    for a in args:
        if type(a) in _SCALARS:
            key.append((type(a), a))
            continue
        is_cuda = getattr(a, "is_cuda", False)
        if is_cuda is not True or not hasattr(a, "data_ptr"):
            return None
        key.append((a.dtype, a.shape, a.device, a.is_contiguous()))
    if len(key) == sum(type(a) in _SCALARS for a in args):
        return None  # no tensor says which device the outputs go to: the checked path knows
    return tuple(key)


class CallPlan:
    """How a call with one signature runs: per parameter, ("in", argument index),
    ("out", output index) or ("scalar", value); the outputs' shapes and torch dtypes; every
    parameter's shape."""

    def __init__(self, sources, outputs, dims):
        self.sources = sources
        self.outputs = outputs
        self.dims = dims

    def run(self, program, args):
        import torch
        device = next(a.device for a in args if type(a) not in _SCALARS)
        made = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.outputs]
        values = [args[i] if kind == "in" else made[i] if kind == "out" else i
                  for kind, i in self.sources]
        program.run(values, self.dims)
        return made


class CallCache:
    def __init__(self):
        self.plans: dict = {}

    def get(self, key):
        return self.plans.get(key) if key is not None else None

    def record(self, key, args, values, dims, outputs):
        """After a checked call that launched with `values` / `dims` and returned `outputs`."""
        if key is None:
            return
        by_id = {id(a): i for i, a in enumerate(args) if type(a) not in _SCALARS}
        out_ids = {id(o): i for i, o in enumerate(outputs)}
        sources = []
        for v in values:
            if id(v) in out_ids:
                sources.append(("out", out_ids[id(v)]))
            elif id(v) in by_id:
                sources.append(("in", by_id[id(v)]))
            else:
                sources.append(("scalar", v))
        if len(self.plans) >= KEPT:
            self.plans.pop(next(iter(self.plans)))
        self.plans[key] = CallPlan(sources, [(tuple(o.shape), o.dtype) for o in outputs],
                                   [tuple(d) for d in dims])
