"""One example file run for the census, in its own process:

    python3 -m tools.census.child EXAMPLES_ROOT RELPATH EVENTS.jsonl [gpu]

`tilelang` resolves to tilecraft (importalias), kernels compile for the arch in
TILECRAFT_TARGET and are not run (compile_only), unless `gpu` is given: then they run. The
entries are the file's `__main__` block (run with its default arguments) or, for a test file,
each `test_*` function; a file with
neither is imported. Every event (an entry's start and end, each kernel attempt) is written
to EVENTS as one JSON line, flushed at once, so a run stopped by the timeout keeps what it
saw."""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import runpy
import sys

from . import compile_only, importalias, torch_on_cpu
from .classify import classify
from .scan import scan_file


def _writer(path):
    f = open(path, "a", encoding="utf-8")

    def emit(event):
        f.write(json.dumps(event) + "\n")
        f.flush()
    return emit


def entries_of(scan) -> list:
    """(entry name, how to run it) for one file's scan."""
    if scan.tests:
        return [("import", None)] + [(name, name) for name in scan.tests]
    return [("__main__", None)] if scan.has_main else [("import", None)]


# What the script's own code does with outputs that were never computed (compare them with a
# reference, divide by them) is no finding of the census.
_AFTER_UNRUN = ("example-error", "needs-gpu", "import-time")


def _run_entry(path, entry, test, module_globals, emit, recorder):
    emit({"event": "entry-start", "entry": entry})
    recorder.fake_calls = 0
    outcome, failure = "finished", None
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink):
            if test is None:
                run_name = "__main__" if entry == "__main__" else "census_example"
                module_globals.update(runpy.run_path(path, run_name=run_name))
            else:
                fn = module_globals.get(test)
                if fn is None:
                    raise RuntimeError(f"{test} was not defined when the file was imported")
                required = [p for p in inspect.signature(fn).parameters.values()
                            if p.default is inspect.Parameter.empty and
                            p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
                if required:
                    outcome = "skipped"
                    failure = {"class": "example-error", "type": "TypeError", "where": None,
                               "detail": "test takes arguments (a pytest fixture or "
                                         "parametrization)"}
                else:
                    fn()
    except compile_only.StopEntry as stop:
        outcome, failure = "stopped", {"detail": str(stop)}
    except BaseException as e:  # noqa: BLE001 - every failure is the census' data
        outcome, failure = "failed", classify(e, _phase(e, os.path.dirname(path)))
        failure["recorded"] = getattr(e, "_census_recorded", False)
        if recorder.fake_calls and failure["class"] in _AFTER_UNRUN and \
                not isinstance(e, ImportError):
            outcome = "stopped"
            failure["detail"] = "after a kernel call left unrun: " + failure["detail"]
    emit({"event": "entry-end", "entry": entry, "outcome": outcome, "failure": failure})
    return outcome


def _phase(exc, root) -> str:
    """'import' when the innermost frame of an example file is module-level code (the file or
    an example module it imports was still executing its top level), else 'run'."""
    phase, tb = "run", exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if os.path.abspath(code.co_filename).startswith(root + os.sep):
            phase = "import" if code.co_name == "<module>" else "run"
        tb = tb.tb_next
    return phase


def main(argv=None) -> int:
    args = argv or sys.argv[1:]
    root, rel, events = args[:3]
    gpu = args[3:4] == ["gpu"]
    root = os.path.abspath(root)
    path = os.path.join(root, rel)
    emit = _writer(events)
    folder = os.path.dirname(path)
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [path]
    importalias.install()
    if not gpu:
        torch_on_cpu.install()
    scans: dict = {}

    def scan_of(relpath):
        if relpath not in scans:
            full = os.path.join(root, relpath)
            scans[relpath] = scan_file(full) if relpath.endswith(".py") and \
                os.path.isfile(full) else None
        return scans[relpath]

    def relpath(filename):
        full = os.path.abspath(filename)
        return os.path.relpath(full, root) if full.startswith(root + os.sep) else full

    recorder = compile_only.Recorder(emit, relpath)
    compile_only.install(recorder, scan_of, run_kernels=gpu)
    module_globals: dict = {}
    for entry, test in entries_of(scan_of(rel)):
        outcome = _run_entry(path, entry, test, module_globals, emit, recorder)
        if entry == "import" and outcome == "failed":
            break  # the tests of a file that does not import cannot run
    return 0


if __name__ == "__main__":
    sys.exit(main())
