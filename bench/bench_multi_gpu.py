"""Several GPUs: examples on a second GPU, mixed devices refused, tuning on one GPU or all.

The examples run on a GPU other than the current one, a call with tensors on two GPUs must be
refused, and tuning a GEMM on one GPU is set against tuning it on all of them:

    PYTHONPATH=$PWD python3 bench/bench_multi_gpu.py [--quick] [--device 1]
        [--shape 8192x8192x8192] [--top-fraction F] [--rounds 1] [--skip-examples] [--skip-tune] [--out dir]

(a) The GEMM, MHA forward (flash_attention) and MLA decode examples, compiled once each and
    called on tensors on cuda:<device> while cuda:0 is current: twice (the checked call, then
    the planned one), each time on fresh random inputs with the outputs poisoned with NaN,
    against float32 torch (relative Frobenius error); then the GEMM through its @jit with the
    output allocated (out_idx), which must be on cuda:<device>; cuda:0 must stay current.
(b) The GEMM called with A on cuda:0 and B on cuda:<device>: the error must name both.
(c) Tuning the GEMM's default space (configs=None: the cost model's candidates, its top 5%,
    warmup 25, rep 100) from cold caches, each run in a fresh process: with
    TILECRAFT_AUTOTUNE_GPUS=1 (one GPU, measured in the process) and with every GPU, alternately,
    --rounds times each: wall time, the picked config and its measured latency. Then each
    round's two picks are timed side by side on cuda:0 with the tuner's timer (L2 flushed),
    alternately, and the all-GPU pick's time over the one-GPU pick's is reported. The issue's
    bar: all-GPU wall <= 0.6x the one-GPU wall, and that ratio <= 1.02.

Prints a JSON summary and writes it to <out>/<date>_multi_gpu.json. --quick: smaller examples
and a 4096^3 GEMM. Needs two GPUs for (a) and (b), one for (c).
"""
import argparse
import datetime
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from statistics import median

from common import OUT, cuda_median_ms, gpu_facts, warm_gpu
from flash_attention import flash_attention
from gemm import matmul
from mla_decode import flash_mla_decode
import tilecraft
from tilecraft.carver.recommend import underlying
from tilecraft.errors import TileError

FAST_MATH = {"tl.enable_fast_math": True}


def ref_matmul(a, b):
    """The tuner's reference (module-level: it travels to the measuring processes)."""
    return a @ b


def rel_error(got, want) -> float:
    return float((got.float() - want).norm() / want.norm().clamp_min(1e-30))


def mha_reference(q, k, v, causal):
    """float32 attention on [batch, seq, heads, dim] tensors."""
    import torch
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


def mla_reference(q, q_pe, kv, k_pe):
    """float32 MLA decode; query head h reads KV head h // (heads // kv_heads)."""
    import torch
    b, h, d = q.shape
    kvh = kv.shape[2]
    qg, qpg = q.view(b, kvh, h // kvh, d), q_pe.view(b, kvh, h // kvh, -1)
    scores = (torch.einsum("bkgd,bskd->bkgs", qg, kv) +
              torch.einsum("bkgd,bskd->bkgs", qpg, k_pe)) / math.sqrt(d + q_pe.shape[-1])
    p = torch.softmax(scores, -1)
    return torch.einsum("bkgs,bskd->bkgd", p, kv).reshape(b, h, d)


@functools.lru_cache(maxsize=None)
def examples(quick: bool) -> dict:
    """name -> (kernel, input shapes, output shape, float32 reference): the prim_funcs compiled
    without out_idx, so the caller hands in (poisoned) outputs."""
    M, N, K = (1000, 520, 300) if quick else (4000, 2100, 1000)
    B, H, S, D = (2, 4, 256, 64) if quick else (2, 16, 2048, 128)
    b, h, s, d, pe = (2, 64, 300, 128, 32) if quick else (8, 128, 1024, 512, 64)
    return {
        "gemm": (tilecraft.compile(underlying(matmul)(M, N, K)), [(M, K), (K, N)], (M, N),
                 lambda x, y: x @ y),
        "mha": (tilecraft.compile(underlying(flash_attention)(B, H, S, D, True),
                                  pass_configs=FAST_MATH),
                [(B, S, H, D)] * 3, (B, S, H, D), lambda q, k, v: mha_reference(q, k, v, True)),
        "mla": (tilecraft.compile(underlying(flash_mla_decode)(b, h, 1, s, d, pe),
                                  pass_configs=FAST_MATH),
                [(b, h, d), (b, h, pe), (b, s, 1, d), (b, s, 1, pe)], (b, h, d), mla_reference),
    }


def check_example(kernel, shapes, out_shape, reference, device: str, calls: int = 2) -> float:
    """The worst relative error of `calls` calls of kernel on `device` (the first checked, the
    others planned), each on fresh random inputs with the output poisoned with NaN; inf when an
    output element was left unwritten."""
    import torch
    worst = 0.0
    for _ in range(calls):
        inputs = [torch.randn(*shape, device=device, dtype=torch.float16) for shape in shapes]
        out = torch.full(out_shape, float("nan"), device=device, dtype=torch.float16)
        kernel(*inputs, out)
        want = reference(*[x.float() for x in inputs])
        if torch.isnan(out).any():
            return float("inf")
        worst = max(worst, rel_error(out, want))
    return worst


def out_idx_device(device: str) -> dict:
    """The GEMM's @jit (out_idx) on `device`: where its output is, and its error."""
    import torch
    a = torch.randn(300, 200, device=device, dtype=torch.float16)
    b = torch.randn(200, 260, device=device, dtype=torch.float16)
    c = matmul(300, 260, 200)(a, b)
    return {"device": str(c.device), "rel_error": rel_error(c, a.float() @ b.float())}


def mixed_device_error(device: str) -> str:
    """The message of the GEMM called with A on cuda:0 and B on `device`."""
    import torch
    kernel = matmul(256, 256, 128)
    a = torch.randn(256, 128, device="cuda:0", dtype=torch.float16)
    b = torch.randn(128, 256, device=device, dtype=torch.float16)
    try:
        kernel(a, b)
    except TileError as e:
        return e.message
    raise AssertionError(f"a call with A on cuda:0 and B on {device} ran")


def run_examples(device: str, quick: bool) -> dict:
    import torch
    from tilecraft.backends.cuda.runtime import driver
    torch.cuda.set_device(0)
    report = {"device": device, "errors": {}}
    for name, (kernel, shapes, out_shape, reference) in examples(quick).items():
        report["errors"][name] = check_example(kernel, shapes, out_shape, reference, device)
    report["out_idx"] = out_idx_device(device)
    report["current_device_after"] = torch.cuda.current_device()
    report["context_is_cuda0s"] = driver.current_context() == driver.primary_context(0)
    message = mixed_device_error(device)
    report["mixed_device_error"] = message
    report["ok"] = (all(e < 1e-2 for e in report["errors"].values())
                    and report["out_idx"]["device"] == device
                    and report["out_idx"]["rel_error"] < 1e-2
                    and report["current_device_after"] == 0 and report["context_is_cuda0s"]
                    and "A on cuda:0" in message and f"B on {device}" in message)
    return report


# ---- tuning -----------------------------------------------------------------------------------

def tune_child(shape, top_fraction=None) -> None:
    """In a fresh process (the caches and the GPU count are set by the caller's environment):
    tune the GEMM's default space (measuring the tuner's default share of it, or
    `top_fraction`) and print one JSON line."""
    tuned = tilecraft.autotune(configs=None, ref_prog=ref_matmul, verbose=False,
                               top_fraction=top_fraction,
                               supply_type=tilecraft.TensorSupplyType.Randn)(matmul)
    start = time.perf_counter()
    result = tuned.tune(*shape)
    wall = time.perf_counter() - start
    print(json.dumps({"wall_s": wall, "config": result.config, "latency_ms": result.latency,
                      "gpus": result.gpus, "device": result.device, "phases_s": result.phases,
                      "candidates": len(result.trials),
                      "fastest": [[t.config, t.latency_ms] for t in sorted(
                          (t for t in result.trials if t.ok), key=lambda t: t.latency_ms)[:8]],
                      "measured": sum(t.ok for t in result.trials)}), flush=True)


def tune_in_fresh_process(shape, gpus, top_fraction=None) -> dict:
    env = dict(os.environ, TILECRAFT_CACHE_DIR=tempfile.mkdtemp(prefix="tilecraft_multi_gpu_"))
    env.pop("TILECRAFT_DISABLE_CACHE", None)
    env.pop("TILECRAFT_AUTOTUNE_GPUS", None)
    if gpus is not None:
        env["TILECRAFT_AUTOTUNE_GPUS"] = str(gpus)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--tune-child",
                           "--shape", "x".join(map(str, shape))] +
                          ([] if top_fraction is None else ["--top-fraction", str(top_fraction)]),
                          env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the tuning process failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def side_by_side(shape, one: dict, every: dict, rounds: int = 5) -> float:
    """Median over alternating rounds of (all-GPU pick's ms) / (one-GPU pick's ms) on cuda:0,
    by the tuner's timer (warmup 25, rep 100, L2 flushed)."""
    import torch
    if one == every:
        return 1.0
    kernels = [tilecraft.compile(underlying(matmul)(*shape, **c), out_idx=[-1])
               for c in (one, every)]
    M, N, K = shape
    a = torch.randn(M, K, device="cuda:0", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda:0", dtype=torch.float16)
    warm_gpu()  # both picks timed at settled clocks
    ratios = []
    for _ in range(rounds):
        ms = [cuda_median_ms(lambda k=k: k(a, b), 25, 100, flush_l2=True) for k in kernels]
        ratios.append(ms[1] / ms[0])
    return median(ratios)


def run_tuning(shape, rounds: int, top_fraction=None) -> dict:
    runs = []
    for _ in range(rounds):
        one = tune_in_fresh_process(shape, 1, top_fraction)
        every = tune_in_fresh_process(shape, None, top_fraction)
        ratio = side_by_side(shape, one["config"], every["config"])
        runs.append({"one_gpu": one, "all_gpus": every, "wall_ratio": every["wall_s"] /
                     one["wall_s"], "pick_ms_ratio": ratio})
        print(json.dumps(runs[-1]), flush=True)
    wall_ratio = median(r["all_gpus"]["wall_s"] for r in runs) / \
        median(r["one_gpu"]["wall_s"] for r in runs)
    worst_pick = max(r["pick_ms_ratio"] for r in runs)
    return {"shape": "x".join(map(str, shape)), "top_fraction": top_fraction, "runs": runs,
            "wall_ratio": wall_ratio,
            "worst_pick_ms_ratio": worst_pick,
            "ok": wall_ratio <= 0.6 and worst_pick <= 1.02 and
            all(r["all_gpus"]["gpus"] > 1 for r in runs)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="small examples and a 4096^3 GEMM to tune")
    p.add_argument("--device", type=int, default=1, help="the GPU the examples run on")
    p.add_argument("--shape", default=None, help="the GEMM to tune (default 8192x8192x8192)")
    p.add_argument("--top-fraction", type=float, default=None,
                   help="the share of the space to measure (default: the tuner's own)")
    p.add_argument("--rounds", type=int, default=1, help="tuning runs of each kind")
    p.add_argument("--skip-examples", action="store_true")
    p.add_argument("--skip-tune", action="store_true")
    p.add_argument("--out", default=OUT)
    p.add_argument("--tune-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shape = tuple(int(x) for x in (args.shape or ("4096x4096x4096" if args.quick else
                                                  "8192x8192x8192")).split("x"))
    if args.tune_child:
        return tune_child(shape, args.top_fraction)
    import torch
    summary = {"facts": gpu_facts(), "gpus": torch.cuda.device_count()}
    if not args.skip_examples:
        if torch.cuda.device_count() <= args.device:
            raise SystemExit(f"the examples need cuda:{args.device}; this host has "
                             f"{torch.cuda.device_count()} GPU(s)")
        summary["examples"] = run_examples(f"cuda:{args.device}", args.quick)
        torch.cuda.empty_cache()  # the tuning processes have the GPUs' memory to themselves
    if not args.skip_tune:
        summary["tuning"] = run_tuning(shape, args.rounds, args.top_fraction)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{stamp}_multi_gpu.json"), "w") as f:
        json.dump(summary, f, indent=1, default=repr)
    print(json.dumps(summary, indent=1, default=repr))
    return summary


if __name__ == "__main__":
    main()
