import importlib.util
import os
import pathlib
import shutil
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_CACHE = "TILECRAFT_CACHE_DIR"
_made_cache = []


def pytest_configure(config):
    """The tests compile into a cache folder of their own, removed when they end: the user's
    ~/.cache/tilecraft is never written (a TILECRAFT_CACHE_DIR the caller set is kept)."""
    if not os.environ.get(_CACHE):
        _made_cache.append(tempfile.mkdtemp(prefix="tilecraft-tests-"))
        os.environ[_CACHE] = _made_cache[0]


def pytest_unconfigure(config):
    for folder in _made_cache:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get(_CACHE) == folder:
            del os.environ[_CACHE]


def load_example(name: str):
    """Import examples/<name>.py as a module (examples are scripts, not a package)."""
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def example():
    return load_example
