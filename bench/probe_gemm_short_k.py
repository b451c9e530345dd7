"""Probes of where a short-K GEMM's time goes (8192x8192x1024: 16 k-steps per tile), each arm
patched into the generated source or compiled with other tiles or pass configs, timed beside
torch.matmul in rounds (bench/results/2026-11-25_gemm_pingpong_probe.md).

  pp*      ping-pong: the persistent one-warpgroup kernel (128 x 128 tiles, threads=128)
           patched into two consumer warpgroups taking the block's tiles in turn:
           - 256 consumer threads (warpgroup w = threadIdx.x / 128), the producer warpgroup after
             them, setmaxnreg 40 / 232;
           - warpgroup w takes the block's tile rounds w, w + 2, ...: its ring position starts
             at w * k_steps and advances by 2 * k_steps;
           - the main loops take turns (named barriers 3 and 4, 256 threads): a warpgroup waits
             for its turn before its first full-barrier wait and hands the turn over once its
             last k-step is issued. Taking turns is what makes the shared ring's parity waits
             unambiguous: the next tile's first stage is never waited on before this tile's last
             one was;
           - each warpgroup has its own staging tile (32 KB more shared memory) and its own
             epilogue barrier (1 + w, 128 threads).
  *noepi   timing only: no epilogue at all (nothing is stored)
  *nowait  timing only: the epilogue's second band does not wait for the first band's store
  *scaled  no zeroing of the accumulator; each tile's first k-step runs with scale-d = 0
  *mc      tl.enable_tma_multicast (clusters of two blocks; the kernel is then not persistent)
  *pmc     the persistent kernel patched into clusters of two neighbouring tiles sharing A
           (persistent_multicast; needs an even number of tile columns)

    python3 bench/probe_gemm_short_k.py 8192x8192x1024,8192x1024x8192 [rounds] [arms]
"""
import os
import re
import sys
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

import torch  # noqa: E402

import tilecraft  # noqa: E402
import tilecraft.codegen.cuda as cg  # noqa: E402
from bench_gemm import in_rounds, warm_gpu  # noqa: E402
from gemm import matmul  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402


def sub(pattern, repl, src, count):
    out, n = re.subn(pattern, repl, src)
    assert n == count, (pattern, n)
    return out


def pingpong(src, k_steps, staging_halves):
    src = sub(r"__launch_bounds__\(256, 1\)", "__launch_bounds__(384, 1)", src, 1)
    src = sub(r"is_producer_(thread|leader)\(128\)", r"is_producer_\1(256)", src, 2)
    src = sub(r"(if \(tc::is_producer_thread\(256\)\) \{\n)", r"\1    tc::setmaxnreg_dec<40>();\n",
              src, 1)
    head = ("  } else {\n    tc::setmaxnreg_inc<232>();\n"
            "    const int tc_wg = tc::warpgroup_index();\n"
            "    const int tx = threadIdx.x % 128;\n"
            f"    C_local_staged += tc_wg * {staging_halves};\n"
            f"    tc_rounds[0] = tc_wg * {k_steps};\n"
            "    if (tc_wg == 1) tc::named_barrier_arrive(3, 256);\n")
    src = sub(r"  \} else \{\n", head, src, 1)
    src = sub(r"for \(int tc_tile_1_round = 0, tc_tile_1 = blockIdx.x; (tc_tile_1 < \d+); "
              r"\+\+tc_tile_1_round, ",
              r"for (int tc_tile_1_round = tc_wg, tc_tile_1 = tc_wg * gridDim.x + (tc_wg % 2 ? "
              r"gridDim.x - 1 - blockIdx.x : blockIdx.x); \1; tc_tile_1_round += 2, ", src, 1)
    consumer = src.index("tc::setmaxnreg_inc<232>")
    pre, post = src[:consumer], src[consumer:]
    post = sub(r"tc_rounds\[0\] = tc_rounds\[0\] \+ (\d+);",
               lambda m: f"tc_rounds[0] = tc_rounds[0] + {2 * int(m.group(1))};", post, 1)
    post = sub(r"named_barrier_sync\(1, 128\)", "named_barrier_sync(1 + tc_wg, 128)", post, 2)
    # the turn: before the main loop, and handed over right after it
    post = sub(r"(\n\s*)(// gemm.py:33\n\s*for \(int k = 0;)",
               r"\1tc::named_barrier_sync(3 + tc_wg, 256);\1\2", post, 1)
    post = sub(r"(\n\s*)(tc::wgmma_wait_group<0>\(\);\n\s*tc::wgmma_fence_registers)",
               r"\1tc::named_barrier_arrive(4 - tc_wg, 256);\1\2", post, 1)
    return pre + post


def no_epilogue(src):
    """Timing only (the output is not written): the consumers go from one tile's main loop
    straight to the next, what a tile costs without its epilogue."""
    start = src.index("tc::mbarrier_arrive_warp((&tma_empty[(tc_rounds[0] + ",
                      src.index("tc::wgmma_fence_registers"))
    start = src.index("}\n", start) + 2
    end = src.index("tc_rounds[0] = tc_rounds[0] + ", start)
    return src[:start] + "      " + src[end:]


def no_band_wait(src):
    """Timing only (a race on the staging tile): the second band's stmatrix does not wait for
    the first band's TMA store to have read the staging tile."""
    first = src.index("tc::tma_store_commit();")
    wait = src.index("tc::tma_store_wait<0>();\n", first)
    return src[:wait] + src[wait + len("tc::tma_store_wait<0>();\n"):]


def scaled_first_step(src):
    """The accumulator is not zeroed before each tile's main loop: the first k-step's wgmmas
    take scale-d = 0 (D = A B) instead."""
    src = sub(r"\n\s*// gemm.py:32\n\s*#pragma unroll\n\s*for \(int l = 0; l < 128; \+\+l\) \{\n"
              r"\s*C_local\[l\] = 0.0f;\n\s*\}", "", src, 1)
    return sub(r"(tc::wgmma_m64n\d+k16_f32_f16<0, 1>\([^;]*), 1\);", r"\1, k > 0 || kk > 0);",
               src, src.count("tc::wgmma_m64n"))


def persistent_multicast(src):
    """The persistent kernel run as clusters of two blocks (2c, 2c + 1), whose tiles in every
    round are neighbours in one row of tiles (an even number of tile columns, no rasterization):
    they share the A tile, which block 0 of the cluster loads for both (TMA multicast); each
    block's empty barriers count both blocks' consumer warps."""
    assert re.search(r"const int bx = tc_tile_1 % \((\d+)\)", src), "rasterized or not persistent"
    columns = int(re.search(r"const int bx = tc_tile_1 % \((\d+)\)", src).group(1))
    assert columns % 2 == 0, columns
    src = sub(r"(__launch_bounds__\(384, 1\))", r"\1 __cluster_dims__(2, 1, 1)", src, 1)
    src = sub(r"(mbarrier_init\(\(&tma_empty\[\d\]\)), 8\)", r"\1, 16)", src,
              src.count("mbarrier_init((&tma_empty["))
    src = sub(r"tc::fence_barrier_init\(\);\n  \}\n  tc::barrier_all\(\);",
              "tc::fence_barrier_init();\n  }\n  tc::cluster_sync();", src, 1)
    src = sub(r"tc::tma_load_2d\(\((&A_shared\[.*?\])\), \(&A_tma\), (\(&tma_full\[.*?\]\)), ",
              r"if (tc::cluster_ctarank() == 0) tc::tma_load_2d_multicast((\1), (&A_tma), \2, 3, ",
              src, 1)
    src = sub(r"tc::mbarrier_arrive_warp\(", "tc::mbarrier_arrive_warp_cluster<2>(", src, 2)
    return sub(r"(\n  // gemm.py:25\n  tc::tma_store_wait<0>\(\);\n\})",
               r"\n  tc::cluster_sync();\1", src, 1)


PATCHES = {"pmc": persistent_multicast, "noepi": no_epilogue, "nowait": no_band_wait,
           "scaled": scaled_first_step}


def build(shape, config, arm, target=None):
    M, N, K = shape
    original = cg.emit_cuda

    def patched(lowered):
        src, names = original(lowered)
        if arm == "pp":
            staging = 128 * 128 * 2
            src = pingpong(src, -(-K // config["block_K"]), staging // 2)
            kernel = next(iter(lowered.kernels()))
            kernel.attrs["producer_threads"] = 256  # the launch: 256 consumers + 128 producer
            kernel.attrs["smem_bytes"] += staging
        elif arm in PATCHES:
            src = PATCHES[arm](src)
        return src, names
    cg.emit_cuda = patched
    try:
        func = underlying(matmul)(M, N, K, **config)
        configs = {"pp": {"tl.enable_persistent_tiles": True},
                   "mc": {"tl.enable_tma_multicast": True}}.get(arm)
        return tilecraft.compile(func, out_idx=[-1], target=target, pass_configs=configs)
    finally:
        cg.emit_cuda = original


ARMS = {
    "128x256s4": (dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=4), ""),
    "128x256s3": (dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3), ""),
    "128x128wg1s4": (dict(block_M=128, block_N=128, block_K=64, threads=128, num_stages=4), ""),
    "pp128x128s4": (dict(block_M=128, block_N=128, block_K=64, threads=128, num_stages=4), "pp"),
    "pp128x128s5": (dict(block_M=128, block_N=128, block_K=64, threads=128, num_stages=5), "pp"),
    "128x256s4noepi": (dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=4),
                       "noepi"),
    "128x256s3noepi": (dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3),
                       "noepi"),
    "128x256s4nowait": (dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=4),
                        "nowait"),
}
for _stages in (3, 4):
    ARMS[f"128x256s{_stages}scaled"] = (dict(block_M=128, block_N=256, block_K=64, threads=256,
                                             num_stages=_stages), "scaled")
for _stages in (3, 4):
    ARMS[f"256x128s{_stages}"] = (dict(block_M=256, block_N=128, block_K=64, threads=256,
                                       num_stages=_stages), "")
    ARMS[f"256x128s{_stages}mc"] = (dict(block_M=256, block_N=128, block_K=64, threads=256,
                                         num_stages=_stages), "mc")
    ARMS[f"256x128s{_stages}pmc"] = (dict(block_M=256, block_N=128, block_K=64, threads=256,
                                          num_stages=_stages), "pmc")
for _bn, _stage_counts in ((64, (4, 6)), (128, (4, 6)), (256, (3, 4))):
    for _stages in _stage_counts:
        ARMS[f"64x{_bn}s{_stages}"] = (dict(block_M=64, block_N=_bn, block_K=64, threads=128,
                                           num_stages=_stages), "")
for _bm, _bn in ((16, 32), (32, 16), (32, 32), (64, 32)):   # the carver's top picks at M 16
    ARMS[f"{_bm}x{_bn}k128s4"] = (dict(block_M=_bm, block_N=_bn, block_K=128, threads=128,
                                       num_stages=4), "")
TIMING_ONLY = ("noepi", "nowait")


def main():
    os.environ["TILECRAFT_DISABLE_CACHE"] = "1"
    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    arms = sys.argv[3].split(",") if len(sys.argv) > 3 else list(ARMS)
    warm_gpu()
    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        ref = (a.double() @ b.double()).float()
        kernels = []
        for name in arms:
            config, arm = ARMS[name]
            kernel = build((M, N, K), config, arm)
            out = kernel(a, b)
            err = float((out.float() - ref).norm() / ref.norm())
            print(f"{M}x{N}x{K} {name} rel err {err:.1e}", flush=True)
            assert err < 1e-2 or arm in TIMING_ONLY, (name, err)
            kernels.append(kernel)
        flop = 2.0 * M * N * K
        peer, *ours = in_rounds(rounds, [lambda: cuda_median_ms(lambda: a @ b, 5, 30, True)] + [
            lambda k=k: cuda_median_ms(lambda: k(a, b), 5, 30, True) for k in kernels], 0.5)
        print(f"{M}x{N}x{K} torch {flop / median(peer) / 1e9:.0f}", " ".join(
            f"{n} {flop / median(t) / 1e9:.0f} ({median(p / x for p, x in zip(peer, t)):.3f}x)"
            for n, t in zip(arms, ours)), flush=True)


if __name__ == "__main__":
    main()
