"""Wall time of tuning one GEMM from a cold start: the cost model's recommendation, pruning to
its best fraction, compilation in worker processes and measurement, beside torch.matmul and the
exhaustive search's best (the newest stored search, bench/results/*_carver_search.json).

    PYTHONPATH=$PWD python3 bench/bench_autotune_time.py [--shape 8192x8192x8192]
        [--top-fraction F] [--warmup 25] [--rep 100] [--out dir] [--dry-run]

Both caches start empty: TILECRAFT_CACHE_DIR points at a fresh temporary directory, which holds
the compiled programs and the tuning cache. --dry-run needs no GPU: it predicts and prunes as
the tuner does and compiles the kept candidates for sm_90a in the tuner's worker pool, then
prints the timings (nothing is measured or written). Results: bench/overhead.md.
"""
import argparse
import datetime
import glob
import json
import os
import tempfile
import time

from common import HERE, OUT, cuda_median_ms, gpu_facts, idle_gap_ms, warm_gpu
from gemm import matmul
import tilecraft
from tilecraft.autotuner import space, workers
from tilecraft.carver.recommend import underlying
from tilecraft.autotuner.results import OK
from tilecraft.autotuner.store import source_hash

COST_TARGET = "h100"


def shape_of(text: str) -> tuple:
    return tuple(int(x) for x in text.split("x"))


def cfg_text(c) -> str:
    return (f"{c['block_M']}x{c['block_N']}x{c['block_K']} s{c['num_stages']} "
            f"t{c['threads']}") if c else "-"


def exhaustive(shape) -> dict:
    """The stored exhaustive search's best for this shape, or for the stored shapes closest to
    it (same M and N or same M, N, K up to order) when it was not searched."""
    files = sorted(glob.glob(os.path.join(HERE, "results", "*_carver_search.json")))
    if not files:
        return {}
    text = "x".join(map(str, shape))
    # The newest search of this very shape, else the newest search's nearest shapes.
    for path in reversed(files):
        with open(path) as f:
            stored = json.load(f)
        if any(s["shape"] == text for s in stored["shapes"]):
            files.append(path)
            break
    else:
        with open(files[-1]) as f:
            stored = json.load(f)
    found = [s for s in stored["shapes"] if s["shape"] == text]
    near = found or [s for s in stored["shapes"]
                     if shape_of(s["shape"])[:2] == shape[:2] or
                     sorted(shape_of(s["shape"]))[:2] == sorted(shape)[:2]]
    return {"file": os.path.relpath(files[-1], os.path.join(HERE, "..")),
            "timer": stored.get("settings", {}).get("timer", "idle"),
            "same_shape": bool(found),
            "shapes": [{"shape": s["shape"], "best_config": s["best_config"],
                        "best_tflops": s["best_tflops"]} for s in near]}


def plan(shape, fraction) -> tuple:
    """(kept configs in the tuner's order, all candidates, predict seconds), as tuner.run."""
    fn = underlying(matmul)
    problem = space.split_call(fn, space.recommended_tunables(fn), shape, {}, None, "matmul")
    configs = space.with_pins(space.grid(space.recommended_space(fn, problem)), problem.pinned)
    start = time.perf_counter()
    preds = space.predict_best(fn, problem, configs, COST_TARGET, fraction)
    order = space.rank_legal(preds, COST_TARGET, "matmul", problem, None)
    keep = space.prune([preds[i].time for i in order], fraction)
    return [configs[order[i]] for i in keep], configs, time.perf_counter() - start, problem


def dry_run(shape, fraction, max_workers) -> dict:
    kept, configs, predict_s, problem = plan(shape, fraction)
    fn = underlying(matmul)
    address = workers.address_of(fn)
    tasks = [workers.CompileTask(i, address[0], address[1], source_hash(fn), problem.args,
                                 problem.kwargs, c, [-1], "sm_90a", {}, 180.0)
             for i, c in enumerate(kept)]
    start = time.perf_counter()
    with workers.Workers(max_workers) as pool:
        outcomes = pool.compile(tasks)
    compile_s = time.perf_counter() - start
    failed = [o.message for o in outcomes if o.status != OK]
    print(f"dry run, {os.cpu_count()} CPUs: {len(configs)} candidates, predict {predict_s:.2f} s; "
          f"{len(kept)} kept, compiled for sm_90a in {compile_s:.2f} s"
          f"{f' ({len(failed)} failed: {failed[0]})' if failed else ''}", flush=True)
    for c in kept:
        print("  ", cfg_text(c), flush=True)
    return {"predict_s": predict_s, "compile_s": compile_s, "kept": kept,
            "candidates": len(configs)}


def gpu_run(shape, fraction, warmup, rep, out_dir) -> dict:
    import torch
    M, N, K = shape
    flop = 2.0 * M * N * K
    warm_gpu()
    # Tuned on inputs drawn as the exhaustive search and the side-by-side draw theirs
    # (torch.randn): an H100 is power-limited, and its clocks under a GEMM depend on the data.
    tuned = tilecraft.autotune(configs=None, warmup=warmup, rep=rep, top_fraction=fraction,
                               ref_prog=lambda a, b: a @ b, cost_target=COST_TARGET,
                               supply_type=tilecraft.TensorSupplyType.Randn,
                               verbose=False)(matmul)
    start = time.perf_counter()
    result = tuned.tune(M, N, K)
    wall = time.perf_counter() - start
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    # Timed as the exhaustive search times (its default timer: L2 flushed, back to back).
    torch_ms = cuda_median_ms(lambda: torch.matmul(a, b), 5, 20, flush_l2=True)
    ours_ms = cuda_median_ms(lambda: result.kernel(a, b), 5, 20, flush_l2=True)
    measured = [t for t in result.trials if t.status == OK]
    side = side_by_side(result, shape, a, b)
    report = {"shape": "x".join(map(str, shape)), "facts": gpu_facts(), "wall_s": wall,
              "side_by_side": side,
              "phases_s": result.phases, "candidates": len(result.trials),
              "compiled": len(measured), "config": result.config,
              "tflops": flop / ours_ms / 1e9, "torch_tflops": flop / torch_ms / 1e9,
              "tuner_latency_ms": result.latency, "top_fraction": fraction,
              "warmup": warmup, "rep": rep, "exhaustive": exhaustive(shape),
              "measured": [{"config": t.config, "ms": t.latency_ms,
                            "predicted_us": t.predicted_s * 1e6} for t in measured]}
    _write(report, out_dir)
    return report


def side_by_side(result, shape, a, b, rounds: int = 5) -> dict | None:
    """The chosen kernel and the exhaustive search's best config for this shape, timed in
    alternation in this run (clocks drift by several percent between runs, so a ratio against
    a stored number says little): median over rounds of best_ms / chosen_ms."""
    stored = exhaustive(shape)
    if not stored.get("same_shape"):
        return None
    best_config = stored["shapes"][0]["best_config"]
    best = tilecraft.compile(underlying(matmul)(*shape, **{"swizzle_panel": 8, **best_config}),
                             out_idx=[-1])
    # Two timers: warm L2 with the GPU idling between runs (idle_gap_ms), and the tuner's own
    # (the profiler: L2 flushed, runs back to back). On a power-limited H100 they do not
    # always rank two close configurations alike.
    ratios, flushed = [], []
    for _ in range(rounds):
        chosen_ms = idle_gap_ms(lambda: result.kernel(a, b), 5, 20)
        best_ms = idle_gap_ms(lambda: best(a, b), 5, 20)
        ratios.append(best_ms / chosen_ms)
        chosen_ms = cuda_median_ms(lambda: result.kernel(a, b), 5, 20, flush_l2=True)
        best_ms = cuda_median_ms(lambda: best(a, b), 5, 20, flush_l2=True)
        flushed.append(best_ms / chosen_ms)
    return {"exhaustive_best": best_config, "ratios": ratios,
            "median_ratio": sorted(ratios)[len(ratios) // 2], "ratios_tuner_timer": flushed,
            "median_ratio_tuner_timer": sorted(flushed)[len(flushed) // 2]}


def _write(report, out_dir):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{stamp}_autotune_time")
    with open(base + ".json", "w") as f:
        json.dump(report, f, indent=1, default=repr)
    p = report["phases_s"]
    lines = [f"# autotune_time ({stamp})", "", str(report["facts"]), "",
             f"Tuning matmul {report['shape']} from cold caches (compile and tuning): "
             f"{report['wall_s']:.1f} s wall (predict {p.get('predict', 0):.1f} s, compile "
             f"{p.get('compile', 0):.1f} s, measure {p.get('measure', 0):.1f} s); "
             f"{report['candidates']} candidates, {report['compiled']} compiled and measured "
             f"(top fraction {report['top_fraction']}, warmup {report['warmup']}, rep "
             f"{report['rep']}).", "",
             f"Chosen {cfg_text(report['config'])}: {report['tflops']:.0f} TFLOP/s; "
             f"torch.matmul {report['torch_tflops']:.0f} TFLOP/s.", ""]
    side = report.get("side_by_side")
    if side:
        lines += [f"Side by side in this run, chosen vs the exhaustive best "
                  f"{cfg_text(side['exhaustive_best'])} (best ms / chosen ms, "
                  f"{len(side['ratios'])} alternating rounds): median "
                  f"{side['median_ratio']:.3f} ({', '.join(f'{r:.3f}' for r in side['ratios'])}) "
                  f"timed with warm L2 and idle gaps; "
                  f"{side['median_ratio_tuner_timer']:.3f} "
                  f"({', '.join(f'{r:.3f}' for r in side['ratios_tuner_timer'])}) by the "
                  f"tuner's timer (L2 flushed, back to back), which the exhaustive search "
                  f"({report['exhaustive'].get('timer', 'idle')}) used.", ""]
    lines += ["| exhaustive search shape | best config | best TFLOP/s |", "|---|---|---|"]
    for s in report["exhaustive"].get("shapes", []):
        lines.append(f"| {s['shape']} | {cfg_text(s['best_config'])} | {s['best_tflops']:.0f} |")
    lines += ["", "| measured config | ms | predicted us |", "|---|---|---|"]
    for m in sorted(report["measured"], key=lambda m: m["ms"]):
        lines.append(f"| {cfg_text(m['config'])} | {m['ms']:.3f} | {m['predicted_us']:.0f} |")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def cold_caches() -> None:
    """A fresh cache folder for this run. Set here, not at import: compile workers are spawned
    processes that import this module again, and they must share the caller's folder (the
    caller loads what they compiled from it)."""
    os.environ["TILECRAFT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilecraft_autotune_time_")
    os.environ.pop("TILECRAFT_DISABLE_CACHE", None)


def main(argv=None):
    cold_caches()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="8192x8192x8192")
    p.add_argument("--top-fraction", type=float, default=space.RECOMMENDED_FRACTION)
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--rep", type=int, default=100)
    p.add_argument("--workers", type=int, default=None, help="compile processes (default: "
                   "one per CPU, as the tuner)")
    p.add_argument("--out", default=OUT)
    p.add_argument("--dry-run", action="store_true",
                   help="predict and compile for sm_90a without a GPU; measure nothing")
    args = p.parse_args(argv)
    shape = shape_of(args.shape)
    if args.dry_run:
        return dry_run(shape, args.top_fraction, args.workers)
    return gpu_run(shape, args.top_fraction, args.warmup, args.rep, args.out)


if __name__ == "__main__":
    main()
