"""What the persistent MHA kernel's per-tile query load costs: a ceiling probe.

In the persistent warp-specialized kernel the consumers load each tile's query themselves
(ld.global -> st.shared), after the previous tile's output has left O_shared, which the
planner lays over Q_shared (3 stages of 128 x 128 K and V leave no room for both). The `qonce`
arm patches the generated source so that the query is loaded on a block's first tile only:
its results are wrong on purpose, and only its time is read. `qregs` and `vslot` are
correct forms of taking the load off the critical path (their docstrings). Beside cuDNN
attention and the unpatched kernel, with 3 and with 2 stages, 3 rounds each.

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
QUERY_LOAD = re.compile(
    r"( *)#pragma unroll\n *for \(int (l\w*) = 0; \2 < (\d+); \+\+\2\) \{\n"
    r" *tc::st_shared_128\((\(&Q_shared\[[^\n]*\]\)), tc::ld_global_128\((\(&Q\[[^\n]*\]\))\)\);"
    r"\n *\}\n")


class QueryLoad:
    """The consumers' per-tile query load in the generated source, and what the patches need
    to know about the tile loop around it."""

    def __init__(self, src: str):
        self.match = m = QUERY_LOAD.search(src)
        assert m, "query load not found"
        self.indent, self.var, self.n, self.dst, self.load = m.groups()
        self.tiles = int(re.search(r"tc_tile_1 < (\d+);", src).group(1))
        g = re.search(r"const int bx = tc_tile_1 % \((\d+)\);\n.*"
                      r"const int by = tc_tile_1 / \(\d+\) % \((\d+)\);", src, re.S)
        self.gx, self.gy = int(g.group(1)), int(g.group(2))

    def guarded(self, later: str) -> str:
        """The load on the block's first tile, `later` (statements) on the others."""
        i = self.indent
        return (f"{i}if (tc_tile_1_round == 0) {{\n{self.match.group(0)}{i}}} else {{\n"
                f"{i}  {later}\n{i}}}\n")

    def next_tile(self, body: str) -> str:
        """body with nbx, nby, nbz bound to the block's next tile, if it has one."""
        return ("      { const int nr = tc_tile_1_round + 1;\n"
                "        const int nt = nr * gridDim.x + (nr % 2 ? gridDim.x - 1 - blockIdx.x"
                " : blockIdx.x);\n"
                f"        if (nt < {self.tiles}) {{\n"
                f"          const int nbx = nt % {self.gx}, nby = nt / {self.gx} % {self.gy},"
                f" nbz = nt / {self.gx * self.gy};\n{body}        }} }}\n")

    def next_load(self) -> str:
        """The load's global address for the next tile's indices."""
        return self.load.replace("(bz)", "(nbz)").replace("bx *", "nbx *") \
            .replace("+ by)", "+ nby)")


def query_once(src: str) -> str:
    """The consumers' query load guarded to the block's first tile (wrong results)."""
    q = QueryLoad(src)
    return src[:q.match.start()] + q.guarded("") + src[q.match.end():]


def query_in_registers(src: str) -> str:
    """The next tile's query loaded into registers while the tile's last PV gemm runs, and
    stored to Q_shared at the next tile's start (once the output's TMA store has read the
    aliased O_shared)."""
    q = QueryLoad(src)
    store = f"#pragma unroll\n{q.indent}  for (int {q.var} = 0; {q.var} < {q.n}; ++{q.var}) " \
            f"tc::st_shared_128({q.dst}, tc_qn[{q.var}]);"
    src = src[:q.match.start()] + q.guarded(store) + src[q.match.end():]
    loop = src.index("    for (int tc_tile_1_round = 0")
    src = src[:loop] + f"    uint4 tc_qn[{q.n}];\n" + src[loop:]
    fetch = q.next_tile(f"          #pragma unroll\n          for (int {q.var} = 0; "
                        f"{q.var} < {q.n}; ++{q.var})\n            tc_qn[{q.var}] = "
                        f"tc::ld_global_128({q.next_load()});\n")
    norm = src.index("acc_o[l_11] = acc_o[l_11] / logsum")
    cut = src.rindex("tc::wgmma_commit_group();\n", 0, norm) + len("tc::wgmma_commit_group();\n")
    return src[:cut] + fetch + src[cut:]


def output_in_v_slot(src: str) -> str:
    """The output staged in the tile's last V stage (released to the producer only after
    the TMA store has read it; the tile must have one) instead of over Q_shared; each
    consumer warpgroup then loads its 64 rows of the next tile's query by cp.async as soon as
    its last score gemm is done (after the score loop), and waits for them at the next
    tile's start."""
    q = QueryLoad(src)
    seq = int(re.search(r"\(\(\(bz\) \* (\d+) \+ bx \* 128", q.load).group(1))
    heads = int(re.search(r"\) \* (\d+) \+ by\) \* 128", q.load).group(1))
    src = src[:q.match.start()] + q.guarded("tc::cp_async_wait_all();") + src[q.match.end():]
    fetch = q.next_tile(
        "          #pragma unroll\n          for (int l = 0; l < 8; ++l) {\n"
        "            const int r = tx / 128 * 64 + l * 8 + tx % 128 / 16, c = tx % 16 * 8;\n"
        "            tc::cp_async_cg_16((&Q_shared[c / 64 * 8192 + r * 64 + ((c % 64) / 8 ^ r % 8)"
        " * 8]),\n"
        f"                (&Q[(((nbz) * {seq} + nbx * 128 + r) * {heads} + nby) * 128 + c]), "
        "true);\n          }\n          tc::cp_async_commit();\n")
    last = re.search(r"      if \([^\n]*\) \{\n        tc::mbarrier_wait_parity\(\(&tma_full\["
                     r"\(tc_rounds\[0\] \+ (.+?)\) % 3 \+ 3\]\)", src)
    final, stage = last.start(), f"(tc_rounds[0] + {last.group(1)}) % 3"
    src = src[:final] + fetch + src[final:]
    release = f"tc::mbarrier_arrive_warp((&tma_empty[{stage} + 3]));\n"
    i = src.index(release, final)
    src = src[:i] + src[i + len(release):]
    src = src.replace("(&O_shared[", f"(&V_shared[{stage} * 16384 + ")
    commit = "        tc::tma_store_commit();\n      }\n"
    j = src.index(commit) + len(commit)
    return src[:j] + ("      if (tx == 0) tc::tma_store_wait<0>();\n"
                      "      tc::named_barrier_sync(1, 256);\n      " + release) + src[j:]


PATCHES = {"base": lambda src: src, "qonce": query_once, "qregs": query_in_registers,
           "vslot": output_in_v_slot}


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
                for stages, names in ((3, ("base", "qregs", "vslot", "qonce")),
                                      (2, ("base", "qonce")))
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
