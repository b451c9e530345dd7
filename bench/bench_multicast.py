"""TMA multicast on and off (pass config tl.enable_tma_multicast), side by side in one process:
the GEMM, attention and MLA examples, each kernel and its peer timed in alternating rounds.

    python bench/bench_multicast.py [--rounds 3] [--tag multicast_ab] [--out dir]
"""
import argparse
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import tilecraft  # noqa: E402
import flash_attention as fa  # noqa: E402
import gemm  # noqa: E402
import mla_decode  # noqa: E402
from bench_gemm import warm_gpu, write_results  # noqa: E402
from bench_mla import mla_inputs, torch_mla  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402

MULTICAST = {"tl.enable_tma_multicast": True}


def cases():
    """(name, {"on"/"off": kernel}, run(kernel), peer(), flop)."""
    for M, N, K in ((8192, 8192, 8192), (8192, 1024, 8192)):
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        func = underlying(gemm.matmul)(M, N, K, swizzle_panel=8, block_M=128, block_N=256,
                                       block_K=64, threads=256, num_stages=4)
        yield (f"gemm {M}x{N}x{K}", func, lambda k, a=a, b=b: k(a, b),
               lambda a=a, b=b: torch.matmul(a, b), 2.0 * M * N * K, {})
    B, H, S, D = 8, 32, 4096, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
    func = underlying(fa.flash_attention)(B, H, S, D, False, block_M=128, block_N=128,
                                          num_stages=2, threads=256)
    yield ("mha S4096", func, lambda kern: kern(q, k, v), cudnn, 4.0 * B * H * S * S * D,
           {"tl.enable_fast_math": True})
    Bm, Hm, Dm, PE = 64, 128, 512, 64
    for kv_len in (1024, 4096):
        q1, qp, kv, kp = mla_inputs(kv_len, Bm, Hm, Dm)
        func = underlying(mla_decode.flash_mla_decode)(Bm, Hm, 1, kv_len, Dm, PE, block_N=64,
                                                       block_H=64, num_stages=2, threads=256)
        flop = 2.0 * Bm * Hm * kv_len * (Dm + PE) + 2.0 * Bm * Hm * kv_len * Dm
        yield (f"mla KV{kv_len}", func, lambda kern, t=(q1, qp, kv, kp): kern(*t),
               lambda t=(q1, qp, kv, kp): torch_mla(*t), flop, {})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--tag", default="multicast_ab")
    args = parser.parse_args()
    warm_gpu()
    rows = []
    for name, func, run, peer, flop, configs in cases():
        kernels = {mode: tilecraft.compile(func, out_idx=[-1], pass_configs={
            **configs, **(MULTICAST if mode == "on" else {})}) for mode in ("on", "off")}
        assert "__cluster_dims__" in kernels["on"].get_kernel_source()
        for r in range(args.rounds):
            for mode, kern in kernels.items():
                # The peer right before each timing: clocks drift under a sustained load.
                # MLA is timed from a cold L2 on both sides, as in bench_mla.py.
                flush = name.startswith("mla")
                peer_ms = cuda_median_ms(peer, 3, 20, flush)
                ms = cuda_median_ms(lambda: run(kern), 3, 20, flush)
                rows.append({"case": name, "multicast": mode, "round": r,
                             "tflops": flop / ms / 1e9, "ratio": peer_ms / ms})
                print(f"{name} multicast {mode} round {r}: {flop / ms / 1e9:.0f} TFLOP/s, "
                      f"{peer_ms / ms:.3f}x the peer", flush=True)
    path = write_results(args.out, args.tag, rows, [
        ("case", lambda r: r["case"]), ("multicast", lambda r: r["multicast"]),
        ("round", lambda r: str(r["round"])), ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
        ("x peer", lambda r: f"{r['ratio']:.3f}")],
        notes="peers: torch.matmul, SDPA cuDNN, the torch MLA reference")
    print(open(path).read())


if __name__ == "__main__":
    main()
