"""TileLang's MatmulTemplate(...).with_arch(arch).recommend_hints(topk): tilecraft's ranked
GEMM configurations as TileLang's hints, whose fields rebuild the configuration as TileLang's
scripts do (threads = block tiles over warp tiles x 32), and each builds."""
import pytest

import tilecraft
from tilecraft.carver.arch import CUDA
from tilecraft.carver.roller.rasterization import NoRasterization
from tilecraft.carver.template import MatmulTemplate, matmul
from tilecraft.errors import TileError


def test_hints_rebuild_their_configurations_the_way_tilelangs_scripts_do():
    template = MatmulTemplate(512, 512, 512).with_arch(CUDA("h100"))
    hints = template.recommend_hints(topk=3)
    assert len(hints) == 3
    times = [h.time_us for h in hints]
    assert times == sorted(times)
    for h in hints:
        block_m, block_n = h.block
        warp_m, warp_n = h.warp
        assert (block_m // warp_m) * (block_n // warp_n) * 32 == h.config["threads"]
        assert h.rstep == [h.config["block_K"]] and h.pipeline_stage == h.config["num_stages"]
        assert isinstance(h.rasterization_plan, NoRasterization)
        func = matmul.get_tir(512, 512, 512, **h.config)
        assert tilecraft.compile(func, target="interp") is not None
    assert template.equivalent_function() is not None


def test_template_misuse_is_an_error():
    with pytest.raises(TileError, match="give the GPU first"):
        MatmulTemplate(64, 64, 64).recommend_hints()
    with pytest.raises(TileError, match="M must be a positive int"):
        MatmulTemplate(0, 64, 64)
