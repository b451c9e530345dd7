"""Each failure of an example run put in one class, as a plain dict (it crosses a process
boundary as JSON):

- missing-name: the script uses a TileLang name tilecraft lacks: `T.xxx`, `tilelang.yyy`, a
  `tilelang.x` module, or an attribute of one of tilecraft's objects (`JITKernel.zzz`);
- missing-argument: a keyword argument tilecraft's function does not take (`T.copy(x=)`),
  or a call form it does not accept (a jit factory called with the tensor sizes as keywords);
- value-mismatch: a value of tilecraft's used as the script uses TileLang's and refused by
  Python (a TypeError that quotes one of tilecraft's classes);
- tile-error: tilecraft rejected the program with a TileError (its first line);
- nvcc-error: the CUDA that tilecraft generated did not compile;
- internal-error: an exception from inside tilecraft (its type and the tilecraft file:line);
- import-time: the example could not be imported for another reason (a third-party module
  that is absent here, or its top-level code failed);
- needs-gpu: the script asked for a GPU before any kernel of it was compiled;
- example-error: the script's own code failed (its arguments, a CPU-only torch, ...).
"""
from __future__ import annotations

import os
import re
import sysconfig
import traceback
import types

from .importalias import source_name, spelled

_TILECRAFT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tilecraft")
_NO_ATTRIBUTE = re.compile(r"(?:module )?'([\w.]+)'(?: object)? has no attribute '(\w+)'")
_T_NO_ATTRIBUTE = re.compile(r"^T has no attribute '(\w+)'")
_CANNOT_IMPORT = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
_UNEXPECTED_KEYWORD = re.compile(r"([\w.]+)\(\) got an unexpected keyword argument '(\w+)'")
_GPU_WORDS = ("cuda", "gpu", "nvidia", "active drivers")
# Libraries whose own failure, without a GPU, is the lack of one (torch.cuda's device
# contexts, triton's launcher).
_GPU_LIBRARIES = (os.sep + os.path.join("torch", "cuda") + os.sep, os.sep + "triton" + os.sep)


def qualified(module: str, attr: str) -> str:
    """How a script spells a missing attribute: T.xxx for the language module."""
    return spelled(f"{source_name(module)}.{attr}")


def in_tilecraft(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_TILECRAFT_DIR + os.sep)


def tilecraft_frame(tb) -> str | None:
    """file:line of the innermost frame of a traceback inside the tilecraft package."""
    where = None
    for frame in traceback.extract_tb(tb):
        if in_tilecraft(frame.filename):
            rel = os.path.relpath(frame.filename, os.path.dirname(_TILECRAFT_DIR))
            where = f"{rel}:{frame.lineno}"
    return where


def script_frame(tb) -> str | None:
    """file:line of the innermost frame outside tilecraft and the census (the script's)."""
    census = os.path.dirname(os.path.abspath(__file__))
    where = None
    for frame in traceback.extract_tb(tb):
        name = os.path.abspath(frame.filename)
        if not in_tilecraft(name) and not name.startswith(census + os.sep) and \
                not name.startswith("<"):
            where = f"{os.path.basename(name)}:{frame.lineno}"
    return where


def _innermost_in(tb, parts) -> bool:
    frames = traceback.extract_tb(tb)
    return bool(frames) and any(part in frames[-1].filename for part in parts)


_LIBRARIES = tuple(os.path.realpath(p) + os.sep for p in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
    sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _innermost_in_tilecraft(tb) -> bool:
    """The innermost frame outside Python's and third-party libraries is tilecraft's: an
    exception raised in the standard library on tilecraft's behalf (a TypeError of
    dataclasses.fields) is tilecraft's failure, not the script's."""
    for frame in reversed(traceback.extract_tb(tb)):
        if in_tilecraft(frame.filename):
            return True
        if not os.path.realpath(frame.filename).startswith(_LIBRARIES) and \
                not frame.filename.startswith("<frozen "):
            return False
    return False


def _missing_from_message(message: str) -> str | None:
    """The missing name a message of Python or of tilecraft's frontend speaks of."""
    m = _T_NO_ATTRIBUTE.match(first_line(message))
    if m:
        return f"T.{m.group(1)}"
    m = _CANNOT_IMPORT.search(message)
    if m and (m.group(2).split(".")[0] in ("tilecraft", "tilelang")):
        return qualified(m.group(2), m.group(1))
    m = _NO_ATTRIBUTE.search(message)
    if m:
        owner = m.group(1)
        if owner.split(".")[0] in ("tilecraft", "tilelang"):
            return qualified(owner, m.group(2))
        if owner in _TILECRAFT_TYPES:
            return f"{owner}.{m.group(2)}"
    return None


# tilecraft's objects a script holds and asks attributes of (a missing one is a missing name).
_TILECRAFT_TYPES = {"JITKernel", "JITImpl", "Profiler", "Buffer", "Tensor", "Var", "Expr",
                    "PrimFunc", "Layout", "Fragment", "DType", "AutoTuner", "Macro"}


def first_line(text: str) -> str:
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line[len("error: "):] if line.startswith("error: ") else line
    return ""


def _nvcc_detail(message: str) -> str:
    """The first diagnostic nvcc printed (the line with 'error'), else the message's first."""
    for line in message.splitlines()[1:]:
        if "error" in line:
            return re.sub(r"^\S*\.cu\(\d+\): ", "", line.strip())
    return first_line(message)


def _missing_attribute(exc) -> str | None:
    """`tilelang.X.attr` for an AttributeError asked of one of tilecraft's modules, classes
    or objects (Python 3.10+ keeps the object asked as exc.obj)."""
    obj, name = getattr(exc, "obj", None), getattr(exc, "name", None)
    if obj is None or not isinstance(name, str):
        return None
    if isinstance(obj, types.ModuleType):
        return qualified(obj.__name__, name) if obj.__name__.split(".")[0] == "tilecraft" \
            else None
    owner = obj if isinstance(obj, type) else type(obj)
    if (owner.__module__ or "").split(".")[0] == "tilecraft":
        import tilecraft
        import tilecraft.language
        for module, spelled in ((tilecraft, "tilelang."), (tilecraft.language, "T.")):
            if getattr(module, owner.__name__, None) is owner:
                return f"{spelled}{owner.__name__}.{name}"
        return f"{owner.__name__}.{name}"
    return None


def _names_tilecraft_type(message: str) -> bool:
    """Whether a message quotes the name of a class tilecraft's API hands to scripts."""
    import tilecraft
    import tilecraft.language
    exported = {value.__name__ for module in (tilecraft, tilecraft.language)
                for value in vars(module).values() if isinstance(value, type)}
    return any(name in exported for name in re.findall(r"'(\w+)'", message))


def _missing_argument(message: str) -> str | None:
    m = _UNEXPECTED_KEYWORD.search(message)
    return f"{m.group(1)}({m.group(2)}=)" if m else None


def classify(exc: BaseException, phase: str = "run") -> dict:
    """{'class', 'detail', 'where', 'type'} for an exception raised in `phase` ('import' while
    the example's module was executing its top level, 'kernel' while a kernel of it was being
    built, 'run' otherwise)."""
    from tilecraft.errors import TileError, TileInternalError
    kind = type(exc).__name__
    if isinstance(exc, TileInternalError):
        cause = exc.cause
        return {"class": "internal-error", "type": type(cause).__name__,
                "detail": f"{type(cause).__name__}: {first_line(cause)}",
                "where": tilecraft_frame(cause.__traceback__)}
    if isinstance(exc, TileError):
        message = exc.message
        missing = _missing_from_message(message)
        if missing:
            return {"class": "missing-name", "detail": missing, "type": kind, "where": None}
        argument = _missing_argument(message)
        if argument and message.startswith("TypeError"):
            return {"class": "missing-argument", "detail": argument, "type": kind,
                    "where": str(exc.span) if exc.span is not None else None}
        if message.startswith("nvcc failed"):
            return {"class": "nvcc-error", "detail": _nvcc_detail(message), "type": kind,
                    "where": None}
        return {"class": "tile-error", "detail": first_line(message), "type": kind,
                "where": str(exc.span) if exc.span is not None else None}
    if isinstance(exc, ModuleNotFoundError):
        name = exc.name or ""
        if name.split(".")[0] == "tilelang":
            return {"class": "missing-name", "detail": spelled(name), "type": kind, "where": None}
        if not _innermost_in_tilecraft(exc.__traceback__):
            return {"class": "import-time", "detail": f"module {name!r} not installed",
                    "type": kind, "where": None}
    # a module's __getattr__ (PEP 562) raises inside tilecraft for a name it lacks
    asked_a_module = isinstance(getattr(exc, "obj", None), types.ModuleType)
    if isinstance(exc, (AttributeError, ImportError)) and \
            (asked_a_module or not _innermost_in_tilecraft(exc.__traceback__)):
        missing = _missing_attribute(exc) or _missing_from_message(str(exc))
        if missing:
            return {"class": "missing-name", "detail": missing, "type": kind, "where": None}
    if isinstance(exc, TypeError) and _missing_argument(str(exc)):
        where = tilecraft_frame(exc.__traceback__)
        detail = _missing_argument(str(exc))
        if where and where.startswith("tilecraft/jit.py"):
            # tilecraft called the jit factory with the call's keywords: the eager form's
            # `kernel.compile(M=..., ...)`, which binds the sizes T.const declares
            detail = f"eager jit sizes as keywords: {detail}"
        return {"class": "missing-argument", "detail": detail, "type": kind, "where": where}
    where = tilecraft_frame(exc.__traceback__)
    if where is not None and _innermost_in_tilecraft(exc.__traceback__):
        return {"class": "internal-error", "type": kind, "detail": f"{kind}: {first_line(exc)}",
                "where": where}
    where = script_frame(exc.__traceback__)
    if isinstance(exc, TypeError) and _names_tilecraft_type(str(exc)):
        return {"class": "value-mismatch", "detail": f"{kind}: {first_line(exc)}",
                "type": kind, "where": where}
    if phase == "import":
        return {"class": "import-time", "detail": f"{kind}: {first_line(exc)}", "type": kind,
                "where": where}
    if any(word in str(exc).lower() for word in _GPU_WORDS) or \
            _innermost_in(exc.__traceback__, _GPU_LIBRARIES):
        return {"class": "needs-gpu", "detail": f"{kind}: {first_line(exc)}", "type": kind,
                "where": where}
    if isinstance(exc, SystemExit):
        return {"class": "example-error", "detail": f"SystemExit({exc.code})", "type": kind,
                "where": None}
    return {"class": "example-error", "detail": f"{kind}: {first_line(exc)}", "type": kind,
            "where": where}
