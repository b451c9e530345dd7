"""The `tilecraft` command.

    tilecraft recommend <module_or_path>:<factory> --shape 8192,8192,8192 [--target h100]
                        [--top 10] [--space block_M=64,128 ...] [--set dtype=float16 ...]
                        [--plot roofline.png] [--all]

prints the cost model's ranked configurations of a @tilecraft.jit factory for one problem
(--shape gives the factory's leading positional arguments; true / false become booleans).

A misuse (a bad option, a factory that cannot be loaded or called with the arguments given)
is one line, `tilecraft: error: ...`, and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections import Counter


class UsageError(Exception):
    """A mistake in the command line: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


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
            raise UsageError(f"expected NAME=VALUE{'S' if many else ''}, got {item!r}")
        name, text = item.split("=", 1)
        out[name.strip()] = _values(text) if many else _value(text)
    return out


def load_factory(spec: str):
    """`pkg.module:name` or `path/to/file.py:name` -> the object named."""
    if ":" not in spec:
        raise UsageError(f"expected <module_or_path>:<factory>, got {spec!r}")
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py") or os.sep in where or os.path.exists(where):
        path = os.path.abspath(where)
        if not os.path.exists(path):
            raise UsageError(f"no such file {where}")
        module_name = os.path.splitext(os.path.basename(path))[0]
        sys.path.insert(0, os.path.dirname(path))
        spec_ = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec_)
        sys.modules.setdefault(module_name, module)
        try:
            spec_.loader.exec_module(module)
        except Exception as e:   # the user's module: its own error, in one line
            raise UsageError(f"{where} fails to load: {type(e).__name__}: {e}") from None
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except Exception as e:
            raise UsageError(f"cannot import {where}: {type(e).__name__}: {e}") from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise UsageError(f"{where} has no {name!r}") from None


def _check_call(factory, shape: tuple, fixed: dict, space: dict | None, spec: str):
    """The factory takes --shape's arguments, --set's and --space's names, or a UsageError
    saying which does not fit."""
    import inspect
    if not callable(factory):
        raise UsageError(f"{spec} is not a kernel factory (a @tilecraft.jit function)")
    try:
        signature = inspect.signature(getattr(factory, "__wrapped__", factory))
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*shape, **fixed)
    except TypeError as e:
        raise UsageError(f"{spec}: {e} (--shape gives the leading arguments, --set the "
                         "others)") from None
    takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    unknown = [n for n in (space or {}) if n not in signature.parameters and not takes_any]
    if unknown:
        raise UsageError(f"{spec} has no parameter {unknown[0]!r} (--space)")


def _plot(ranked, target, path: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed; no plot written"
    from .carver import get_target
    t = get_target(target)
    peak = _roof(ranked[0].cost, t) if ranked else t.cuda_rate()
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


def _roof(cost, t) -> float:
    """The compute roof of the kernel's own work: its gemms' dtype on the tensor cores (an
    fp16 GEMM against the fp16 rate, not the fp8 one), else the CUDA cores."""
    for launch in cost.counts:
        for node in launch.nodes:
            if node.tensor_flops:
                return t.tensor_rate(node.dtype or "float16") or t.tensor_rate("float16")
    return t.cuda_rate()


def cmd_recommend(args) -> int:
    from .carver import get_target
    from .carver.recommend import enumerate_candidates, format_table, rank
    factory = load_factory(args.factory)
    shape = tuple(_values(args.shape)) if args.shape else ()
    fixed = _assignments(args.set, many=False)
    space = _assignments(args.space, many=True) or None
    if args.top < 1:
        raise UsageError(f"--top takes a positive count, got {args.top}")
    _check_call(factory, shape, fixed, space, args.factory)
    try:
        target = get_target(args.target)
    except ValueError as e:
        raise UsageError(str(e)) from None
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
    from . import __version__, install_excepthook
    install_excepthook()      # a command prints a TileError as a message, not a traceback
    parser = _Parser(prog="tilecraft", description="tilecraft tools")
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
    try:
        args = parser.parse_args(argv)
        return cmd_recommend(args)
    except UsageError as e:
        print(f"tilecraft: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
