"""What the persistent MHA kernel's per-tile query load costs: a ceiling probe.

In the persistent warp-specialized kernel the consumers load each tile's query themselves
(ld.global -> st.shared), after the previous tile's output has left O_shared, which the
planner lays over Q_shared (3 stages of 128 x 128 K and V leave no room for both). The `qonce`
arm patches the generated source so that the query is loaded on a block's first tile only:
its results are wrong on purpose, and only its time is read. Beside cuDNN attention and the
unpatched kernel, with 3 and with 2 stages, 3 rounds each.

    python3 bench/probe_mha_query_load.py [rounds] [arms, e.g. base3,qregs3,qonce3]
"""
import os
import re
import sys
from statistics import median

import torch
from torch.nn.attention import SDPBackend

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]
import tilecraft  # noqa: E402
import tilecraft.codegen.cuda as cg  # noqa: E402
from bench_attention import sdpa_ms  # noqa: E402
from bench_gemm import in_rounds, warm_gpu  # noqa: E402
from flash_attention import flash_attention  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402

SHAPES = [(32, 32, 1024, 128, False), (16, 32, 2048, 128, True), (8, 32, 4096, 128, False)]
QUERY_LOAD = ("      #pragma unroll\n      for (int l = 0; l < 8; ++l) {\n"
              "        tc::st_shared_128((&Q_shared[")


def query_once(src: str) -> str:
    """The consumers' query load guarded to the block's first tile."""
    i = src.index(QUERY_LOAD)
    j = src.index("}\n", src.index("tc::st_shared_128", i)) + 2
    return src[:i] + "      if (tc_tile_1_round == 0) {\n" + src[i:j] + "      }\n" + src[j:]


def query_in_registers(src):
    """Next tile's query loaded into registers while the tile's last PV gemm runs; stored to
    Q_shared at the next tile's start (after the output store has left the aliased buffer)."""
    m = re.search(r"( *)#pragma unroll\n *for \(int (l\w*) = 0; \2 < (\d+); \+\+\2\) \{\n *tc::st_shared_128\((\(&Q_shared\[[^\n]*\]\)), tc::ld_global_128\((\(&Q\[[^\n]*\]\))\)\);\n *\}\n", src)
    assert m, "query load not found"
    ind, var, n, dst, load = m.groups()
    n = int(n)
    tiles = int(re.search(r"tc_tile_1 < (\d+);", src).group(1))
    store = (f"{ind}if (tc_tile_1_round == 0) {{\n{ind}  #pragma unroll\n{ind}  for (int {var} = 0; {var} < {n}; ++{var}) "
             f"tc::st_shared_128({dst}, tc::ld_global_128({load}));\n{ind}}} else {{\n{ind}  #pragma unroll\n"
             f"{ind}  for (int {var} = 0; {var} < {n}; ++{var}) tc::st_shared_128({dst}, tc_qn[{var}]);\n{ind}}}\n")
    src = src[:m.start()] + store + src[m.end():]
    # declare the registers before the consumers' tile loop
    loop = src.index("    for (int tc_tile_1_round = 0")
    src = src[:loop] + f"    uint4 tc_qn[{n}];\n" + src[loop:]
    # the next tile's indices, as the tile loop computes them
    nxt = load.replace("(bz)", "(nbz)").replace("bx *", "nbx *").replace("+ by)", "+ nby)")
    grid = re.search(r"const int bx = tc_tile_1 % \((\d+)\);\n.*const int by = tc_tile_1 / \(\d+\) % \((\d+)\);", src, re.S)
    gx, gy = int(grid.group(1)), int(grid.group(2))
    fetch = (f"        {{ const int nr = tc_tile_1_round + 1; const int nt = nr * gridDim.x + (nr % 2 ? gridDim.x - 1 - blockIdx.x : blockIdx.x);\n"
             f"          if (nt < {tiles}) {{ const int nbx = nt % {gx}, nby = nt / {gx} % {gy}, nbz = nt / {gx * gy};\n"
             f"            #pragma unroll\n            for (int {var} = 0; {var} < {n}; ++{var}) tc_qn[{var}] = tc::ld_global_128({nxt}); }} }}\n")
    # after the last PV's commit (the last wgmma_commit_group before the normalization)
    norm = src.index("acc_o[l_11] = acc_o[l_11] / logsum") if "acc_o[l_11]" in src else None
    cut = src.rindex("tc::wgmma_commit_group();\n", 0, norm) + len("tc::wgmma_commit_group();\n")
    return src[:cut] + fetch + src[cut:]


PATCHES = {"base": lambda src: src, "qonce": query_once, "qregs": query_in_registers}


def build(shape, patch, stages):
    b, h, s, d, causal = shape
    original = cg.emit_cuda

    def patched(lowered):
        src, names = original(lowered)
        return PATCHES[patch](src), names
    cg.emit_cuda = patched
    try:
        func = underlying(flash_attention)(b, h, s, d, causal, block_M=128, block_N=128,
                                           num_stages=stages, threads=256)
        return tilecraft.compile(func, out_idx=[-1], pass_configs={"tl.enable_fast_math": True})
    finally:
        cg.emit_cuda = original


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    wanted = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    os.environ["TILECRAFT_DISABLE_CACHE"] = "1"  # the patched sources must not be cached
    warm_gpu()
    for shape in SHAPES:
        b, h, s, d, causal = shape
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        ref = torch.nn.functional.scaled_dot_product_attention(
            qt.float(), kt.float(), vt.float(), is_causal=causal).transpose(1, 2)
        arms = {f"{name}{stages}": build(shape, name, stages)
                for stages, names in ((3, ("base", "qregs", "qonce")), (2, ("base", "qonce")))
                for name in names if wanted is None or f"{name}{stages}" in wanted}
        for name, kern in arms.items():
            err = float((kern(q, k, v).float() - ref).norm() / ref.norm())
            assert name.startswith("qonce") or err < 1e-2, (name, err)
        flop = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        timers = [lambda: sdpa_ms(qt, kt, vt, causal, SDPBackend.CUDNN_ATTENTION)]
        timers += [lambda kern=kern: cuda_median_ms(lambda: kern(q, k, v), 5, 20, False)
                   for kern in arms.values()]
        times = in_rounds(rounds, timers, 0.5)
        print(shape, "cudnn %.0f" % (flop / median(times[0]) / 1e9), " ".join(
            f"{n} {flop / median(t) / 1e9:.0f} ({median(c / x for c, x in zip(times[0], t)):.3f}x)"
            for n, t in zip(arms, times[1:])), flush=True)


if __name__ == "__main__":
    main()
