"""Fetch TileLang's example scripts into a folder outside this repository, for the
compatibility census (tools/compat_census.py).

The examples come from one released TileLang source distribution on PyPI (pinned, so the
census is reproducible), through pip. Only the examples/ tree is kept, less the examples that
target hardware tilecraft does not compile for (AMD, Blackwell, Trainium-style tcgen05
programs) or that exist for BitBLAS alone; MANIFEST.json lists what was kept and what was
left out and why.

    python3 tools/fetch_tilelang_examples.py /work/tl-examples [--version 0.1.14]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

DEFAULT_VERSION = "0.1.14"   # the newest TileLang release published with a source archive

# Folders (relative to examples/) left out whole, with the reason.
SKIPPED_FOLDERS = {
    "amd": "AMD (HIP) only",
    "deepseek_mla/amd": "AMD (HIP) only",
    "gemm_sm100": "Blackwell (sm_100) only",
    "gemm_tcgen05": "Blackwell (tcgen05) only",
    "flash_attention_sm100": "Blackwell (sm_100) only",
    "blockscaled_gemm_sm100": "Blackwell (sm_100) only",
    "gemm_sm120": "Blackwell (sm_120) only",
    "aws": "Blackwell (tcgen05) only",
    "bitnet-1.58b": "BitBLAS model pipeline",
}
# Single files left out, by a part of their name, with the reason.
SKIPPED_NAME_PARTS = {
    "_amd": "AMD (HIP) only",
    "cdna": "AMD (HIP) only",
    "_dcu": "AMD (HIP) only",
    "mfma": "AMD (HIP) only",
    "sm100": "Blackwell (sm_100) only",
}


def skip_reason(relpath: str) -> str | None:
    """Why an example file is left out, or None to keep it."""
    for folder, reason in SKIPPED_FOLDERS.items():
        if relpath == folder or relpath.startswith(folder + "/"):
            return reason
    name = os.path.basename(relpath)
    for part, reason in SKIPPED_NAME_PARTS.items():
        if part in name:
            return reason
    return None


def download_sdist(version: str, into: str) -> str:
    """The path of TileLang's source archive of `version`, downloaded with pip."""
    subprocess.run([sys.executable, "-m", "pip", "download", f"tilelang=={version}",
                    "--no-binary", "tilelang", "--no-deps", "--quiet", "-d", into], check=True)
    for name in os.listdir(into):
        if name.startswith("tilelang-") and name.endswith(".tar.gz"):
            return os.path.join(into, name)
    raise SystemExit(f"pip left no source archive of tilelang {version} in {into}")


def extract_examples(archive: str, out: str) -> dict:
    """Write the kept example files under `out`; the manifest of kept and skipped files."""
    kept, skipped = [], {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/", 2)
            if len(parts) < 3 or parts[1] != "examples" or not member.isfile():
                continue
            rel = parts[2]
            reason = skip_reason(rel)
            if reason is not None:
                skipped[rel] = reason
                continue
            target = os.path.join(out, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            kept.append(rel)
    return {"kept": sorted(kept), "skipped": dict(sorted(skipped.items()))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the examples into (outside the repository)")
    parser.add_argument("--version", default=DEFAULT_VERSION, help="TileLang release")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = extract_examples(download_sdist(args.version, tmp), args.out)
    manifest = {"source": f"tilelang {args.version} source distribution (PyPI), examples/",
                **manifest}
    with open(os.path.join(args.out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    python = [k for k in manifest["kept"] if k.endswith(".py")]
    print(f"kept {len(manifest['kept'])} files ({len(python)} Python), skipped "
          f"{len(manifest['skipped'])}; manifest in {args.out}/MANIFEST.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
