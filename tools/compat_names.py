"""The name tables of docs/compatibility.md: every public name of tilecraft.language (what a
TileLang script can write as `T.<name>`), by family, and every TileLang name it refuses with a
clear error, with what that name is in TileLang.

    python3 tools/compat_names.py            # print the tables
    python3 tools/compat_names.py --write    # replace them in docs/compatibility.md

tests/unit/test_compat_names.py fails when the page's tables differ from these."""
from __future__ import annotations

import argparse
import os
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

PAGE = os.path.join(REPO, "docs", "compatibility.md")
BEGIN, END = "<!-- names:begin -->", "<!-- names:end -->"

# module of a name's definition -> the family it is listed under
FAMILIES = {
    "proxy": "program structure and parameters", "eager": "the eager jit form",
    "loops": "kernels and loops", "allocate": "memory", "tileops": "tile operators",
    "im2col": "tile operators", "math": "scalar math and casts", "dtypes": "dtypes",
    "annotate": "layout and scheduling annotations", "views": "memory",
    "layouts": "layout and scheduling annotations",
    "registers": "layout and scheduling annotations", "tileop": "tile operators",
    "threads": "thread and block indices", "warp": "warps and synchronization",
    "warp_specialize": "warps and synchronization",
    "allreduce": "warps and synchronization",
}
def tables() -> str:
    import tilecraft.language as T
    from tilecraft.language.unsupported import _TILELANG
    families: dict = {}
    for name, obj in sorted(vars(T).items()):
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        module = getattr(obj, "__module__", None) or type(obj).__module__
        family = FAMILIES.get(module.rsplit(".", 1)[-1], "other")
        families.setdefault(family, []).append(name)
    works = sum(len(v) for v in families.values())
    refused = dict(_TILELANG)
    out = [f"{works} names work; {len(refused)} TileLang names are refused with an error "
           "naming them.", "", "| family | names that work |", "|---|---|"]
    for family in sorted(families):
        out.append(f"| {family} | {', '.join(f'`{n}`' for n in families[family])} |")
    out += ["", "| refused name | what it is in TileLang |", "|---|---|"]
    for name in sorted(refused, key=str.lower):
        out.append(f"| `T.{name}` | {refused[name]} |")
    return "\n".join(out)


def page_with_tables(page: str) -> str:
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{tables()}\n{END}{tail}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if not args.write:
        print(tables())
        return
    with open(PAGE) as f:
        page = f.read()
    with open(PAGE, "w") as f:
        f.write(page_with_tables(page))


if __name__ == "__main__":
    main()
