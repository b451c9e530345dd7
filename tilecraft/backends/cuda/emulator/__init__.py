"""Thread-level emulator of lowered kernels, with a checker (shared-memory races, reads of
memory never written, out-of-bounds accesses, cp.async data read before its wait, barriers
not reached by the whole block; on sm_90a also deadlocks on mbarriers and named barriers,
TMA data used before its mbarrier phase, TMA loads over bytes still in use, TMA stores not
waited for or whose bytes are overwritten while they read them, and wgmma or TMA stores
reading shared memory written without a proxy fence).

    from tilecraft.backends.cuda import emulator
    lowered = emulator.lower(prim_func)                    # the sm_80 pipeline, no nvcc
    lowered = emulator.lower(prim_func, "sm_90a", {"tl.disable_warp_specialized": True})
    #                                                        wgmma, TMA, warp specialization
    reports = emulator.run(lowered, [A, B, C])             # arrays written in place
    for r in reports: print(r)

`target="emulator"` on tilecraft.jit / tilecraft.compile does both on every call and raises
EmulatorError when the checker finds anything.
"""
from __future__ import annotations

import numpy as np

from ....errors import TileError
from ....ir.buffer import Buffer
from ....ir.expr import Var
from .checker import Report, Reports, Site
from .index_checks import check_indices_at_run
from .machine import Emulator


# The pipelines the emulator runs: sm_90a's, and the mma.sync one of the archs below it.
EMULATED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a")


class EmulatorError(TileError):
    """The checker found problems; `.reports` lists them all."""

    def __init__(self, reports):
        self.reports = list(reports)
        first = self.reports[0]
        span = next((s.span for s in first.sites if s.span is not None), None)
        more = len(self.reports) - 1
        notes = tuple((str(r), None) for r in self.reports[1:6])
        text = f"the emulator found {len(self.reports)} problem(s); first: {first}"
        if more > 5:
            notes += ((f"... and {more - 5} more", None),)
        super().__init__(text, span, notes)


def lower(func, target="sm_80", configs: dict | None = None):
    """The thread-level PrimFunc the CUDA backend would print, for this target: an arch name
    or a Target (sm_80, sm_86, sm_89: the mma.sync path; sm_90a: wgmma, TMA and warp
    specialization, which the pass configs may turn off)."""
    from ..pipeline import lower as pipeline_lower
    from ....pass_config import PassConfigKey
    from ....target import arch_of
    arch = arch_of(target)
    if arch not in EMULATED_ARCHS:
        raise TileError(f"the emulator runs sm_80, sm_86, sm_89 and sm_90a kernels, not {arch}")
    # Blocks run one at a time here, so clusters (blocks writing into each other's shared
    # memory) are not modelled: the kernel is checked as it runs without TMA multicast.
    configs = {k: v for k, v in (configs or {}).items()
               if k != PassConfigKey.TL_ENABLE_TMA_MULTICAST}
    return pipeline_lower(check_indices_at_run(func), target, configs)


def run_lowered(lowered, arrays: dict, bindings: dict, check: bool = True) -> Reports:
    """Emulate with arrays keyed by id(parameter buffer); non-contiguous arrays are run on a
    contiguous copy that is written back."""
    contiguous, copied = {}, []
    for key, a in arrays.items():
        if a.flags.c_contiguous:
            contiguous[key] = a
        else:
            contiguous[key] = np.ascontiguousarray(a)
            copied.append((a, contiguous[key]))
    reports = Emulator(lowered, check=check).run(contiguous, bindings)
    for original, copy in copied:
        np.copyto(original, copy)
    return reports


def run(lowered, args, check: bool = True) -> Reports:
    """Emulate a lowered PrimFunc on one argument per parameter (numpy arrays, written in
    place, and scalars); symbolic sizes are taken from the arrays' shapes."""
    params = lowered.params
    if len(args) != len(params):
        raise TileError(f"{lowered.name} takes {len(params)} argument(s), got {len(args)}")
    arrays, bindings = {}, {}
    for p, a in zip(params, args):
        if isinstance(p, Buffer):
            a = np.asarray(a) if not isinstance(a, np.ndarray) else a
            arrays[id(p)] = a
            for dim, have in zip(p.shape, a.shape):
                if isinstance(dim, Var):
                    bindings[id(dim)] = np.int64(have)
        else:
            bindings[id(p)] = np.dtype(p.dtype.numpy).type(a)
    return run_lowered(lowered, arrays, bindings, check)


__all__ = ["Emulator", "EmulatorError", "Report", "Reports", "Site", "lower", "run",
           "run_lowered"]
