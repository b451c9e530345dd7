"""Shared by the malformed-program tests: find the marked line of a program and check that
the TileError it raises points there, without a traceback or tilecraft's own paths."""
import inspect
import os

import pytest

import tilecraft
from tilecraft.errors import TileError

PACKAGE_DIR = os.path.dirname(os.path.abspath(tilecraft.__file__))
MARK = "# <- here"


def where(fn, token):
    """(line, column) of `token` on the one line of fn's source that carries MARK."""
    lines, first = inspect.getsourcelines(fn)
    marked = [i for i, text in enumerate(lines) if MARK in text]
    assert len(marked) == 1, "exactly one marked line per program"
    text = lines[marked[0]]
    assert text.count(token) == 1, f"{token!r} must occur once on the marked line"
    return first + marked[0], text.index(token) + 1


def expect(program, message, token):
    """Run program(); it must raise a TileError pointing at `token` on the marked line."""
    with pytest.raises(TileError) as info:
        program()
    err = info.value
    line, col = where(program, token)
    source = inspect.getsourcefile(program)
    assert message in err.message, err.message
    assert err.span is not None, str(err)
    assert os.path.samefile(err.span.filename, source)
    assert (err.span.line, err.span.col) == (line, col), str(err)
    text = str(err)
    assert text.startswith("error: ") and f"{os.path.basename(source)}:{line}:{col}" in text
    assert "Traceback" not in text and PACKAGE_DIR not in text and "internal error" not in text
    return err
