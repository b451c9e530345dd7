"""Where a kernel runs: the names a kernel is asked to run on ("auto", "interp", "emulator",
"emulator:sm_90a", "cuda" or an arch) resolved to a backend and an arch. The jit asks this once
per kernel; it is the one place above the runtime that asks whether a GPU is here."""
from __future__ import annotations


from . import knobs
from .errors import TileError
from .target import SMEM_PER_BLOCK, cost_target_for



def _gpu_available() -> bool:
    """Whether a GPU is usable: a device the driver lists, and torch with CUDA to hand it
    tensors. A device without such a torch is said in a warning, as "auto" then runs on the
    CPU where the user may expect the GPU."""
    from .backends.cuda.runtime.device import has_cuda_device
    if not has_cuda_device():
        return False
    try:
        import torch
    except ImportError:
        _warn_cpu_fallback("torch is not installed")
        return False
    if not torch.cuda.is_available():
        _warn_cpu_fallback(f"torch {torch.__version__} has no usable CUDA")
        return False
    return True


def _warn_cpu_fallback(why: str):
    import warnings
    warnings.warn(f"tilecraft: this machine has an NVIDIA GPU, but {why}: target 'auto' runs "
                  "kernels on the CPU interpreter (install torch with CUDA to use the GPU, or "
                  "pass target='interp' to choose the CPU)", RuntimeWarning, stacklevel=4)


def _supported_arch(arch: str) -> str:
    """arch when the CUDA backend compiles for it; a TileError naming the GPU otherwise."""
    if arch in SMEM_PER_BLOCK:
        return arch
    number = int("".join(c for c in arch[3:] if c.isdigit()) or 0)
    why = (" (GPUs before Ampere lack the cp.async and tensor-core instructions the generated "
           "code uses)") if number < 80 else ""
    raise TileError(f"the GPU here is {arch}; tilecraft compiles for "
                    f"{', '.join(SMEM_PER_BLOCK)}{why}; use target='interp' to run on the CPU")


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
            return "cuda", _supported_arch(current_arch())
        if name == "cuda":
            raise TileError("target 'cuda': no CUDA GPU is usable here (a driver, a device and "
                            "torch with CUDA are needed); use target='interp' or an "
                            "architecture such as 'sm_90a' to only compile")
        return "interp", None
    if name in SMEM_PER_BLOCK:   # the archs the CUDA backend compiles for
        return "cuda", name
    raise TileError(f"unknown target '{target}'; expected 'auto', 'interp', 'emulator', 'cuda' "
                    "or an architecture: sm_80, sm_86, sm_89, sm_90a")


def machine_target(target=None) -> str:
    """The cost model's hardware for kernels compiled here for `target` (default: the
    configured one, TILECRAFT_TARGET or "auto"): the current GPU's model when that is where
    they run, else the compile arch's, else the H100 (the interpreter: the model then only
    orders configurations)."""
    backend, arch = resolve(target)
    device = None
    if backend == "cuda":
        from .backends.cuda.runtime.device import device_properties, has_cuda_device
        device = device_properties(None).name if has_cuda_device() else None
    return cost_target_for(device, arch)
