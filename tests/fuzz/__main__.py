"""Run the fuzzer from the command line.

    python3 -m tests.fuzz --n 2000 --seed 0 [--kinds gemm,reduce] [--targets interp,emulator]
                          [-j 2] [--no-shrink] [--show]

Program i (0 <= i < n) is of kind kinds[i % len(kinds)] with seed seed + i // len(kinds), so
`--kinds K --seed S --n 1` reruns one program. Prints the counts per kind and target, every
failure with its kind and seed (shrunk to a small program unless --no-shrink), and the time.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
import time

from .generator import KIND_NAMES, generate
from .render import render
from .runner import TARGETS, describe, run_program
from .shrink import shrink
from .spec import label


def _job(job):
    kind, seed, targets = job
    start = time.perf_counter()
    outcomes = run_program(generate(kind, seed), targets)
    return kind, seed, outcomes, time.perf_counter() - start


def _table(counts: dict, kinds, targets) -> str:
    statuses = ("pass", "fail", "xfail", "xpass", "skip")
    width = max(len(t) for t in targets) + 2
    lines = ["kind".ljust(16) + "".join(t.ljust(width + 14) for t in targets)]
    for kind in kinds:
        cells = []
        for target in targets:
            c = counts[(kind, target)]
            cells.append(" ".join(f"{c[s]}{s[0] if s != 'xpass' else 'X'}" for s in statuses
                                  if c[s]).ljust(width + 14))
        lines.append(kind.ljust(16) + "".join(cells))
    return "\n".join(lines) + "\n(p pass, f fail, x expected failure, X unexpected pass, s skip)"


class Tally:
    """What a run found: statuses per (kind, target), seconds per kind, expected failures per
    (target, cause), and the failures with their kind and seed."""

    def __init__(self):
        self.counts = collections.defaultdict(collections.Counter)
        self.seconds = collections.Counter()
        self.known = collections.Counter()
        self.failures = []

    def add(self, kind, seed, outcomes, seconds):
        self.seconds[kind] += seconds
        for o in outcomes:
            self.counts[(kind, o.target)][o.status] += 1
            if o.status == "xfail":
                self.known[(o.target, o.cause)] += 1
            if o.status == "fail":
                self.failures.append((kind, seed, o))
                print(f"FAIL {kind} seed {seed} on {o.target}: {o.category}: {o.detail[:200]}",
                      flush=True)


def _arguments(argv):
    parser = argparse.ArgumentParser(prog="python3 -m tests.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100, help="how many programs")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--kinds", default=",".join(KIND_NAMES),
                        help=f"comma-separated, of: {', '.join(KIND_NAMES)}")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help=f"comma-separated, of: {', '.join(TARGETS)}")
    parser.add_argument("-j", type=int, default=1, help="worker processes")
    parser.add_argument("--no-shrink", action="store_true", help="print failures as generated")
    parser.add_argument("--show", action="store_true", help="print each program's source")
    args = parser.parse_args(argv)
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.targets = tuple(t for t in args.targets.split(",") if t)
    unknown = [k for k in args.kinds if k not in KIND_NAMES] + \
        [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown kind or target: {', '.join(unknown)}")
    return args


def main(argv=None) -> int:
    args = _arguments(argv)
    kinds, targets = args.kinds, args.targets
    jobs = [(kinds[i % len(kinds)], args.seed + i // len(kinds), targets) for i in range(args.n)]
    start = time.perf_counter()
    tally = Tally()
    pool = multiprocessing.Pool(args.j) if args.j > 1 else None
    results = pool.imap_unordered(_job, jobs) if pool else map(_job, jobs)
    for done, (kind, seed, outcomes, seconds) in enumerate(results, 1):
        tally.add(kind, seed, outcomes, seconds)
        if args.show:
            print(f"# {kind} seed {seed} ({seconds:.1f} s)\n{render(generate(kind, seed))}")
        if done % 100 == 0:
            print(f"... {done} programs, {time.perf_counter() - start:.0f} s", flush=True)
    if pool:
        pool.close()
    elapsed = time.perf_counter() - start
    print(_table(tally.counts, kinds, targets))
    print("seconds per kind (summed over workers): " +
          ", ".join(f"{k} {tally.seconds[k]:.0f}" for k in kinds))
    for (target, cause), n in sorted(tally.known.items()):
        print(f"expected failures on {target}: {n}: {cause}")
    for kind, seed, o in tally.failures:
        spec = generate(kind, seed)
        if not args.no_shrink:
            spec = shrink(spec, o)
            o = run_program(spec, (o.target,))[0]
        print(f"\n--- {label(spec)} seed {seed} (--kinds {kind} --seed {seed} --n 1)")
        print(describe(spec, o))
    print(f"{args.n} programs, {len(tally.failures)} failure(s), {elapsed:.0f} s on "
          f"{', '.join(targets)} with {args.j} worker(s)")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
