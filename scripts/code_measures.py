"""Print the library's shape at a git revision: module sizes, untyped or ``Any`` parameters, ``getattr``
reads with a literal field name, the line count of each cloud provider's ``create`` (one, in
``providers/base.py``, since the lifecycle template) and of the lifecycle hooks each cloud writes.

``python scripts/code_measures.py [REV ...]`` (default: the work tree's HEAD), one column per revision;
it reads files with ``git show`` so no checkout is needed. Figures for a closing note's before/after table.
"""

from __future__ import annotations

import ast
import subprocess
import sys

LIB = "include/bakeoff"
MODULES = (
    "store.py",
    "facts.py",
    "budget.py",
    "pipeline.py",
    "bench/metrics.py",
    "bench/metric_units.py",
    "bench/records.py",
    "providers/registry.py",
    "serving/deploy.py",
)
CLOUDS = ("providers/base.py", "providers/aws.py", "providers/oci.py", "providers/rest.py", "providers/digitalocean.py")
# what a cloud writes for the one lifecycle (providers/base.CloudProvider.create calls these)
HOOKS = ("require", "find_existing", "prepare", "placements", "launch", "secured", "abandon", "capacity_advice")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def files(rev: str) -> dict[str, str]:
    names = [n for n in _git("ls-tree", "-r", "--name-only", rev, LIB).splitlines() if n.endswith(".py")]
    return {n[len(LIB) + 1 :]: _git("show", f"{rev}:{n}") for n in names}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    out = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if out and out[0].arg in ("self", "cls"):
        out = out[1:]
    return out


def measures(src: dict[str, str]) -> dict[str, int | str]:
    untyped = any_typed = getattr_lit = 0
    funcs: dict[str, dict[str, int]] = {}
    for name, text in src.items():
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for p in _params(node):
                    if p.annotation is None:
                        untyped += 1
                    elif ast.unparse(p.annotation) == "Any":
                        any_typed += 1
                funcs.setdefault(name, {})[node.name] = max(
                    funcs.get(name, {}).get(node.name, 0), (node.end_lineno or node.lineno) - node.lineno + 1
                )
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) == 3
                and isinstance(node.args[1], ast.Constant)
            ):
                getattr_lit += 1
    out: dict[str, int | str] = {
        "library lines": sum(t.count("\n") for t in src.values()),
        "modules over 400 lines": sum(t.count("\n") > 400 for t in src.values()),
        "parameters without annotation": untyped,
        "parameters annotated Any": any_typed,
        'getattr(x, "field", default) reads': getattr_lit,
    }
    for m in MODULES:
        out[f"lines {m}"] = src[m].count("\n") if m in src else "-"
    out["lines metrics.summarize"] = funcs.get("bench/metrics.py", {}).get("summarize", "-")
    for c in CLOUDS:
        out[f"create lines {c}"] = _cloud(funcs, c).get("create", "-")
    for c in CLOUDS[1:]:
        out[f"lifecycle hook lines {c}"] = sum(_cloud(funcs, c).get(h, 0) for h in HOOKS) or "-"
    return out


def _cloud(funcs: dict[str, dict[str, int]], module: str) -> dict[str, int]:
    """A cloud's functions whether it is one module (``oci.py``) or a package (``oci/__init__.py`` joins the hooks)."""
    return funcs.get(module) or funcs.get(module.removesuffix(".py") + "/__init__.py", {})


def main(revs: list[str]) -> None:
    cols = [measures(files(r)) for r in revs]
    width = max(len(k) for k in cols[0])
    print(f"{'':<{width}}  " + "  ".join(f"{r[:12]:>12}" for r in revs))
    for key in cols[0]:
        print(f"{key:<{width}}  " + "  ".join(f"{str(c.get(key, '-')):>12}" for c in cols))


if __name__ == "__main__":
    main(sys.argv[1:] or ["HEAD"])
