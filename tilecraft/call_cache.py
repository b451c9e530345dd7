"""The per-signature fast path of calling a compiled kernel on GPU tensors.

A call checks every argument against its parameter (dtype, rank, static sizes, sizes bound by
symbolic dimensions), works out the outputs' shapes, and lines up the values the launcher
packs: tens of microseconds of Python, longer than a small kernel runs. All of it depends only
on what the arguments look like — each tensor's dtype, shape, device and contiguity, and each
scalar's value — so the first call with a given look records its plan (where each parameter's
value comes from, the outputs to allocate, every parameter's shape) and later calls that look
the same only allocate the outputs and launch; once a plan has run, the same is done in C
(runtime/fastcall.py), and the Python path here is taken only where that declines. The
program's side of it (runtime/program.py, PreparedCall) keeps the grids and the packed
arguments, which change only with the tensors' addresses, and the device the tensors are on, whose context and stream its launches use (the
device is part of the look, so reading it costs no more than the look). Anything that is not
a contiguous torch CUDA tensor or a plain number takes the checked path, which also raises the
errors: tensors on two devices never get a plan, so each such call is refused there.
"""
from __future__ import annotations

import sys
from math import copysign

from .arrays import TRACING_TENSORS

KEPT = 16          # signatures remembered per kernel (a loop over a few shapes stays fast)
_SCALARS = (int, float, bool)


def signature(args):
    """A hashable description of the arguments, or None when the fast path does not apply."""
    key = []
    tensors = False
    for a in args:
        kind = type(a)
        if kind in _SCALARS:
            # -0.0 == 0.0, but a kernel given one may compute otherwise than given the other
            key.append((kind, a, copysign(1.0, a)) if kind is float else (kind, a))
            continue
        # a tensor autograd records, or one of torch.compile's tracing: the checked path
        # routes both through the kernel's torch operator
        if getattr(a, "is_cuda", None) is not True or a.requires_grad or \
                kind.__name__ in TRACING_TENSORS:
            return None
        key.append((a.dtype, a.shape, a.device, a.is_contiguous()))
        tensors = True
    # Without a tensor nothing says which device the outputs go to: the checked path knows.
    return tuple(key) if tensors else None


class CallPlan:
    """How a call with one signature runs: per parameter, ("in", argument index),
    ("out", output index) or ("scalar", value); the outputs' shapes and torch dtypes; every
    parameter's shape; and, once made, the program's PreparedCall for them."""

    def __init__(self, sources, outputs, dims, args=()):
        self.sources = sources
        self.dims = dims
        self.prepared = None
        # Outputs are made like the first tensor argument (a signature has one), on its
        # device. An output of its shape and dtype, when it is contiguous, comes from
        # torch.empty_like, the cheapest of torch's ways to allocate from Python (measured on
        # the H100's host: bench/overhead.md); the others from new_empty.
        self.like = next(i for kind, i in sources if kind == "in")
        first = args[self.like] if args else None
        look = (tuple(first.shape), first.dtype, first.is_contiguous()) if first is not None \
            else None
        empty_like = sys.modules["torch"].empty_like if "torch" in sys.modules else None
        self.makers = [(empty_like if empty_like is not None and look == (shape, dtype, True)
                        else None, shape, dtype) for shape, dtype in outputs]
        self.fast = None       # the plan in C once it ran (runtime/fastcall.py), or None
        self._fast_tried = False

    def run(self, program, args):
        first = args[self.like]
        made = [same(first) if same is not None else first.new_empty(shape, dtype=dtype)
                for same, shape, dtype in self.makers]
        values = [args[i] if kind == "in" else made[i] if kind == "out" else i
                  for kind, i in self.sources]
        prepared = self.prepared
        if prepared is None:
            prepared = self.prepared = program.prepared(values, self.dims)
        prepared.run(values)
        # Made after the plan's first run; taught the tensor maps of every run in Python
        # (the first, and each the C plan declined).
        from .backends.cuda.runtime import fastcall
        if not self._fast_tried:
            self._fast_tried = True
            self.fast = fastcall.build(self, prepared, args, values)
        if self.fast is not None:
            fastcall.teach(self.fast, prepared, values)
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
                                   [tuple(d) for d in dims], args)
