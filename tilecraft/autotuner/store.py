"""Tuning results on disk, so a problem is measured once per machine.

An entry is `<cache dir>/autotuner/<key[:2]>/<key>.json`. The key is a SHA-256 over what the
best configuration depends on:
- the kernel: the factory's qualified name, a hash of its source, and the tile IR of one
  candidate specialized to the problem (which also catches a change in a helper or a
  module-level constant the factory reads, such as a dtype);
- the problem: every non-tunable argument, defaults included, and the parameters' shapes and
  dtypes;
- the search: the candidate configurations (after pins) or the recommender's space, the
  pruning fraction, the correctness reference and the timer by name;
- where it ran: the GPU's model, its name and SM count ("cpu" on the interpreter), the backend
  and arch, tilecraft's version and the compiler's own fingerprint. A run measures on every
  GPU of the tuned one's model (gpus.py) and on no other, so its result is that model's, and
  is used again on one GPU of the model or several, never on another card.
A different shape is a different key: an entry is never used for another problem.

Writers fill a temporary file beside the entry and rename it into place, so a reader in
another process sees a whole entry or none. TILECRAFT_DISABLE_CACHE turns reading and writing
off, as it does for compiled kernels.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings

from .. import knobs
from ..code_hash import source_hash  # noqa: F401  (keys, and the workers check it)
from ..backends.cuda.runtime.cache import write_atomically
from .space import canonical

_FORMAT = 1


def qualified_name(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def callable_name(fn) -> str | None:
    """A callable by name, for keys: its identity across processes is its name."""
    if fn is None:
        return None
    return qualified_name(fn)


def param_signature(func) -> list:
    """[(name, shape, dtype)] of a prim_func's parameters, as text."""
    from ..ir.buffer import Buffer
    out = []
    for p in func.params:
        if isinstance(p, Buffer):
            out.append([p.name, [str(d) for d in p.shape], str(p.dtype)])
        else:
            out.append([p.name, [], str(p.dtype)])
    return out


def make_key(parts: dict) -> str:
    text = json.dumps({"format": _FORMAT, **parts}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def key_parts(fn, problem, search, fraction, device: str, backend: str, arch, probe,
              options: dict) -> dict:
    """Everything make_key hashes, as JSON data (kept in the entry for reading)."""
    from .. import __version__
    from ..backends.cuda.runtime.program import compiler_fingerprint
    return {
        "kernel": qualified_name(fn),
        "source": source_hash(fn),
        "ir": hashlib.sha256(probe.script().encode()).hexdigest() if probe is not None else None,
        "params": param_signature(probe) if probe is not None else None,
        "problem": canonical(problem.bound),
        "pinned": canonical(problem.pinned),
        "search": canonical(search),
        "fraction": fraction,
        "device": device,
        "backend": backend,
        "arch": arch,
        "options": canonical(options),
        "tilecraft": __version__,
        "compiler": compiler_fingerprint(),
    }


def enabled(requested: bool) -> bool:
    return requested and not knobs.cache_disabled()


def entry_path(key: str) -> str:
    return os.path.join(knobs.cache_dir(), "autotuner", key[:2], key + ".json")


def load(key: str) -> dict | None:
    """The stored record for key, or None (absent, unreadable, or not this key's)."""
    try:
        with open(entry_path(key)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key or \
            not isinstance(record.get("best"), str) or not isinstance(record.get("trials"), list):
        return None
    return record


def save(key: str, parts: dict, result) -> None:
    """Write the result for key (atomically). A failure to write only warns: tuning worked."""
    record = {"key": key, "parts": parts, "best": canonical(result.config),
              "latency_ms": result.latency, "ref_latency_ms": result.ref_latency,
              "gpus": result.gpus,
              "trials": [{**t.to_json(), "config": canonical(t.config)} for t in result.trials]}
    path = entry_path(key)
    text = json.dumps(record, indent=1, sort_keys=True, default=repr)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, text.encode())
    except OSError as err:
        warnings.warn(f"tilecraft: cannot write the tuning cache at {path}: {err}")


def restore_trials(record: dict, configs: list[dict]) -> list | None:
    """The stored trials with their configurations matched to the current candidates (by
    canonical form, so values JSON cannot keep exactly, such as tuples, come back as given);
    None when the record does not match them."""
    from .results import Trial
    by_text = {canonical(c): c for c in configs}
    trials = []
    for row in record["trials"]:
        config = by_text.get(row.get("config"))
        if config is None:
            return None
        trials.append(Trial(config=config, predicted_s=row.get("predicted_s"),
                            status=row.get("status", ""), latency_ms=row.get("latency_ms"),
                            message=row.get("message", ""), compile_s=row.get("compile_s")))
    return trials
