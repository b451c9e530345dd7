"""A program served from the disk cache says what the compiler said when it was built: the
warnings of lowering (here: a tile-form atomic that cannot use TMA) are kept with the program
and given again, at the user's line, on every compile."""
import os
import warnings

import tilecraft
from tilecraft.carver.recommend import underlying


def test_a_cached_program_repeats_its_lowering_warnings(example, tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILECRAFT_DISABLE_CACHE", raising=False)
    gemm = example("gemm")
    func = underlying(gemm.matmul_splitk)(300, 136, 130, split_k=4, threads=256, block_M=128,
                                          block_N=128, block_K=64, num_stages=2)
    seen = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tilecraft.compile(func, target="sm_90a",
                              pass_configs={"tl.disable_tma_store": True})
        seen.append([(str(w.message), os.path.basename(w.filename)) for w in caught
                     if "runs as element-wise atomics" in str(w.message)])
    assert os.listdir(tmp_path / "programs"), "the second compile was not a cache hit"
    assert len(seen[0]) == 1 and seen[0] == seen[1]
    assert seen[0][0][1] == "gemm.py"
