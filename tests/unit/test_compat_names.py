"""docs/compatibility.md lists every name of tilecraft.language and every TileLang name it
refuses, as tools/compat_names.py writes them; each listed name does what the page says."""
import sys
from pathlib import Path

import pytest

import tilecraft.language as T
from tilecraft.errors import TileError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tools import compat_names  # noqa: E402


def test_the_page_lists_the_names_as_they_are():
    page = (ROOT / "docs" / "compatibility.md").read_text()
    assert compat_names.page_with_tables(page) == page, \
        "run python3 tools/compat_names.py --write"


def _rows(header):
    text = compat_names.tables()
    table = text[text.index(header):].split("\n\n")[0].splitlines()[2:]
    return [row.split("|")[1:-1] for row in table]


def test_every_name_that_works_is_there():
    names = [n.strip(" `") for _, cell in _rows("| family |") for n in cell.split(",")]
    assert "Layout" in names and "annotate_consumer_reg_alloc" in names
    for name in names:
        assert getattr(T, name) is not None


def test_every_refused_name_is_a_clear_error():
    names = [cell.strip(" `")[2:] for cell, _ in _rows("| refused name |")]
    assert "sync_grid" in names and "tcgen05_gemm" in names
    for name in names:
        with pytest.raises(TileError, match=f"T.{name} is not supported by tilecraft yet"):
            getattr(T, name)
