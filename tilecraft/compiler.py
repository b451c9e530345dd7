"""The one compile chain: a tile program and a target -> the backend's lowered IR.

Everything that compiles goes through here: jit's programs (the runtime builds source and
binary from what `lower` returns), the emulator (which runs the lowered IR on the CPU), the
autotuner (through jit) and the cost model, which asks for a named prefix of the same pipeline
(`lower(..., stop_after="plan_shared_memory")`) and so sees the shared-memory plan and layouts
the compiled kernel gets, not those of a copy of the pass list.

A backend is a package under backends/ whose `pipeline` module has `steps(target, configs,
smem_limit)`: the passes of that target, in order, as (name, function) pairs, and `lower`,
which runs them (the backend's own runtime and emulator call it directly, so that a backend
never imports the compiler above it). Today there is
one, CUDA (every target is an NVIDIA arch). `target` is a Target value (the runtime's, with
the device's SM count and L2 size) or an arch name (the table's GPU for that arch).
"""
from __future__ import annotations

from .target import arch_of, parse_arch


def backend_of(target):
    """The pipeline module of the backend that compiles for `target`."""
    parse_arch(arch_of(target))   # a CUDA arch name: the one backend there is
    from .backends.cuda import pipeline
    return pipeline


def rules_for(target):
    """The instruction facts (passes/instruction_rules.py) of target's backend."""
    return backend_of(target).RULES


def lower(func, target="sm_80", configs: dict | None = None, *, smem_bytes: int | None = None,
          stop_after: str | None = None, keep: tuple = ()):
    """func lowered for target by its backend's pipeline. `smem_bytes`: the shared memory one
    block may use (default: the arch's limit). `stop_after`: the name of the last pass to run.
    `keep`: names of passes whose output to return as well: then the result is a dict
    {name: PrimFunc} with the last output under "result"."""
    return backend_of(target).lower(func, target, configs, smem_bytes=smem_bytes,
                                    stop_after=stop_after, keep=keep)
