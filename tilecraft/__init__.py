"""tilecraft: a tile-level GPU kernel language and compiler (TileLang's API) in Python."""
__version__ = "0.1.0"

from .errors import TileError, install_excepthook
from . import knobs as _knobs
from .ir.tileop import GemmWarpPolicy
from . import ops  # noqa: F401  (registers each tile op's contract)
from .jit import jit, compile, JITKernel  # noqa: A004
from .torch_op import differentiable
from .interp import register_extern
from .pass_config import PassConfigKey
from .autotuner import autotune
from .profiler import Profiler, TensorSupplyType
from . import math  # noqa: A004  (tilecraft.math, as TileLang's tilelang.math)
from .math import cdiv, next_power_of_2
from . import env  # noqa: F401  (TileLang's tilelang.env names)
from .env import disable_cache, enable_cache, set_log_level
from .layout import Fragment, Layout
from .ir.dtypes import dtype as DataType  # TileLang's DataType("float16").bits
from .not_included import module_getattr as _module_getattr
__getattr__ = _module_getattr(__name__)  # tilecraft.tvm, .cuda, .rocm: a clear error

from .backends.cuda.runtime import device as _device  # loads nothing until asked
from .carver.arch import machine as _machine
_machine.install(_device)  # carver.arch's device queries (the core never imports a backend)

# The process's exception hook is the user's: the clean printing of uncaught TileErrors is
# opt-in (tilecraft.install_excepthook(), or TILECRAFT_CLEAN_ERRORS=1); raised errors carry
# none of tilecraft's frames either way.
if _knobs.clean_errors():
    install_excepthook()
if _knobs.log_level():
    try:
        set_log_level(_knobs.log_level())
    except TileError:
        raise ValueError(f"TILECRAFT_LOG_LEVEL={_knobs.log_level()!r} is not a logging level: "
                         "give DEBUG, INFO, WARNING, ERROR or CRITICAL") from None
