"""bench/bench_power.py without a GPU: its --variant items (pass configs and a panel)."""
import pathlib
import sys

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import bench_power  # noqa: E402


def test_variants_give_pass_configs_and_a_panel():
    assert bench_power.parse_variant("tl.disable_k_alternation=1") == {
        "tl.disable_k_alternation": True}
    assert bench_power.parse_variant("tl.enable_tma_multicast=1,panel=8") == {
        "tl.enable_tma_multicast": True, "panel": 8}
    assert bench_power.parse_variant("panel=4") == {"panel": 4}
    with pytest.raises(ValueError, match="more than one panel"):
        bench_power.parse_variant("panel=4,panel=8")
