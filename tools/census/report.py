"""The census as markdown: kernels per class, the missing names by the number of kernels each
blocks, and the individual failures (TileErrors, nvcc and internal errors, import-time
failures), then one line per example file."""
from __future__ import annotations

from collections import Counter, defaultdict

from .aggregate import FAILURE_CLASSES


def _cause(kernel) -> tuple | None:
    """(class, detail) of what keeps a kernel from building: its own failure, or what blocked
    its file's run before it."""
    f = kernel["failure"]
    if f is None:
        return None
    return f["class"], f.get("detail", "")


def counts(kernels: list) -> dict:
    own = Counter(k["status"] for k in kernels)
    blocked = Counter(k["failure"]["class"] for k in kernels if k["status"] == "not-reached")
    return {"own": own, "blocked": blocked}


def blocking_names(kernels: list, used: dict | None = None,
                   classes=("missing-name", "missing-argument")) -> list:
    """[(name, class, kernels it blocks first, files where it does, kernels defined in the
    files that use it, files that use it)], most kernels first. used: relpath -> the missing
    names the file's source refers to (names.py)."""
    used = used or {}
    blocks, where, kinds = Counter(), defaultdict(set), {}
    for k in kernels:
        cause = _cause(k)
        if cause and cause[0] in classes:
            blocks[cause[1]] += 1
            where[cause[1]].add(k["file"])
            kinds[cause[1]] = cause[0]
    defined = Counter(k["file"] for k in kernels)
    users = defaultdict(set)
    for rel, names in used.items():
        for name in names:
            users[name].add(rel)
            kinds.setdefault(name, "missing-name")
    rows = [(name, kinds[name], blocks[name], len(where[name]),
             sum(defined[rel] for rel in users[name]), len(users[name]))
            for name in set(blocks) | set(users)]
    return sorted(rows, key=lambda r: (-r[2], -r[4], -r[5], r[0]))


def _failures_of(kernels, cls, root="") -> list:
    """[((detail, where), kernel places)] of one class; a kernel the failure kept its file's
    run from reaching is marked (n.r.)."""
    rows = defaultdict(list)
    for k in kernels:
        f = k["failure"]
        if f is not None and f["class"] == cls:
            where = (f.get("where") or "").replace(root + "/", "") if root else f.get("where")
            mark = " (n.r.)" if k["status"] == "not-reached" else ""
            rows[(f["detail"], where)].append(f"{k['file']}:{k['line']}{mark}")
    return sorted(rows.items(), key=lambda item: -len(item[1]))


def markdown(kernels: list, file_runs: dict, header: str, target: str = "sm_90a",
             per_file: bool = True, used: dict | None = None, root: str = "") -> str:
    c = counts(kernels)
    total = len(kernels)
    out = [header, "", "## Kernels by outcome", "",
           f"{total} kernels (each `@T.prim_func`, or function that `@tilelang.jit` makes a "
           "kernel of directly, in the kept examples).", "",
           "| outcome | kernels that failed so | kernels not reached because of it |",
           "|---|---:|---:|", f"| ok (built for {target}) | {c['own']['ok']} | |"]
    for cls in FAILURE_CLASSES:
        if c["own"][cls] or c["blocked"][cls]:
            out.append(f"| {cls} | {c['own'][cls]} | {c['blocked'][cls]} |")
    for cls in ("run-stopped", "not-built"):
        if c["blocked"][cls]:
            out.append(f"| not reached: {cls} | | {c['blocked'][cls]} |")
    eager = [k for k in kernels if k["eager"]]
    out += ["", f"{len(eager)} of the kernels use the eager `@tilelang.jit` form (the kernel "
            f"written in the jit function itself); {sum(k['status'] == 'ok' for k in eager)} "
            "of them compiled.", "", "## Missing names, by kernels blocked", "",
            "First failure: the kernels whose build failed on the name, or whose file's run "
            "failed on it before reaching them (a run stops at its first failure). Used: "
            "every missing name the examples' source refers to (read without running it), "
            "with the kernels defined in the files that use it (test files define none).", "",
            "| name | kind | first failure: kernels | in files | used: kernels in those "
            "files | files |", "|---|---|---:|---:|---:|---:|"]
    for name, cls, n, nfiles, in_users, users in blocking_names(kernels, used):
        out.append(f"| `{name}` | {cls} | {n} | {nfiles} | {in_users} | {users} |")
    for cls, title in (("tile-error", "TileErrors"), ("nvcc-error", "nvcc errors"),
                       ("internal-error", "Internal errors"),
                       ("value-mismatch", "tilecraft values refused where TileLang's "
                                          "work"),
                       ("import-time", "Import-time failures"),
                       ("needs-gpu", "Needs a GPU before building"),
                       ("example-error", "The example's own code failed"),
                       ("timeout", "Timeouts")):
        rows = _failures_of(kernels, cls, root)
        if not rows:
            continue
        out += ["", f"## {title}", "", "| first line | where | kernels ((n.r.): not reached "
                "because of it) |", "|---|---|---|"]
        for (detail, where), places in rows:
            detail = detail.replace("|", "\\|")
            detail = detail if len(detail) <= 160 else detail[:157] + "..."
            out.append(f"| {detail} | {where or ''} | {', '.join(places)} |")
    if not per_file:
        return "\n".join(out) + "\n"
    out += ["", "## Per file", "", "| file | kernels | ok | how its runs ended |",
            "|---|---:|---:|---|"]
    per_file = defaultdict(list)
    for k in kernels:
        per_file[k["file"]].append(k)
    for rel in sorted(set(per_file) | set(file_runs)):
        ks = per_file.get(rel, [])
        ends = "; ".join(_run_text(r) for r in file_runs.get(rel, []))
        out.append(f"| {rel} | {len(ks)} | {sum(k['status'] == 'ok' for k in ks)} | "
                   f"{ends.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def _run_text(run) -> str:
    if run["outcome"] == "failed":
        f = run["failure"]
        return f"{run['entry']}: {f['class']} {f.get('detail', '')}"
    return f"{run['entry']}: {run['outcome']}"
