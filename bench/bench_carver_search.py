"""Exhaustive GEMM tile search beside the cost model's top 5%, on the ten shapes of the paper's
table 3 (fp16, A row-major M x K, B row-major K x N, fp32 accumulation), with torch.matmul.

Every configuration of the space is compiled for the GPU's arch in parallel worker processes
(which also ask the cost model for its predicted time); those that compile are the legal ones
and are all measured once. Per shape the report gives the best measured configuration, the best
measured among the cost model's top 5% of the legal ones, their ratio, and whether it is within
2%.

    python bench/bench_carver_search.py [--shapes 512x1024x8192,...] [--max-configs N]
                                        [--workers 16] [--out dir] [--dry-run]
                                        [--rerank bench/results/<date>_carver_search.json]

--dry-run needs no GPU: it compiles and predicts a few configurations per shape for sm_90a and
prints what it would measure. --rerank FILE.json needs neither a GPU nor nvcc: it predicts every
row of a stored search again with the current cost model and reports, per shape, whether the
new top 5% holds a config within 2% of the measured best. A search writes its report to --out
(bench/.out/); the searches kept for --rerank and bench_autotune_time.py are in bench/results/.
Results: bench/carver_search.md.
"""
import argparse
import datetime
import itertools
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from common import OUT, cuda_median_ms, idle_gap_ms
from gemm import matmul
import tilecraft
from tilecraft.autotuner.space import RECOMMENDED_FRACTION, keep_count, predict_one
from tilecraft.autotuner.workers import CompileTimeout, deadline
from tilecraft.carver.recommend import preference, underlying
from tilecraft.errors import TileError
from tilecraft.placement import machine_target
from tilecraft.target import cost_target_for

SHAPES = [(512, 1024, 8192), (512, 12288, 12288), (512, 28672, 8192), (2048, 12288, 49152),
          (4096, 1024, 7168), (4096, 14336, 14336), (4096, 28672, 8192), (8192, 8192, 28672),
          (8192, 28672, 8192), (16384, 1024, 7168)]
SPACE = {"block_M": [64, 128, 256], "block_N": [64, 128, 256], "block_K": [32, 64],
         "num_stages": [2, 3, 4], "threads": [128, 256]}
FIXED = {"swizzle_panel": 8}
MIN_LEGAL = 100            # the search must cover at least this many legal configs per shape
COST_TARGET = None         # the cost model's hardware (--target): the measured GPU's model
COMPILE_TIMEOUT_S = 180.0  # per configuration, inside the worker
MAX_REL_ERROR = 1e-2       # fp16 output of an fp32-accumulated product is ~1e-4 off
WITHIN = 0.02
DRY_RUN_CONFIGS = 6
SLOW_FACTOR = 10.0


def shape_text(shape) -> str:
    return "x".join(str(x) for x in shape)


def all_configs() -> list:
    names = list(SPACE)
    return [{**dict(zip(names, values)), **FIXED} for values in itertools.product(*SPACE.values())]


def spread(items: list, n) -> list:
    """n items evenly spaced over the list, first and last included (all with n None or
    >= len), so a capped run still spans the tile sizes rather than one corner of the product;
    the uneven stride also alternates the innermost parameters."""
    if n is None or n >= len(items):
        return list(items)
    return [items[round(i * (len(items) - 1) / max(1, n - 1))] for i in range(n)]


def compile_and_predict(task) -> dict:
    """A worker's job for one (shape, config): compile it exactly as the parent will (so the
    parent's compile is a hit in the disk cache under TILECRAFT_CACHE_DIR) and predict it."""
    si, ci, shape, config, arch, cost_target = task
    out = {"shape": si, "index": ci, "status": "ok", "message": ""}
    start = time.perf_counter()
    try:
        with deadline(COMPILE_TIMEOUT_S):
            kernel = tilecraft.compile(underlying(matmul)(*shape, **config), out_idx=[-1],
                                       target=arch)
        out.update(smem=kernel.shared_memory, regs=kernel.n_regs, spills=kernel.n_spills)
    except TileError as e:  # the compiler's verdict: illegal (e.g. over 227 KiB of shared memory)
        out.update(status="illegal", message=str(e).strip().splitlines()[0])
    except CompileTimeout as e:
        out.update(status="timeout", message=str(e))
    except Exception as e:  # noqa: BLE001 - a compiler bug is reported, not mistaken for illegal
        out.update(status="error", message=f"{type(e).__name__}: {e}".splitlines()[0])
    out["compile_s"] = time.perf_counter() - start
    pred = predict_one(underlying(matmul), shape, {}, config, cost_target, COMPILE_TIMEOUT_S)
    out.update(predicted_s=pred.time if math.isfinite(pred.time) else None,
               model_reason=pred.reason, model_smem=pred.smem, model_regs=pred.regs)
    return out


def compile_all(shapes, configs, arch, workers) -> list:
    """rows[si][ci]: each configuration's compile outcome and prediction, all shapes at once."""
    tasks = [(si, ci, shape, cfg, arch, COST_TARGET) for si, shape in enumerate(shapes)
             for ci, cfg in enumerate(configs)]
    rows = [[None] * len(configs) for _ in shapes]
    start, step = time.time(), max(1, len(tasks) // 20)
    # spawn, not fork: the parent may already hold CUDA and torch's threads.
    with ProcessPoolExecutor(max_workers=workers,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(compile_and_predict, t) for t in tasks]
        for done, future in enumerate(as_completed(futures), start=1):
            r = future.result()
            rows[r["shape"]][r["index"]] = r
            if done % step == 0 or done == len(tasks):
                print(f"compiled {done}/{len(tasks)} in {time.time() - start:.0f} s", flush=True)
    for si, shape in enumerate(shapes):
        for ci, r in enumerate(rows[si]):
            r.update(config=configs[ci], shape=shape_text(shape))
    return rows


def model_order(rows: list) -> list:
    """The legal rows as the autotuner ranks recommended candidates (carver's `preference`);
    rows the model rejects last."""
    legal = [r for r in rows if r["status"] != "illegal"]
    return sorted(legal, key=lambda r: (r["predicted_s"] is None,) + preference(
        r["predicted_s"] or 0.0, r["config"].get("num_stages"), r["model_smem"] or 0,
        r["model_regs"] or 0) + (r["index"],))


def summarize(shape, rows: list, torch_tflops=None) -> dict:
    """One shape's verdict from its rows (measured ones carry `ms` and status "ok")."""
    M, N, K = shape
    ordered = model_order(rows)
    top = ordered[:keep_count(len(ordered), RECOMMENDED_FRACTION)] if ordered else []
    ok = [r for r in ordered if r["status"] == "ok" and r.get("ms")]
    best = min(ok, key=lambda r: r["ms"], default=None)
    best_top = min((r for r in top if r in ok), key=lambda r: r["ms"], default=None)
    tflops = lambda r: 2.0 * M * N * K / r["ms"] / 1e9 if r else None  # noqa: E731
    ratio = best["ms"] / best_top["ms"] if best and best_top else None
    return {"shape": shape_text(shape), "legal": len(ordered),
            "illegal": sum(r["status"] == "illegal" for r in rows),
            "failed": sum(r["status"] not in ("ok", "illegal") for r in ordered),
            "model_rejected_legal": sum(r["predicted_s"] is None for r in ordered),
            "top_k": len(top), "best_config": best and best["config"], "best_tflops": tflops(best),
            "best_model_rank": ordered.index(best) + 1 if best else None,
            "top_config": best_top and best_top["config"], "top_tflops": tflops(best_top),
            "ratio": ratio, "within_2pct": ratio is not None and ratio >= 1.0 - WITHIN,
            "torch_tflops": torch_tflops,
            "max_rel_error": max((r["rel_error"] for r in ok), default=None)}


def rerank(path: str, shapes=None) -> list:
    """The stored measurements of `path` ranked by the current cost model: one summary per
    shape (as `summarize`), with every row's prediction replaced by today's. The verdict
    (status) and the measured times stay those of the stored run."""
    with open(path) as f:
        stored = json.load(f)
    global COST_TARGET
    if COST_TARGET is None:  # the model of the GPU the search was measured on
        COST_TARGET = cost_target_for(stored["facts"].get("gpu"), stored["settings"]["arch"])
    by_shape: dict = {}
    for r in stored["rows"]:
        by_shape.setdefault(r["shape"], []).append(r)
    wanted = [shape_text(s) for s in shapes] if shapes else list(by_shape)
    summaries = []
    for text in wanted:
        shape = tuple(int(x) for x in text.split("x"))
        rows = []
        for r in by_shape.get(text, []):
            pred = predict_one(underlying(matmul), shape, {}, r["config"], COST_TARGET)
            rows.append({**r, "predicted_s": pred.time if math.isfinite(pred.time) else None,
                         "model_reason": pred.reason, "model_smem": pred.smem,
                         "model_regs": pred.regs})
        summaries.append(summarize(shape, rows))
    return summaries


def rerank_table(summaries) -> str:
    hits = sum(s["within_2pct"] for s in summaries)
    lines = [f"current cost model ({COST_TARGET}): the top 5% holds a config within 2% of the "
             f"measured best for {hits} of {len(summaries)} shapes",
             "| shape | best config | best TFLOP/s | model rank of best | top-5% (k) best "
             "config | TFLOP/s | ratio | within 2% |", "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s['shape']} | {_cfg(s['best_config'])} | {_num(s['best_tflops'])} | "
                     f"{s['best_model_rank'] or '-'} | ({s['top_k']}) {_cfg(s['top_config'])} "
                     f"| {_num(s['top_tflops'])} | {_num(s['ratio'], 3)} | "
                     f"{'yes' if s['within_2pct'] else 'no'} |")
    return "\n".join(lines)


# How configurations are timed: "flushed" (the autotuner's own timer: the L2 flushed before
# each run, runs back to back) or "idle" (warm L2, the GPU spinning between runs, SPIN_CYCLES).
# On a power-limited H100 the two rank close configurations differently by a few percent, so
# the exhaustive best is compared with the tuner's choice under the tuner's timer.
TIMER = "flushed"


def gpu_ms(torch, fn, warmup: int, rep: int) -> float:
    """Median CUDA-event milliseconds of fn() over rep runs after warmup, by TIMER (the idle
    timer: common.idle_gap_ms)."""
    if TIMER == "flushed":
        return cuda_median_ms(fn, warmup, rep, flush_l2=True)
    return idle_gap_ms(fn, warmup, rep)


def measure_shape(torch, shape, rows, arch, warmup, rep) -> float:
    """Time torch.matmul, then every legal config of the shape (checked against an fp32
    product); fills the rows in place and returns torch's TFLOP/s."""
    M, N, K = shape
    flop = 2.0 * M * N * K
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    ref = a.float() @ b.float()
    ref_norm = ref.norm()
    # Timed right before the shape's candidates: clocks drift over a run.
    torch_ms = gpu_ms(torch, lambda: torch.matmul(a, b), 5, 20)
    print(f"{shape_text(shape)}: torch.matmul {flop / torch_ms / 1e9:.0f} TFLOP/s", flush=True)
    start = time.time()
    for r in rows:
        if r["status"] != "ok":
            continue
        try:
            t0 = time.perf_counter()
            kernel = tilecraft.compile(underlying(matmul)(*shape, **r["config"]), out_idx=[-1],
                                       target=arch)
            r["load_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            c = kernel(a, b)  # also the first warmup run
            torch.cuda.synchronize()
            first_ms = (time.perf_counter() - t0) * 1e3
            r["rel_error"] = float((c.float() - ref).norm() / ref_norm)
            del c
            if not r["rel_error"] <= MAX_REL_ERROR:
                r.update(status="wrong result", message=f"relative error {r['rel_error']:.2e}")
                continue
            # A config far slower than torch (e.g. one spilling its accumulators) cannot be
            # the best: one timed run is enough and keeps the whole search within budget.
            # The 20 ms allow for loading the module on the first call.
            r["quick"] = first_ms > SLOW_FACTOR * torch_ms + 20.0
            r["ms"] = gpu_ms(torch, lambda: kernel(a, b), *((0, 1) if r["quick"] else
                                                            (warmup, rep)))
            r["tflops"] = flop / r["ms"] / 1e9
        except Exception as e:  # noqa: BLE001 - one failing candidate must not end the run
            r.update(status="run error", message=f"{type(e).__name__}: {e}".splitlines()[0])
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a sticky CUDA error: the rest fail likewise
                pass
    s = summarize(shape, rows, flop / torch_ms / 1e9)
    loads = sorted(r["load_s"] for r in rows if "load_s" in r) or [0.0]
    # A median load far above a few milliseconds means the worker's compile cache missed.
    print(f"{s['shape']}: measured {s['legal']} in {time.time() - start:.0f} s (median load "
          f"{loads[len(loads) // 2] * 1e3:.0f} ms); best "
          f"{_num(s['best_tflops'])} TFLOP/s {s['best_config']}; top {s['top_k']} best "
          f"{_num(s['top_tflops'])} (ratio {_num(s['ratio'], 3)})", flush=True)
    return flop / torch_ms / 1e9


def _num(x, digits=0) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _cfg(c) -> str:
    if not c:
        return "-"
    return (f"{c['block_M']}x{c['block_N']}x{c['block_K']} s{c['num_stages']} "
            f"t{c['threads']}")


def write_report(out_dir, summaries, rows, facts, settings) -> str:
    """<out_dir>/<date>_carver_search.{md,json}; returns the markdown's path."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{stamp}_carver_search")
    with open(base + ".json", "w") as f:
        json.dump({"facts": facts, "settings": settings, "shapes": summaries,
                   "rows": [r for shape_rows in rows for r in shape_rows]}, f, indent=1)
    hits = sum(s["within_2pct"] for s in summaries)
    with open(base + ".md", "w") as f:
        f.write(f"# carver_search ({stamp})\n\n{facts}\n\n{settings}\n\n"
                f"The cost model's top 5% holds a config within 2% of the exhaustive best for "
                f"{hits} of {len(summaries)} shapes. Config: block_M x block_N x block_K, "
                "stages, threads (swizzle panel 8).\n\n")
        f.write("| shape | legal | illegal | failed | best config | best TFLOP/s | model rank "
                "of best | top-5% (k) best config | TFLOP/s | ratio | within 2% | "
                "torch TFLOP/s | max rel err |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for s in summaries:
            f.write(f"| {s['shape']} | {s['legal']} | {s['illegal']} | {s['failed']} | "
                    f"{_cfg(s['best_config'])} | {_num(s['best_tflops'])} | "
                    f"{s['best_model_rank'] or '-'} | ({s['top_k']}) {_cfg(s['top_config'])} | "
                    f"{_num(s['top_tflops'])} | {_num(s['ratio'], 3)} | "
                    f"{'yes' if s['within_2pct'] else 'no'} | {_num(s['torch_tflops'])} | "
                    f"{'-' if s['max_rel_error'] is None else format(s['max_rel_error'], '.1e')} |\n")
    return base + ".md"


def parse_shapes(text) -> list:
    if not text:
        return list(SHAPES)
    return [tuple(int(x) for x in part.split("x")) for part in text.split(",")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="", help="MxNxK,... (default: the ten of table 3)")
    p.add_argument("--max-configs", type=int, default=None,
                   help=f"configs per shape, evenly spread over the space (default: all; "
                        f"{DRY_RUN_CONFIGS} with --dry-run; 0: all)")
    p.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--out", default=OUT)
    p.add_argument("--dry-run", action="store_true",
                   help="compile and predict for sm_90a without a GPU; measure nothing")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rep", type=int, default=5)
    p.add_argument("--rerank", metavar="JSON", default=None,
                   help="re-rank the measurements stored in a results json with the current "
                        "cost model (no GPU, no nvcc) and print the verdict per shape")
    p.add_argument("--timer", choices=["flushed", "idle"], default=TIMER,
                   help="flushed: the autotuner's timer (L2 flushed, back to back); idle: warm "
                        "L2 with the GPU idling between runs")
    p.add_argument("--target", default=None,
                   help="the cost model's hardware (h100, h200, ...; default: the model of "
                        "the GPU measured, for --rerank the one the search was measured on)")
    args = p.parse_args(argv)
    globals()["TIMER"] = args.timer
    globals()["COST_TARGET"] = args.target
    if args.rerank:
        summaries = rerank(args.rerank, parse_shapes(args.shapes) if args.shapes else None)
        print(rerank_table(summaries), flush=True)
        return summaries
    shapes = parse_shapes(args.shapes)
    cap = args.max_configs if args.max_configs is not None else (
        DRY_RUN_CONFIGS if args.dry_run else None)
    configs = spread(all_configs(), cap or None)
    wall = time.time()
    if args.dry_run:
        arch, torch = "sm_90a", None
    else:
        import torch
        from tilecraft.backends.cuda.runtime.device import current_arch
        arch = current_arch()
    globals()["COST_TARGET"] = args.target or machine_target(arch)
    print(f"{len(shapes)} shapes x {len(configs)} configs for {arch}, {args.workers} workers",
          flush=True)
    rows = compile_all(shapes, configs, arch, args.workers)
    compile_wall = time.time() - wall
    for shape, shape_rows in zip(shapes, rows):
        legal = sum(r["status"] != "illegal" for r in shape_rows)
        bad = [r for r in shape_rows if r["status"] not in ("ok", "illegal")]
        spill = sum(bool(r.get("spills")) for r in shape_rows)
        print(f"{shape_text(shape)}: {legal} legal, {len(shape_rows) - legal} illegal, "
              f"{spill} with register spills"
              f"{f', {len(bad)} failed: ' + bad[0]['message'] if bad else ''}", flush=True)
        if legal < MIN_LEGAL and cap is None:
            print(f"warning: {shape_text(shape)} has fewer than {MIN_LEGAL} legal configs",
                  flush=True)
    if args.dry_run:
        for shape, shape_rows in zip(shapes, rows):
            for r in model_order(shape_rows)[:3]:  # a parent compile must be a cache hit
                t0 = time.perf_counter()
                tilecraft.compile(underlying(matmul)(*shape, **r["config"]), out_idx=[-1],
                                  target=arch)
                print(f"  {r['shape']} {_cfg(r['config'])}: predicted "
                      f"{_num(r['predicted_s'] and r['predicted_s'] * 1e6)} us, smem "
                      f"{r.get('smem', 0) // 1024} KiB, regs {r.get('regs')}, spills "
                      f"{r.get('spills')}, compile {r['compile_s']:.2f} s in the worker, "
                      f"{time.perf_counter() - t0:.3f} s here", flush=True)
        print(f"dry run done in {time.time() - wall:.0f} s (compile phase "
              f"{compile_wall:.0f} s)", flush=True)
        return None
    from common import gpu_facts, warm_gpu  # torch-only helpers, so imported here
    warm_gpu()
    summaries = []
    facts = gpu_facts()
    for shape, shape_rows in zip(shapes, rows):
        torch_tflops = measure_shape(torch, shape, shape_rows, arch, args.warmup, args.rep)
        summaries.append(summarize(shape, shape_rows, torch_tflops))
        settings = {"space": SPACE, "fixed": FIXED, "configs_per_shape": len(configs),
                    "cost_target": COST_TARGET, "top_fraction": RECOMMENDED_FRACTION,
                    "warmup": args.warmup, "rep": args.rep, "timer": args.timer, "arch": arch,
                    "compile_wall_s": round(compile_wall, 1),
                    "total_wall_s": round(time.time() - wall, 1)}
        # Written after every shape, so a run cut short still leaves what it measured.
        path = write_report(args.out, summaries, rows[:len(summaries)], facts, settings)
    print(open(path).read(), flush=True)
    return summaries


if __name__ == "__main__":
    main()
