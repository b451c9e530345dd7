"""The `tilecraft` command.

    tilecraft recommend <module_or_path>:<factory> --shape 8192,8192,8192 [--target h100]
                        [--top 10] [--space block_M=64,128 ...] [--set dtype=float16 ...]
                        [--plot roofline.png] [--all]

prints the cost model's ranked configurations of a @tilecraft.jit factory for one problem
(--shape gives the factory's leading positional arguments; true / false become booleans).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections import Counter


def _value(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def _values(text: str) -> list:
    return [_value(x) for x in text.split(",") if x.strip()]


def _assignments(items, many: bool) -> dict:
    out = {}
    for item in items or ():
        if "=" not in item:
            raise SystemExit(f"tilecraft: expected NAME=VALUE{'S' if many else ''}, got {item!r}")
        name, text = item.split("=", 1)
        out[name.strip()] = _values(text) if many else _value(text)
    return out


def load_factory(spec: str):
    """`pkg.module:name` or `path/to/file.py:name` -> the object named."""
    if ":" not in spec:
        raise SystemExit(f"tilecraft: expected <module_or_path>:<factory>, got {spec!r}")
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py") or os.sep in where or os.path.exists(where):
        path = os.path.abspath(where)
        if not os.path.exists(path):
            raise SystemExit(f"tilecraft: no such file {where}")
        module_name = os.path.splitext(os.path.basename(path))[0]
        sys.path.insert(0, os.path.dirname(path))
        spec_ = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec_)
        sys.modules.setdefault(module_name, module)
        spec_.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(where)
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"tilecraft: {where} has no {name!r}") from None


def _plot(ranked, target, path: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed; no plot written"
    from .carver import get_target
    t = get_target(target)
    peak = max(t.tensor_flops.values()) if ranked and ranked[0].cost.tensor_flops else \
        t.cuda_rate()
    ai = [c.cost.arithmetic_intensity for c in ranked]
    perf = [c.cost.flops / c.cost.time for c in ranked]
    lo, hi = max(min(ai) / 4, 1e-2), max(ai) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.plot(xs, [min(peak, x * t.hbm_bw) for x in xs], "k-", label=f"{t.description} roof")
    ax.scatter(ai, perf, c=range(len(ranked)), cmap="viridis_r", s=18, label="candidates")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
    ax.set_ylabel("predicted FLOP/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return f"roofline plot written to {path}"


def cmd_recommend(args) -> int:
    from .carver import get_target
    from .carver.recommend import enumerate_candidates, format_table, rank
    factory = load_factory(args.factory)
    shape = tuple(_values(args.shape)) if args.shape else ()
    fixed = _assignments(args.set, many=False)
    space = _assignments(args.space, many=True) or None
    try:
        target = get_target(args.target)
    except ValueError as e:
        raise SystemExit(f"tilecraft: {e}") from None
    if space is not None:
        from .carver.recommend import default_space
        space = {**default_space(factory, shape, {**fixed, **space}), **space}
    cands = enumerate_candidates(factory, shape, space, target, fixed)
    ranked = rank(cands)
    skipped = [c for c in cands if not c.ok]
    print(f"{getattr(factory, '__name__', args.factory)}{shape} on {target.description}: "
          f"{len(cands)} configurations, {len(ranked)} legal, {len(skipped)} skipped")
    shown = ranked if args.all else ranked[:args.top]
    keys = sorted({k for c in cands for k in c.config if k not in fixed})
    print(format_table([c.row() for c in shown], keys))
    if shown:
        best = shown[0].cost
        print(f"best: {shown[0].config}  predicted {best.time * 1e6:.1f} us, bound by "
              f"{best.bound}; placement: " + ", ".join(
                  f"{n} {scope} {b // 1024} KB" + (f" ({note})" if note else "")
                  for n, scope, b, note in best.resources.placement))
    if skipped:
        reasons = Counter(c.reason.split(";")[0] for c in skipped)
        print("skipped: " + "; ".join(f"{n} x {r}" for r, n in reasons.most_common(4)))
    if args.plot:
        print(_plot(ranked, target, args.plot))
    return 0 if ranked else 1


def main(argv=None) -> int:
    from . import __version__
    parser = argparse.ArgumentParser(prog="tilecraft", description="tilecraft tools")
    parser.add_argument("--version", action="version", version=f"tilecraft {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("recommend", help="rank a kernel factory's tile configurations "
                         "with the roofline cost model")
    rec.add_argument("factory", help="<module_or_path>:<factory>, e.g. examples/gemm.py:matmul")
    rec.add_argument("--shape", default="", help="the factory's leading positional arguments, "
                     "comma-separated (e.g. 8192,8192,8192)")
    rec.add_argument("--target", default="h100", help="h100 (default), h200, a100, rtx4090")
    rec.add_argument("--top", type=int, default=10)
    rec.add_argument("--all", action="store_true", help="print every legal configuration")
    rec.add_argument("--space", action="append", metavar="NAME=V1,V2",
                     help="candidate values of a parameter (repeatable)")
    rec.add_argument("--set", action="append", metavar="NAME=VALUE",
                     help="a fixed keyword argument (repeatable)")
    rec.add_argument("--plot", metavar="PNG", help="write a roofline plot (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.command == "recommend":
        return cmd_recommend(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
