"""The census' per-kernel results from the events of every file's run (child.py) and the
static scans (scan.py).

A kernel is one definition in an example's source (a `@T.prim_func`, or a function
`@tilelang.jit` makes a kernel of directly), keyed by file and line, whichever specializations
of it were built. Its status is its first failed attempt's class, else `ok` when it compiled;
a kernel no run attempted is `not-reached`, with what stopped its file's run before it."""
from __future__ import annotations

from collections import OrderedDict

FAILURE_CLASSES = ("missing-name", "missing-argument", "value-mismatch", "tile-error", "nvcc-error",
                   "internal-error", "wrong-result", "import-time", "needs-gpu", "example-error",
                   "timeout")


def entry_results(events: list) -> list:
    """[{entry, outcome, failure}] of one file's run, a missing end read as a timeout."""
    results, open_entry = [], None
    for e in events:
        if e["event"] == "entry-start":
            open_entry = e["entry"]
        elif e["event"] == "entry-end":
            results.append({"entry": e["entry"], "outcome": e["outcome"],
                            "failure": e["failure"]})
            open_entry = None
    if open_entry is not None:
        results.append({"entry": open_entry, "outcome": "failed",
                        "failure": {"class": "timeout", "detail": "the file's run timed out",
                                    "type": None, "where": None}})
    return results


def _blocker(runs: list) -> dict:
    """Why a kernel of a file that its own runs never attempted was not reached."""
    for run in runs:
        failure = run["failure"]
        if run["outcome"] == "failed" and failure and failure.get("class") in FAILURE_CLASSES:
            return {"class": failure["class"], "detail": failure["detail"],
                    "where": failure.get("where"), "entry": run["entry"]}
    if any(run["outcome"] == "stopped" for run in runs):
        return {"class": "run-stopped", "detail": "the runs stop at the first kernel call "
                "(compile-only) before this kernel is built", "entry": None}
    if runs:
        return {"class": "not-built", "detail": "the file's entries do not build this kernel",
                "entry": None}
    return {"class": "not-built", "detail": "no entry of the examples builds this kernel",
            "entry": None}


def _check_failed(end: dict) -> bool:
    """An entry that ran its kernels (on a GPU) and ended on the script's own assertion: the
    results it checked were wrong. (Compile-only runs stop at the first kernel call.)"""
    failure = end.get("failure") or {}
    return end.get("outcome") == "failed" and failure.get("type") == "AssertionError"


def kernels(scans: dict, runs: dict, events: dict) -> list:
    """Per-kernel records. scans: relpath -> FileScan; runs: relpath -> entry_results;
    events: relpath -> that file's events."""
    table: OrderedDict = OrderedDict()
    for rel in sorted(scans):
        for k in scans[rel].kernels:
            table[(rel, k.line)] = {"file": rel, "line": k.line, "name": k.name,
                                    "eager": k.eager, "attempts": []}
    for rel in sorted(events):
        built = []   # the attempts of the entry running now
        for e in events[rel]:
            if e["event"] == "entry-start":
                built = []
            elif e["event"] == "entry-end" and _check_failed(e):
                for attempt in built:   # its kernels ran, and the script's check of them failed
                    attempt["check_failed"] = e["failure"]["detail"]
            if e["event"] != "kernel":
                continue
            key = (e["file"], e["line"])
            record = table.setdefault(key, {"file": e["file"], "line": e["line"],
                                            "name": e["name"], "eager": False, "attempts": []})
            record["attempts"].append({"by": rel, "phase": e["phase"], "ok": e["ok"],
                                       "failure": e["failure"]})
            if e["ok"]:
                built.append(record["attempts"][-1])
    for record in table.values():
        failed = [a for a in record["attempts"] if not a["ok"]]
        wrong = [a for a in record["attempts"] if a.get("check_failed")]
        if wrong and not failed:
            record["status"] = "wrong-result"
            record["failure"] = {"class": "wrong-result", "detail": wrong[0]["check_failed"],
                                 "entry": wrong[0]["by"]}
        elif failed:
            record["status"] = failed[0]["failure"]["class"]
            record["failure"] = failed[0]["failure"]
        elif record["attempts"]:
            record["status"], record["failure"] = "ok", None
        else:
            record["status"] = "not-reached"
            record["failure"] = _blocker(runs.get(record["file"], []))
        record["specializations_built"] = sum(a["ok"] for a in record["attempts"])
    return list(table.values())
