"""Every Python snippet of the README and of docs/ runs as written, on the interpreter, in a
fresh process (the way a reader pastes it into a file), with examples/ importable."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SNIPPETS = [(page.relative_to(ROOT), n, code) for page in PAGES
            for n, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))]


def test_the_readme_has_snippets():
    assert any(str(page) == "README.md" for page, _, _ in SNIPPETS)


@pytest.mark.parametrize("page, index, source", SNIPPETS,
                         ids=[f"{page}#{n}" for page, n, _ in SNIPPETS])
def test_snippet_runs(page, index, source, tmp_path):
    if "import torch" in source:
        pytest.importorskip("torch")
    script = tmp_path / f"snippet_{index}.py"
    script.write_text(source)
    path = os.pathsep.join([str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "TILECRAFT_TARGET": "interp", "TILECRAFT_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, f"{page} snippet {index}:\n{proc.stderr[-3000:]}"
