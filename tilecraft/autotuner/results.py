"""What a tuning run found, and how it is shown: one Trial per candidate configuration, the
AutotuneResult with the best one, the final table, one log line per skipped candidate, and a
progress bar when tqdm is installed (an optional dependency; without it a text line)."""
from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field

from ..errors import TileError

logger = logging.getLogger("tilecraft.autotuner")

OK = "ok"
PRUNED = "pruned"
COMPILE_ERROR = "compile error"
TIMEOUT = "timeout"
WRONG = "wrong result"
RUN_ERROR = "run error"
SKIPPED = (COMPILE_ERROR, TIMEOUT, WRONG, RUN_ERROR)


@dataclass
class Trial:
    """One candidate configuration and what happened to it."""
    config: dict
    predicted_s: float | None = None   # the cost model's time; inf when it finds it illegal
    status: str = ""                   # "" until decided, then one of the statuses above
    latency_ms: float | None = None    # measured
    message: str = ""                  # why it was skipped
    compile_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict:
        return {"config": self.config, "predicted_s": _finite(self.predicted_s),
                "status": self.status, "latency_ms": self.latency_ms, "message": self.message,
                "compile_s": self.compile_s}


def _finite(x):
    # JSON has no infinity; a model-illegal candidate is stored without a prediction.
    return x if x is None or math.isfinite(x) else None


@dataclass
class AutotuneResult:
    """The outcome of tuning one problem. `trials` lists every candidate in the order it was
    considered (fastest predicted first when the cost model ranked them)."""
    name: str
    problem: str
    device: str
    config: dict
    latency: float                     # the best measured time, milliseconds
    trials: list
    kernel: object = None
    key: str | None = None
    from_cache: bool = False
    ref_latency: float | None = field(default=None)
    # Wall seconds of each phase of the run ("predict", "compile", "measure"); empty when
    # the result came from the tuning cache. On several GPUs measuring overlaps compiling:
    # "measure" is what is left of it once the last candidate is built.
    phases: dict = field(default_factory=dict)
    gpus: int = 1                      # how many GPUs (of the model `device`) measured

    @property
    def best_config(self) -> dict:
        return self.config

    @property
    def func(self):
        """The winning configuration's prim_func (TileLang's name)."""
        return self.kernel.func if self.kernel is not None else None

    @property
    def libcode(self) -> str | None:
        """The winning kernel's source (TileLang's name)."""
        return self.kernel.get_kernel_source() if self.kernel is not None else None

    @property
    def results(self) -> list:
        return self.trials

    @property
    def measured(self) -> list:
        """The trials that ran correctly, fastest first."""
        return sorted((t for t in self.trials if t.ok), key=lambda t: t.latency_ms)

    def table(self) -> str:
        return format_results(self)


def one_line(err: BaseException) -> str:
    """An exception as one line: a TileError's message and the user line it points at."""
    if isinstance(err, TileError):
        text = err.message.splitlines()[0] if err.message else type(err).__name__
        return f"{text} ({err.span})" if err.span is not None else text
    text = str(err).strip().splitlines()
    head = text[0] if text else ""
    return f"{type(err).__name__}: {head}" if head else type(err).__name__


def value_text(value) -> str:
    """A configuration's value as a person reads it: a configuration's own pass configs as
    key=value with the keys' plain strings (PassConfigKey members print their class)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{str.__str__(k) if isinstance(k, str) else k}={v}"
                               for k, v in value.items()) + "}"
    return str(value)


def config_text(config: dict) -> str:
    return " ".join(f"{k}={value_text(v)}" for k, v in config.items()) or "(defaults)"


def log_skip(name: str, trial: Trial) -> None:
    """The single line a skipped candidate gets."""
    message = trial.message if len(trial.message) <= 300 else trial.message[:297] + "..."
    logger.warning("autotune %s: skipped %s: %s: %s", name, config_text(trial.config),
                   trial.status, message)


def format_results(result: AutotuneResult) -> str:
    """The final table: measured candidates fastest first, then the skipped ones; the pruned
    ones (possibly hundreds) only as a count in the title.

    carver.recommend.format_table shows the model's figures of legal candidates; this table
    also has rows without a prediction (failures, candidates given without pruning) and the
    measured time, so it is its own."""
    trials = result.trials
    order = result.measured + [t for t in trials if not t.ok and t.status != PRUNED]
    keys = []
    for t in order:
        keys += [k for k in t.config if k not in keys]
    head = ["#"] + keys + ["predicted us", "measured ms", "status"]
    rows = []
    rank = 0
    for t in order:
        rank += t.ok
        status = t.status or "not run"
        if t.ok and t.config == result.config:
            status = "ok, best"
        elif t.message:
            status = f"{status}: {t.message}"
        if len(status) > 70:
            status = status[:67] + "..."
        predicted = "-" if t.predicted_s is None or not math.isfinite(t.predicted_s) else \
            f"{t.predicted_s * 1e6:.1f}"
        measured = "-" if t.latency_ms is None else f"{t.latency_ms:.4f}"
        rows.append([str(rank) if t.ok else "-"] + [value_text(t.config.get(k, "")) for k in keys] +
                    [predicted, measured, status])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def fmt(cells):
        body = [c.rjust(w) for c, w in zip(cells[:-1], widths)]
        return "  ".join(body + [cells[-1]])

    counts = {}
    for t in trials:
        counts[t.status or "not run"] = counts.get(t.status or "not run", 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    cached = " (from the tuning cache)" if result.from_cache else ""
    on = f"{result.gpus} x {result.device}" if result.gpus > 1 else result.device
    title = (f"autotune {result.name}({result.problem}) on {on}{cached}: "
             f"{len(trials)} candidates ({summary}); best {config_text(result.config)} at "
             f"{result.latency:.4f} ms")
    lines = [title, fmt(head), fmt(["-" * w for w in widths[:-1]] + ["-" * 6])]
    return "\n".join(lines + [fmt(r) for r in rows])


class _TextBar:
    """The progress line without tqdm: `desc: done/total` on stderr, rewritten in place on a
    terminal, and a line at each tenth of the way (and the end) otherwise."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.done = total, desc, 0
        self.live = sys.stderr.isatty()
        self.shown = -1

    def update(self, n: int) -> None:
        self.done += n
        tenth = self.done * 10 // self.total
        if self.live:
            sys.stderr.write(f"\r{self.desc}: {self.done}/{self.total}")
            sys.stderr.flush()
        elif tenth != self.shown and (tenth > 0 or self.done == self.total):
            self.shown = tenth
            print(f"{self.desc}: {self.done}/{self.total}", file=sys.stderr)

    def close(self) -> None:
        if self.live:
            sys.stderr.write("\n")


class Progress:
    """A tqdm bar when tqdm is importable, else a text line (_TextBar), when output is
    wanted; otherwise nothing."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.bar = None
        if enabled and total > 0:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                self.bar = _TextBar(total, desc)
                return
            self.bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False)

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
