"""Where a kernel runs: the names a kernel is asked to run on ("auto", "interp", "emulator",
"emulator:sm_90a", "cuda" or an arch) resolved to a backend and an arch. The jit asks this once
per kernel; it is the one place above the runtime that asks whether a GPU is here."""
from __future__ import annotations


from . import knobs
from .errors import TileError
from .target import SMEM_PER_BLOCK



def _gpu_available() -> bool:
    from .backends.cuda.runtime.device import has_cuda_device
    if not has_cuda_device():
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def resolve(target) -> tuple[str, str | None]:
    """(backend, arch) for a target name: "auto", "interp", "emulator", "cuda" or an arch like
    "sm_90a". "emulator" compiles for sm_80 and runs the lowered kernel on the CPU emulator;
    "emulator:sm_90a" does the same with the Hopper pipeline (wgmma, TMA, warp specialization).

    "auto" is the current GPU when there is one (with torch to hand tensors over), else the
    interpreter; an arch compiles for that GPU without needing one (calling it does)."""
    name = target if target is not None else knobs.target()
    if not isinstance(name, str):
        raise TileError(f"target must be a string such as 'auto', 'cuda', 'sm_90a' or 'interp', "
                        f"got {name!r}")
    name = name.strip().lower()
    if name == "interp":
        return "interp", None
    if name == "emulator":
        return "emulator", "sm_80"
    if name.startswith("emulator:"):  # the compile pipeline of that GPU, run on the CPU
        arch = name.split(":", 1)[1]
        if arch not in ("sm_80", "sm_90a"):
            raise TileError(f"target '{target}': the emulator runs the sm_80 and sm_90a "
                            "pipelines ('emulator:sm_80', 'emulator:sm_90a')")
        return "emulator", arch
    if name in ("auto", "cuda"):
        if _gpu_available():
            from .backends.cuda.runtime.device import current_arch
            return "cuda", current_arch()
        if name == "cuda":
            raise TileError("target 'cuda': no CUDA GPU is usable here (a driver, a device and "
                            "torch with CUDA are needed); use target='interp' or an "
                            "architecture such as 'sm_90a' to only compile")
        return "interp", None
    if name in SMEM_PER_BLOCK:   # the archs the CUDA backend compiles for
        return "cuda", name
    raise TileError(f"unknown target '{target}'; expected 'auto', 'interp', 'emulator', 'cuda' "
                    "or an architecture: sm_80, sm_86, sm_89, sm_90a")

