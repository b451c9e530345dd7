"""How carver.arch asks about this machine's GPU: through the device queries a backend hands
in (tilecraft's top level installs the CUDA runtime's, backends/cuda/runtime/device.py), so
that the target-neutral carver never imports a backend. The queries are has_cuda_device(),
device_properties(device) and device_attribute(which, device)."""
from __future__ import annotations

from ...errors import TileError

_installed = []


def install(queries) -> None:
    """Use `queries` (a module or object with the three functions) from now on."""
    _installed[:] = [queries]


def queries():
    if not _installed:
        raise TileError("carver.arch has no device queries: import tilecraft (which installs "
                        "the CUDA runtime's) before asking about the GPU")
    return _installed[0]
