"""A call plan made concrete in C (fastcall.c), once the Python path has run it.

A jit call whose arguments look like an earlier call's runs its plan (call_cache.py): the
outputs allocated, the program's prepared launches (program.PreparedCall) given the tensors'
addresses. `build` turns such a plan, right after it ran, into a FastCall that does the same
per call in C: the look checked, the outputs made, the addresses written into the slots of its
own copy of the packed arguments, the launches made on torch's current stream of the device.
What the C object does not cover it leaves to the Python path by answering NotImplemented, and
`build` does not make one at all where the plan has workspaces (fresh tensors a call), where the
kernels are not loaded in the device's context yet, or where the C module is not there.

A TMA tensor map holds a tensor's address inside the packed bytes; encoding one is Python's
work, so a FastCall keeps, for each map, the maps of the last few addresses it was taught:
after each call the Python path runs (the first, and any whose tensor sits where no map was
made for yet) `teach` hands it the maps that call used. A loop whose outputs take turns between
a few blocks of torch's allocator then runs in C from its second round on.
"""
from __future__ import annotations

import sys

from . import driver, fastlaunch, launcher


def build(plan, prepared, args, values):
    """A FastCall for `plan` (call_cache.CallPlan) whose PreparedCall `prepared` just launched
    `values` (the program's parameters: the call's arguments and outputs), or None."""
    mod = fastlaunch.module()
    torch = sys.modules.get("torch")
    if mod is None or torch is None or prepared.device is None or prepared.workspaces or \
            not prepared.grids or prepared._made is None:
        return None
    stream_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    kernels = [kernel for kernel, _ in prepared.grids]
    functions = [kernel._functions.get(prepared.context) for kernel in kernels]
    if stream_fn is None or any(f is None for f in functions) or \
            any(k.params != kernels[0].params for k in kernels):
        return None
    source = _sources(plan)
    patches, maps = [], []
    image, slots = launcher.argument_image(kernels[0].params, prepared._made[1])
    for (kind, pos), (param, _), offset in zip(prepared.program.positions, kernels[0].params,
                                               slots):
        if kind == "tensormap":
            if source.get(pos[0]) is None:
                return None   # a map of something that is neither an argument nor an output
            maps.append((offset, source[pos[0]]))
        elif kind != "size" and param == "ptr" and source.get(pos) is not None:
            patches.append((offset, source[pos]))
    specs = tuple((type(a), a) if type(a) in (int, float, bool) else (a.dtype, tuple(a.shape))
                  for a in args)
    makers = tuple((same if same is not None else _new_empty(shape, dtype), plan.like)
                   for same, shape, dtype in plan.makers)
    launches = tuple((f.value, *grid, *k.block, k.dynamic_smem)
                     for f, (k, grid) in zip(functions, prepared.grids))

    def fail(code, index):
        kernel, grid = prepared.grids[index]
        driver.check(code, f"launching '{kernel.name}' with grid {grid}, block {kernel.block}, "
                           f"{kernel.dynamic_smem} bytes of dynamic shared memory")

    return mod.FastCall(torch.Tensor, stream_fn, prepared.device,
                        driver.entry_address("cuCtxGetCurrent"),
                        driver.entry_address("cuLaunchKernel"), prepared.context, specs, makers,
                        launches, image, slots, tuple(patches), tuple(maps), fail)


def _sources(plan) -> dict:
    """value index -> the FastCall source of that parameter (argument i, or -1 - k for output
    k); scalars have none."""
    return {v: (i if kind == "in" else -1 - i)
            for v, (kind, i) in enumerate(plan.sources) if kind in ("in", "out")}


def _new_empty(shape, dtype):
    return lambda like: like.new_empty(shape, dtype=dtype)


def teach(fast, prepared, values) -> None:
    """Give `fast` the tensor maps `prepared` just launched with, for their tensors' addresses
    (values: the program's parameters of that call)."""
    packed = prepared._made[1]
    index = 0
    for slot, (kind, pos) in enumerate(prepared.program.positions):
        if kind == "tensormap":
            fast.learn(index, values[pos[0]].data_ptr(), packed[slot])
            index += 1
