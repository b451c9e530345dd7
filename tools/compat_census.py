"""How many of TileLang's own example kernels build under tilecraft with only the imports
changed, and why the others do not.

    python3 tools/compat_census.py EXAMPLES OUT [--timeout 120] [--jobs 2] [--only SUBSTR]

EXAMPLES is the folder tools/fetch_tilelang_examples.py filled. Each example file runs in its
own process (tools/census/child.py) with `tilelang` resolved to tilecraft and every kernel
compiled for sm_90a without a GPU (tools/census/compile_only.py); with --gpu, on a machine
that has one, the kernels also run (and the scripts' checks see their outputs). OUT receives
census.json (per-kernel results and every file's runs), census.md (the summary with one line
per file) and summary.md (the summary alone)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tools.census import aggregate, names, report  # noqa: E402
from tools.census.scan import scan_file  # noqa: E402

# Scripts that only time or regress other examples' kernels: their kernels are counted where
# they are defined, and they need a GPU to do anything of their own.
NOT_ENTRIES = ("bench_", "benchmark_", "regression_", "conftest")


def example_files(root: str) -> dict:
    """relpath -> FileScan of every Python example that imports tilelang."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                full = os.path.join(folder, name)
                try:
                    scan = scan_file(full)
                except SyntaxError:
                    continue
                if scan.imports_tilelang:
                    found[os.path.relpath(full, root)] = scan
    return found


def is_entry(rel: str) -> bool:
    return not os.path.basename(rel).startswith(NOT_ENTRIES)


def run_file(root: str, rel: str, timeout: float, target: str, gpu: bool = False) -> tuple:
    """(events, seconds, stderr tail) of one file's run in a child process."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as events:
        env = dict(os.environ, PYTHONPATH=REPO, TILECRAFT_TARGET=target,
                   PYTHONDONTWRITEBYTECODE="1")
        env.pop("TILECRAFT_DEBUG", None)
        start = time.perf_counter()
        try:
            command = [sys.executable, "-m", "tools.census.child", root, rel, events.name]
            done = subprocess.run(command + (["gpu"] if gpu else []), env=env, cwd=REPO,
                                  capture_output=True, text=True, timeout=timeout)
            stderr = done.stderr
        except subprocess.TimeoutExpired as e:
            stderr = (e.stderr or b"").decode(errors="replace") if isinstance(
                e.stderr, bytes) else (e.stderr or "")
        seconds = time.perf_counter() - start
        lines = [json.loads(line) for line in events.read().splitlines() if line.strip()]
    return lines, seconds, stderr[-2000:]


def used_names(root: str, rel: str) -> list:
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return names.missing_names(f.read())


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_summary(census: dict, out: str) -> None:
    mode = "kernels built and run on a GPU" if census.get("gpu") else "compile only"
    header = (f"# Compatibility census\n\nDate {census['date']}; tilecraft "
              f"{census['tilecraft_commit']}; target {census['target']}; {mode}; "
              f"`{census['command']}`.")
    runs = {rel: f["runs"] for rel, f in census["files"].items()}
    used = {rel: f.get("missing_names", []) for rel, f in census["files"].items()}
    for name, per_file in (("census.md", True), ("summary.md", False)):
        with open(os.path.join(out, name), "w") as f:
            f.write(report.markdown(census["kernels"], runs, header, census["target"],
                                    per_file=per_file, used=used,
                                    root=census.get("examples", "")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples")
    parser.add_argument("out")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per file")
    parser.add_argument("--jobs", type=int, default=2, help="files run at once")
    parser.add_argument("--target", default="sm_90a")
    parser.add_argument("--only", default=None, help="run only files whose path has this")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole run: files not started by then are left "
                             "unrun (and reported so)")
    parser.add_argument("--gpu", action="store_true",
                        help="run the kernels too (a machine with a GPU), not compile only")
    parser.add_argument("--report-only", action="store_true",
                        help="write OUT/census.md again from OUT/census.json, running nothing")
    args = parser.parse_args(argv)
    if args.report_only:
        with open(os.path.join(args.out, "census.json")) as f:
            write_summary(json.load(f), args.out)
        return 0
    root = os.path.abspath(args.examples)
    scans = example_files(root)
    todo = [rel for rel in scans if is_entry(rel) and (args.only is None or args.only in rel)]
    events, runs, seconds, stderr = {}, {}, {}, {}
    started = time.perf_counter()

    def one(rel):
        if args.budget is not None and time.perf_counter() - started > args.budget:
            return rel, ([], 0.0, "not run: the census's --budget was spent")
        return rel, run_file(root, rel, args.timeout, args.target, args.gpu)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for n, (rel, (lines, secs, err)) in enumerate(pool.map(one, todo), 1):
            events[rel], seconds[rel], stderr[rel] = lines, secs, err
            runs[rel] = aggregate.entry_results(lines)
            ends = ", ".join(r["outcome"] for r in runs[rel]) or "no events"
            print(f"[{n}/{len(todo)}] {rel} ({secs:.0f} s): {ends}", flush=True)
    if args.only is not None:
        scans = {rel: s for rel, s in scans.items() if args.only in rel}
    kernels = aggregate.kernels(scans, runs, events)
    when = datetime.date.today().isoformat()
    commit = git_commit()
    command = (f"python3 tools/compat_census.py {args.examples} {args.out} --timeout "
               f"{args.timeout:g} --jobs {args.jobs}" + (" --gpu" if args.gpu else "") +
               (f" --budget {args.budget:g}" if args.budget is not None else ""))
    os.makedirs(args.out, exist_ok=True)
    census = {"date": when, "tilecraft_commit": commit, "command": command, "examples": root,
              "target": args.target, "gpu": args.gpu, "kernels": kernels,
              "files": {rel: {"runs": runs.get(rel, []), "seconds": seconds.get(rel),
                              "missing_names": used_names(root, rel),
                              "stderr_tail": stderr.get(rel)} for rel in scans}}
    with open(os.path.join(args.out, "census.json"), "w") as f:
        json.dump(census, f, indent=1)
    write_summary(census, args.out)
    c = report.counts(kernels)
    print(f"{len(kernels)} kernels, {c['own']['ok']} compiled; {args.out}/census.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
