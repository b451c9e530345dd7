"""User-facing errors: `error: <what>` / `--> file:line:col` / the source line with carets.

Every IR node made by the frontend carries a Span; whatever rejects a program raises
TileError with the span of the construct at fault, so the message points at the user's line.
"""
from __future__ import annotations

import importlib
import linecache
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from itertools import islice


@dataclass(frozen=True)
class Span:
    """A range of user source: 1-based line and column, end exclusive, on one or more lines."""
    filename: str
    line: int
    col: int
    end_line: int
    end_col: int
    source_line: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}"

    def render(self) -> str:
        text = self.source_line.rstrip("\n")
        number = str(self.line)
        pad = " " * len(number)
        out = [f"  --> {self}"]
        if text:
            width = (self.end_col - self.col) if self.end_line == self.line else len(text) - self.col + 1
            width = max(1, width)
            out += [f"{pad} |", f"{number} | {text}", f"{pad} | " + " " * (self.col - 1) + "^" * width]
        return "\n".join(out)


class TileError(Exception):
    """A mistake in the user's program or call, reported at the user's source line."""

    def __init__(self, message: str, span: Span | None = None, notes: tuple = ()):
        super().__init__(message)
        self.message = message
        self.span = span if span is not None else current_span()
        self.notes = tuple(notes)  # (text, span-or-None) pairs: other places involved

    def with_span(self, span: Span | None) -> "TileError":
        if self.span is None and span is not None:
            self.span = span
        return self

    def __str__(self) -> str:
        lines = [f"error: {self.message}"]
        if self.span is not None:
            lines.append(self.span.render())
        for text, span in self.notes:
            lines.append(f"note: {text}")
            if span is not None:
                lines.append(span.render())
        return "\n".join(lines)


class TileInternalError(TileError):
    """A bug in tilecraft itself, still reported at the user line being compiled."""

    def __init__(self, where: str, cause: BaseException, span: Span | None = None):
        super().__init__(f"internal error in {where}: {type(cause).__name__}: {cause}", span)
        self.cause = cause


def raise_clean(err: TileError):
    """Re-raise a TileError without tilecraft's frames (unless TILECRAFT_DEBUG is set)."""
    from . import knobs
    if knobs.debug():
        raise err
    raise err.with_traceback(None) from None


_previous_hook = sys.excepthook


def _excepthook(kind, value, tb):
    # A TileError is a message about the user's program: print it as a compiler would,
    # without Python frames; anything else goes to the usual hook.
    from . import knobs
    if isinstance(value, TileError) and not knobs.debug():
        print(str(value), file=sys.stderr)
        return
    _previous_hook(kind, value, tb)


def install_excepthook():
    if sys.excepthook is not _excepthook:
        sys.excepthook = _excepthook


# The span of the user construct being evaluated right now: the frontend sets it per
# statement and call, so IR built while evaluating carries it and errors point at it.
# Per thread: programs compile in worker threads too (the tuner, background builds), and one
# thread's scope must neither leak into nor be undone by another's.
_current = threading.local()


def _scoped() -> Span | None:
    return getattr(_current, "span", None)


def warn_at(span: Span | None, message: str):
    """A UserWarning reported at the user's file and line (span), not at the compiler's."""
    if span is None:
        warnings.warn(message, stacklevel=3)
    else:
        warnings.warn_explicit(message, UserWarning, span.filename, span.line)


def current_span() -> Span | None:
    """The span being evaluated; outside the frontend, the user's line that called into us."""
    return _scoped() or caller_span()


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_IMPORTLIB_DIR = os.path.dirname(os.path.abspath(importlib.__file__))  # import_module's frames
_inside: dict = {}  # code file name -> whether it is a module of this package


def _in_package(filename: str) -> bool:
    # IR built outside the frontend asks for its caller on every expression: tens of thousands
    # of stack walks while lowering one kernel, each frame's file resolved once here.
    # The import machinery's frames (frozen, and importlib's own) count as ours: an error
    # raised while a tilecraft module is imported points at the user's import line.
    found = _inside.get(filename)
    if found is None:
        found = _inside[filename] = filename.startswith("<frozen ") or \
            os.path.abspath(filename).startswith((_PACKAGE_DIR, _IMPORTLIB_DIR))
    return found


_positions: dict = {}  # (code, instruction offset) -> (line, end line, column, end column)


def _position(code, lasti: int) -> tuple:
    # The same user line asks again for every expression built under it: its position is
    # looked up in the code object once.
    key = (code, lasti)
    found = _positions.get(key)
    if found is None:
        if len(_positions) >= 4096:
            _positions.clear()
        found = _positions[key] = next(islice(code.co_positions(), lasti // 2, None))
    return found


def caller_span() -> Span | None:
    """The position of the innermost call made from outside the tilecraft package."""
    frame = sys._getframe(1)
    while frame is not None and _in_package(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    code = frame.f_code
    line, col, end_line, end_col = frame.f_lineno, None, None, None
    try:
        line, end_line, col, end_col = _position(code, frame.f_lasti)
    except (AttributeError, StopIteration, ValueError):
        pass
    if line is None:
        return None
    text = linecache.getline(code.co_filename, line)
    if col is None:
        col = len(text) - len(text.lstrip())
        end_col, end_line = len(text.rstrip()), line
    return Span(code.co_filename, line, col + 1, end_line or line, (end_col or col) + 1, text)


class span_scope:
    def __init__(self, span: Span | None):
        self.span = span

    def __enter__(self):
        self.saved = _scoped()
        if self.span is not None:
            _current.span = self.span
        return self.span

    def __exit__(self, *exc):
        _current.span = self.saved
        return False
