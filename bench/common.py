"""What the benchmarks share: timers (in rounds, each settled under the power cap), the SM clock
sampled while they run, the GPU's facts, the results writer, and the inputs and peers that
several benches time (attention through torch SDPA, the MLA decode reference).

Every script in bench/ imports this module by name (`from common import ...`); importing it also
puts examples/ on sys.path, so the scripts import the example kernels by name too. torch is
imported by the helpers that use it, not here: the paths that need no GPU (dry runs, compile
times, the search's compile workers) run without it.
Raw results go to bench/.out/ (OUT, ignored by git); the pages bench/<family>.md hold the numbers
that are kept.
"""
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, ".out")
EXAMPLES = os.path.normpath(os.path.join(HERE, "..", "examples"))
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)

import tilecraft  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402


def median_ms(fn, reps=30, warmup=5):
    """Median of CUDA-event timings of fn, each run on a cold L2 and enqueued behind the
    previous one (the profiler's timer, as Triton's do_bench): the GPU's time, with the host's
    launch latency hidden behind the flush as it is in a stream of launches."""
    return cuda_median_ms(fn, warmup, reps, flush_l2=True)


def clean_timer(fn):
    """A timer for in_rounds: the median of 30 runs of fn, each after a flush that reads a
    256 MiB buffer (a clean, cold L2)."""
    return lambda: cuda_median_ms(fn, 5, 30, "clean")


def synced_median_ms(fn, reps=20, warmup=5):
    """Median of CUDA-event timings of fn run alone after a synchronize: the GPU idles while
    the host launches, so the host's launch latency is counted in (what a caller who waits
    for each result sees)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


# A GPU spin before each timed run keeps the stream busy while Python launches the kernel: the
# smallest GEMM shapes run in tens of microseconds, less than the launch path, and would
# otherwise be timed together with the launch gap (the same for every config, flattening a
# ranking).
SPIN_CYCLES = 1_000_000


def idle_gap_ms(fn, warmup: int, rep: int) -> float:
    """Median CUDA-event milliseconds of fn() over rep runs after warmup, with a warm L2 and the
    GPU spinning (SPIN_CYCLES) between the runs."""
    import torch
    for _ in range(warmup):
        fn()
    spin = getattr(torch.cuda, "_sleep", None)
    events = []
    for _ in range(rep):
        if spin is not None:
            spin(SPIN_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return times[len(times) // 2]


# Seconds each timer runs its own work, untimed, before the run that is kept (--settle). The
# board is power-capped: its clock follows the power drawn over the last tens of milliseconds,
# so a kernel timed right after a lighter one borrows headroom it would not have on its own,
# and which side of a ratio runs second shifted it by up to 20% (SM clocks 1425 against
# 1830 MHz in one run). Settled, both sides are timed at the clock their own power allows.
SETTLE_S = 1.0


def settle(timer, seconds: float):
    """Run timer for `seconds`, dropping what it returns."""
    start = time.time()
    while time.time() - start < seconds:
        timer()


def settled(timer, seconds: float):
    """timer, each call preceded by `seconds` of running it (settle)."""
    def run():
        settle(timer, seconds)
        return timer()
    return run


def in_rounds(rounds: int, timers: list, settle_s: float = 0.0) -> list:
    """[times of timer i over the rounds] for each timer, each round running every timer in
    turn: clocks drift over a run by more than the differences measured, so ratios are taken
    between timings of one round (and their median reported)."""
    timers = [settled(t, settle_s) for t in timers]
    times = [[] for _ in timers]
    for _ in range(rounds):
        for out, timer in zip(times, timers):
            out.append(timer())
    return times


class ClockLog:
    """The GPU's SM clock (and any other nvidia-smi --query-gpu fields given), sampled by
    nvidia-smi every 50 ms in the background while a bench runs: a kernel that draws more power
    runs at a lower clock under the board's power cap, so a ratio is read together with the
    clocks each side ran at. Without nvidia-smi every clock is None."""

    def __init__(self, fields=("clocks.sm",)):
        import torch
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv")
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "-i", str(torch.cuda.current_device()),
                 "--query-gpu=" + ",".join(("timestamp",) + tuple(fields)),
                 "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=self.file, stderr=subprocess.DEVNULL)
        except OSError:
            self.proc = None

    def samples(self) -> list:
        """[(seconds since the epoch, value of each field...)] so far (the first field is the
        SM clock in MHz unless other fields were given)."""
        self.file.flush()
        out = []
        for line in open(self.file.name):
            try:
                stamp, *values = (x.strip() for x in line.split(","))
                when = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                out.append((when, *(float(v) for v in values)))
            except ValueError:
                continue
        return out

    def median_mhz(self, windows) -> float | None:
        """The median clock over the samples taken inside the (start, end) windows."""
        inside = [mhz for when, mhz, *_ in self.samples()
                  if any(start <= when <= end for start, end in windows)]
        return median(inside) if inside else None

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def mhz_text(mhz) -> str:
    return "-" if mhz is None else f"{mhz:.0f}"


def in_rounds_with_clocks(rounds: int, timers: list, clocks: ClockLog,
                          settle_s: float = 0.0) -> tuple:
    """in_rounds, and for each timer the median SM clock while its kept run ran."""
    windows = [[] for _ in timers]

    def timed(i, timer):
        def run():
            settle(timer, settle_s)
            start = time.time()
            try:
                return timer()
            finally:
                windows[i].append((start, time.time()))
        return run
    times = in_rounds(rounds, [timed(i, t) for i, t in enumerate(timers)])
    return times, [clocks.median_mhz(w) for w in windows]


def parse_configs(texts) -> dict:
    """{key: bool} from KEY=0/1 command-line pass configs."""
    return {k: bool(int(v)) for k, v in (x.split("=") for x in texts)}


def add_arm_options(parser, rounds: int, pass_config: bool = True):
    """The options of the benches that time arms in rounds: --pass-config (a pass config for
    every kernel; not where pass_config is False), --variant, --rounds and --settle."""
    if pass_config:
        parser.add_argument("--pass-config", action="append", default=[], metavar="KEY=VALUE",
                            help="a pass config for every kernel, e.g. tl.disable_wgmma=1")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                        help="also time every config compiled with these pass configs added "
                             "(KEY=1[,KEY2=1]; repeat for more arms), in the same rounds")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--settle", type=float, default=SETTLE_S,
                        help="seconds each timer runs untimed before its kept run (SETTLE_S)")


def variant_arms(base: dict, variants: list) -> list:
    """[(label, pass configs)]: the base configs, then one arm per --variant (each a
    comma-separated KEY=0/1 list added to the base), all timed in the same rounds."""
    return [("", base)] + [(text, {**base, **parse_configs(text.split(","))})
                           for text in variants]


def warm_gpu(seconds: float = 2.0):
    """Run matrix products until the clocks have settled, so the first shape measured is not
    timed on an idle GPU ramping up."""
    import torch
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    start = time.time()
    while time.time() - start < seconds:
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()


def kernel_facts(kernel) -> dict:
    """What ptxas reported for a compiled kernel, for a results row."""
    return {"registers": kernel.n_regs, "spills": kernel.n_spills,
            "wgmma_serialized": kernel.wgmma_serialized}


def row_vs_torch(flop: float, times: list, peer: list, err: float, kernel, **keys) -> dict:
    """A results row for one kernel timed in rounds beside torch: medians, rates and the median
    of the per-round ratios (torch's time / ours), with `keys` first."""
    ms, torch_ms = median(times), median(peer)
    return {**keys, "ms": ms, "tflops": flop / ms / 1e9, "torch_ms": torch_ms,
            "torch_tflops": flop / torch_ms / 1e9,
            "vs_torch": median([p / t for p, t in zip(peer, times)]), "rel_error": err,
            **kernel_facts(kernel)}


def text_vs_torch(row: dict) -> str:
    return (f"{row['tflops']:.0f} TFLOP/s vs torch {row['torch_tflops']:.0f} "
            f"({row['vs_torch']:.2f}x) err {row['rel_error']:.1e} regs {row['registers']} "
            f"spills {row['spills']}")


# The results-table columns of row_vs_torch rows, after the ones naming the case.
VS_TORCH_COLUMNS = [
    ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
    ("torch TFLOP/s", lambda r: f"{r['torch_tflops']:.0f}"),
    ("ratio", lambda r: f"{r['vs_torch']:.2f}"), ("rel err", lambda r: f"{r['rel_error']:.1e}"),
    ("regs", lambda r: str(r["registers"])), ("spills", lambda r: str(r["spills"]))]


def gpu_facts() -> dict:
    try:
        import torch
    except ImportError:  # a report written without torch (compile times) names no GPU
        torch = None
    available = torch is not None and torch.cuda.is_available()
    facts = {"gpu": torch.cuda.get_device_name() if available else "none",
             "torch": torch.__version__ if torch is not None else "none",
             "tilecraft": tilecraft.__version__}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,"
                              "driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        facts["nvidia_smi"] = out
    except OSError:
        pass
    return facts


# The last columns of a kernel's row: its error against the reference and its registers.
ERROR_AND_REGISTERS = [("rel err", lambda r: f"{r['rel_error']:.1e}"),
                       ("regs", lambda r: str(r["registers"]))]


def write_results(out_dir: str, tag: str, rows: list, columns, notes: str = "") -> str:
    """<out_dir>/<date>_<tag>.json (the GPU's facts and every row) and .md (a table with one
    column per (heading, row -> text) in columns); the .md's path."""
    facts = gpu_facts()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{stamp}_{tag}")
    with open(base + ".json", "w") as f:
        json.dump({"facts": facts, "rows": rows}, f, indent=1)
    lines = [f"# {tag} ({stamp})", "", str(facts), ""] + ([notes, ""] if notes else [])
    lines += ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    return base + ".md"


def show_results(out_dir: str, tag: str, rows: list, columns, notes: str = "",
                 clocks: ClockLog | None = None) -> str:
    """write_results, then the clock log stopped (if given) and the table printed."""
    path = write_results(out_dir, tag, rows, columns, notes)
    if clocks is not None:
        clocks.stop()
    print(open(path).read())
    return path


def example_under_tilelang(name: str):
    """examples/<name>.py loaded with its tilecraft imports swapped for TileLang's (the two
    import lines a user changes), as a module of its own; None where TileLang is not
    installed. Timing it beside ours measures the two compilers on the same source."""
    import importlib.util
    import types
    if importlib.util.find_spec("tilelang") is None:
        return None
    path = os.path.join(EXAMPLES, name + ".py")
    source = open(path).read()
    source = source.replace("import tilecraft.language as T", "import tilelang.language as T")
    source = source.replace("import tilecraft\n", "import tilelang as tilecraft\n")
    module = types.ModuleType(name + "_under_tilelang")
    module.__file__ = path
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except Exception as e:  # TileLang installed but does not import: time ours alone
        print(f"TileLang does not load {name}: {type(e).__name__}: {e}", flush=True)
        return None
    return module


def tilelang_script_twice(path: str):
    """A TileLang script (TileLang's own example, say) loaded twice as modules of their own:
    with its TileLang imports (None where TileLang is not installed or refuses it) and with
    them swapped for tilecraft's, the two lines a user changes. (ours, theirs)."""
    import importlib.util
    import types
    source = open(path).read()
    swapped = source.replace("import tilelang.language as T", "import tilecraft.language as T")
    swapped = swapped.replace("import tilelang\n", "import tilecraft as tilelang\n")
    swapped = swapped.replace("from tilelang.", "from tilecraft.")
    left = re.findall(r"^\s*(?:import|from)\s+tilelang\b.*$", swapped, re.M)
    if left:   # an import form the swap does not know would run TileLang on both sides
        raise ValueError(f"{path}: cannot swap the import {left[0].strip()!r} for tilecraft")
    out = []
    for tag, text in (("tilecraft", swapped), ("tilelang", source)):
        if tag == "tilelang" and importlib.util.find_spec("tilelang") is None:
            out.append(None)
            continue
        module = types.ModuleType(f"{os.path.basename(path)[:-3]}_under_{tag}")
        module.__file__ = path
        try:
            exec(compile(text, path, "exec"), module.__dict__)
        except Exception as e:  # TileLang installed but does not load it: ours alone
            if tag == "tilecraft":
                raise
            print(f"TileLang does not load {path}: {type(e).__name__}: {e}", flush=True)
            module = None
        out.append(module)
    return tuple(out)


def build_under_tilelang(module, builder: str, *args, **kwargs):
    """module.<builder>(*args, **kwargs) compiled by TileLang (module from
    example_under_tilelang): its kernel, or None, with the reason printed, where module is None
    or TileLang refuses the source, so that a bench times ours alone."""
    if module is None:
        return None
    try:
        return getattr(module, builder)(*args, **kwargs)
    except Exception as e:  # TileLang's own error: reported, not ours to raise
        lines = str(e).strip().splitlines() or [type(e).__name__]
        print(f"TileLang does not build {builder}: {lines[-1][:200]}", flush=True)
        return None


# --- attention: torch SDPA's flash and cuDNN backends as peers ----------------------------

def sdpa_ms(q, k, v, causal, backend):
    """Median ms of torch SDPA's forward with `backend` (NaN where it is unavailable)."""
    import torch
    from torch.nn.attention import sdpa_kernel
    try:
        with sdpa_kernel(backend):
            return cuda_median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal), 5, 20, False)
    except RuntimeError as e:
        print("  sdpa", backend, "unavailable:", str(e).splitlines()[0])
        return float("nan")


def sdpa_row(shape, causal, cfg, label, flop, times, flash, cudnn, err, kernel, clocks,
             **extra) -> dict:
    """One result row of an attention kernel beside SDPA's flash and cuDNN backends (printed as
    it is made): times, flash and cudnn are the rounds' milliseconds; clocks the SM MHz of ours,
    flash, cuDNN."""
    ms = median(times)
    mhz, flash_mhz, cudnn_mhz = clocks
    row = {"shape": shape, "causal": causal, "config": cfg, "variant": label,
           "ms": ms, "ms_rounds": times, "tflops": flop / ms / 1e9,
           "flash_tflops": flop / median(flash) / 1e9,
           "cudnn_tflops": flop / median(cudnn) / 1e9,
           "vs_flash": median([f / t for f, t in zip(flash, times)]),
           "vs_cudnn": median([c / t for c, t in zip(cudnn, times)]),
           "rel_error": err, **kernel_facts(kernel), **extra,
           "sm_mhz": mhz, "flash_sm_mhz": flash_mhz, "cudnn_sm_mhz": cudnn_mhz}
    print(row_text(row), flush=True)
    return row


def row_text(row) -> str:
    B, H, S, D = row["shape"]
    return (f"B{B} H{H} S{S} D{D} causal={row['causal']} {row['config']} {row['variant']}: "
            f"{row['tflops']:.0f} TFLOP/s; flash {row['flash_tflops']:.0f} "
            f"({row['vs_flash']:.2f}x), cuDNN {row['cudnn_tflops']:.0f} "
            f"({row['vs_cudnn']:.2f}x); err {row['rel_error']:.1e}")


SDPA_COLUMNS = [
    ("B,H,S,D", lambda r: str(r["shape"])), ("causal", lambda r: str(r["causal"])),
    ("config", lambda r: str(r["config"])), ("variant", lambda r: r["variant"] or "-"),
    ("TFLOP/s", lambda r: f"{r['tflops']:.0f}"),
    ("SDPA flash", lambda r: f"{r['flash_tflops']:.0f}"),
    ("x flash", lambda r: f"{r['vs_flash']:.2f}"),
    ("SDPA cuDNN", lambda r: f"{r['cudnn_tflops']:.0f}"),
    ("x cuDNN", lambda r: f"{r['vs_cudnn']:.2f}"), ("rel err", lambda r: f"{r['rel_error']:.1e}"),
    ("regs", lambda r: str(r["registers"])), ("SM MHz", lambda r: mhz_text(r["sm_mhz"])),
    ("flash SM MHz", lambda r: mhz_text(r["flash_sm_mhz"])),
    ("cuDNN SM MHz", lambda r: mhz_text(r["cudnn_sm_mhz"]))]


# --- MLA decode: the shapes and the torch reference -----------------------------------------

B, H, D, PE = 64, 128, 512, 64   # batch, heads, dim + rope dim, one KV head (ANCHORS.md)


def mla_inputs(seqlen, batch=B, heads=H, dim=D, pe_dim=PE):
    """Random fp16 (Q, Q_pe, KV, K_pe) on the GPU, one KV head, in the example's layout."""
    import torch

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.float16)
    return (rand(batch, heads, dim), rand(batch, heads, pe_dim), rand(batch, seqlen, 1, dim),
            rand(batch, seqlen, 1, pe_dim))


def torch_mla(q, q_pe, kv, k_pe):
    """The reference the anchors time: scores by einsum, softmax in fp32, output by einsum."""
    import torch
    scale = (D + PE) ** -0.5
    kv0, kpe0 = kv[:, :, 0], k_pe[:, :, 0]
    scores = (torch.einsum("bhd,bsd->bhs", q, kv0) + torch.einsum("bhd,bsd->bhs", q_pe, kpe0))
    p = torch.softmax(scores.float() * scale, dim=-1).to(q.dtype)
    return torch.einsum("bhs,bsd->bhd", p, kv0)
