"""TileLang modules and helpers its scripts reach beyond the language: the modules tilecraft
does not have (cuda, rocm, tools.cuda) stop with a TileError naming them, by attribute or
by import, at the script's line; tools.plot_layout writes a layout's grid; the bank-swizzle
layouts go by TileLang's names; testing.process_func / regression run a regression script."""
import importlib
import os
import subprocess
import sys
import textwrap

import pytest

import tilecraft
import tilecraft.testing
from tilecraft.errors import TileError
from tilecraft.layout import (make_full_bank_swizzle, make_full_bank_swizzled_layout,
                              make_half_bank_swizzled_layout, make_quarter_bank_swizzled_layout)
from tilecraft.tools import plot_layout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", ["cuda", "rocm"])
def test_a_tilelang_module_tilecraft_lacks_is_named_by_attribute(name):
    with pytest.raises(TileError) as info:
        getattr(tilecraft, name)
    assert f"tilelang.{name} is not part of tilecraft" in info.value.message
    with pytest.raises(AttributeError):
        tilecraft.no_such_thing  # noqa: B018  (a typo stays an AttributeError)


@pytest.mark.parametrize("statement, name", [
    ("import tilecraft.cuda.intrinsics.layout", "cuda"),
    ("from tilecraft.tools.cuda import iket", "tools.cuda"),
    ("from tilecraft.language.dtypes import dtype", "language.dtypes"),
    ("import importlib; importlib.import_module('tilecraft.rocm')", "rocm"),
])
def test_importing_one_points_at_the_import_line(tmp_path, statement, name):
    script = tmp_path / "script.py"
    script.write_text(f"x = 1\n{statement}\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode != 0
    assert f"tilelang.{name} is not part of tilecraft" in done.stderr
    assert "script.py:2:" in done.stderr and "Traceback" in done.stderr


def test_plot_layout_writes_the_grid(tmp_path):
    layout = make_quarter_bank_swizzled_layout(8, 16, 16)
    paths = plot_layout(layout, save_directory=str(tmp_path), name="quarter")
    assert paths == [str(tmp_path / "quarter.txt")]
    rows = (tmp_path / "quarter.txt").read_text().splitlines()
    # 32-byte swizzle of 16-bit elements: rows 4-7 swap their two 8-element halves.
    assert rows[2].split()[1:3] == ["0", "1"]
    assert rows[6].split()[1:3] == ["72", "73"]
    with pytest.raises(TileError, match="formats"):
        plot_layout(layout, save_directory=str(tmp_path), formats="bmp")
    if importlib.util.find_spec("matplotlib") is None:
        with pytest.raises(TileError, match="needs matplotlib"):
            plot_layout(layout, save_directory=str(tmp_path), formats="png")
    else:
        plot_layout(layout, save_directory=str(tmp_path), name="q", formats="png")
        assert (tmp_path / "q.png").stat().st_size > 0


def test_bank_swizzles_go_by_tilelang_names():
    assert make_full_bank_swizzled_layout is make_full_bank_swizzle
    assert make_half_bank_swizzled_layout(8, 32, 16).mode == "64B"
    assert make_full_bank_swizzled_layout(32, 64, 16).mode == "128B"


def test_a_regression_script_runs_its_functions(tmp_path):
    script = tmp_path / "regression_thing.py"
    script.write_text(textwrap.dedent("""
        import tilecraft.testing

        def run_regression_perf(argv=None, scale=1.0):
            assert argv == []      # its own defaults, not this script's command line
            return 0.25 * scale

        def regression_plain():
            tilecraft.testing.process_func(run_regression_perf)

        def regression_named():
            tilecraft.testing.process_func(run_regression_perf, "wide", scale=4.0)

        def helper():
            raise AssertionError("not a regression_ function")

        if __name__ == "__main__":
            found = tilecraft.testing.regression()
            assert found == [("__main__.run_regression_perf", 0.25), ("wide", 1.0)], found
    """))
    done = subprocess.run([sys.executable, str(script), "--unrelated"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["__main__.run_regression_perf", "0.2500", "wide", "1.0000"]
