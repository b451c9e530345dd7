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


# Modules whose tests run nvcc, the emulator over whole example kernels, torch.compile's
# C++ backend, fresh Python processes or the cost model over whole search spaces: seconds a
# test. `pytest -m "not slow"` leaves them out for everyday work; CI runs everything.
SLOW_MODULES = {
    "tests/fuzz/", "tests/toolkit/", "tests/golden/",
    "tests/unit/test_emulator_corpus.py", "tests/unit/test_emulator_examples.py",
    "tests/unit/test_emulator_sm90_examples.py", "tests/unit/test_emulator_persistent_examples.py",
    "tests/unit/test_emulator_sm90.py", "tests/unit/test_emulator.py",
    "tests/unit/test_compat_census.py", "tests/unit/test_carver_search.py",
    "tests/unit/test_carver_template.py", "tests/unit/test_carver_recommend.py",
    "tests/unit/test_bench_carver_search.py", "tests/unit/test_intrinsics_table.py",
    "tests/unit/test_autotuner.py", "tests/unit/test_autotune_gpus.py",
    "tests/unit/test_gated_delta_net_bwd.py", "tests/unit/test_doc_snippets.py",
    "tests/unit/test_torch_compile.py", "tests/unit/test_gather_runs.py",
    "tests/unit/test_fragment_parts.py", "tests/unit/test_fragment_shares.py",
    "tests/unit/test_pingpong_warpgroups.py", "tests/unit/test_errors_call.py",
    "tests/unit/test_carver_cli.py", "tests/unit/test_im2col.py", "tests/unit/test_tma_add.py",
    "tests/unit/test_warp_ops.py", "tests/unit/test_thread_bindings.py",
    "tests/unit/test_choose_rasterization.py", "tests/unit/test_examples_attention.py",
    "tests/unit/test_examples_matmul_family.py", "tests/unit/test_wide_offsets.py",
    "tests/unit/test_seesaw_warpgroups.py", "tests/unit/test_infer_pipeline.py",
    "tests/unit/test_persistent_tiles.py", "tests/unit/test_paired_halves.py",
    "tests/unit/test_compat_views_layouts.py", "tests/unit/test_hoistable_offset.py",
    "tests/unit/test_thread_allreduce.py", "tests/unit/test_l2_prefetch.py",
    "tests/unit/test_tma_store.py", "tests/unit/test_vertical_slash_indices.py",
    "tests/unit/test_merge_wgmma_batches.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = pathlib.Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        if any(where == m or (m.endswith("/") and where.startswith(m)) for m in SLOW_MODULES):
            item.add_marker(pytest.mark.slow)


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
