"""Print the library's shape at git revisions, the rows of a closing note's before/after table: modules in
the top folder, the largest modules, ``pipeline.py`` lines, function-level imports, ``TYPE_CHECKING`` blocks,
``Any`` parameters, ``getattr`` reads with a default, import cycles (run time, counting annotation-only
imports, counting function-level imports too) and the files that name an engine or a cloud.

``python scripts/code_measures.py [--name NAME ...] [REV ...]`` (default: the work tree's HEAD; names
default to two engines and two clouds), one column per revision. Files are found by walking each revision
with ``git ls-tree`` and read with ``git show``, so no checkout is needed and old and new layouts both work.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from pathlib import PurePosixPath

# the script's own folder is on sys.path when it runs as ``python scripts/code_measures.py``
from import_graph import (
    PACKAGE,
    components,
    graph_of,
    imports,
    is_type_checking,
    module_edges,
    module_name,
    package_graph,
    targets,
)

LIB = "include/bakeoff"
NAMES = ("vllm", "sglang", "aws", "oci")
TOP = 5
# found by file name wherever the layout puts them
NAMED_MODULES = ("pipeline.py", "store.py", "facts.py", "steps.py")
Row = dict[str, int | str]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def files(rev: str) -> dict[str, str]:
    """Every file under the library at ``rev`` (path relative to it → text); binary files are skipped."""
    out: dict[str, str] = {}
    for n in _git("ls-tree", "-r", "--name-only", rev, LIB).splitlines():
        try:
            out[n[len(LIB) + 1 :]] = _git("show", f"{rev}:{n}")
        except UnicodeDecodeError:
            continue
    return out


def _lines(text: str) -> int:
    return text.count("\n")


def _module(path: str) -> str:
    """``serving/deploy.py`` (relative to the library) -> ``bakeoff.serving.deploy``."""
    return module_name(PurePosixPath(PACKAGE, path))


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    out = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if out and out[0].arg in ("self", "cls"):
        out = out[1:]
    return out


def _cycle_row(graph: dict[str, set[str]]) -> str:
    comps = components(graph)
    return f"{len(comps)} (largest {max(map(len, comps))})" if comps else "0"


def measures(src: dict[str, str], names: tuple[str, ...]) -> Row:
    py = {p: t for p, t in src.items() if p.endswith(".py")}
    trees = {p: ast.parse(t) for p, t in py.items()}
    modules = {_module(p) for p in py}
    untyped = any_typed = getattr_default = type_checking = 0
    edges = {}
    function_imports = function_imports_project = 0
    for path, tree in trees.items():
        me, is_package = _module(path), path.endswith("__init__.py")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for p in _params(node):
                    if p.annotation is None:
                        untyped += 1
                    elif ast.unparse(p.annotation) == "Any":
                        any_typed += 1
            elif isinstance(node, ast.If) and is_type_checking(node.test):
                type_checking += 1
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) == 3
                and isinstance(node.args[1], ast.Constant)
            ):
                getattr_default += 1
        edges[me] = module_edges(me, tree, is_package=is_package, modules=modules)
        for imp, where in imports(tree):
            if where == "function":
                function_imports += 1
                function_imports_project += bool(targets(imp, me, is_package=is_package, modules=modules))
    run = graph_of(edges, ("module",))
    annotated = graph_of(edges, ("module", "annotation"))
    every = graph_of(edges, ("module", "annotation", "function"))
    sizes = sorted(((_lines(t), p) for p, t in py.items()), reverse=True)
    top = [p for p in py if "/" not in p and p not in ("__init__.py", "__main__.py")]
    out: Row = {
        "library lines": sum(_lines(t) for t in py.values()),
        "library modules": len(py),
        "modules in the top folder": len(top),
        "modules over 400 lines": sum(n > 400 for n, _ in sizes),
    }
    for i, (n, name) in enumerate(sizes[:TOP], 1):
        out[f"largest module {i}"] = f"{name} {n}"
    for base in NAMED_MODULES:
        hits = [p for p in py if PurePosixPath(p).name == base]
        out[f"lines {base}"] = ", ".join(f"{p} {_lines(py[p])}" for p in sorted(hits)) if hits else "-"
    out |= {
        "function-level imports": function_imports,
        "function-level imports of the project": function_imports_project,
        "TYPE_CHECKING blocks": type_checking,
        "parameters without annotation": untyped,
        "parameters annotated Any": any_typed,
        'getattr(x, "field", default) reads': getattr_default,
        "import cycles at run time": _cycle_row(run),
        "import cycles counting annotation-only": _cycle_row(annotated),
        "import cycles counting function-level too": _cycle_row(every),
        "package cycles counting annotation-only": _cycle_row(package_graph(annotated)),
    }
    for name in names:
        word = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
        literal = {p for p, tree in trees.items() if _names_literal(tree, name)}
        out[f"files naming {name!r} (str literal, .py)"] = len(literal)
        out[f"files mentioning {name} (any file)"] = sum(bool(word.search(t)) for t in src.values())
    return out


def _names_literal(tree: ast.Module, name: str) -> bool:
    """Whether code holds ``name`` as a string constant of its own (a branch, a key, a table entry)."""
    return any(isinstance(n, ast.Constant) and n.value == name for n in ast.walk(tree))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("revs", nargs="*", default=["HEAD"])
    ap.add_argument("--name", action="append", help="an engine or cloud name (repeatable)")
    args = ap.parse_args()
    names = tuple(args.name or NAMES)
    cols = [measures(files(r), names) for r in args.revs]
    keys = list(dict.fromkeys(k for c in cols for k in c))
    width = max(len(k) for k in keys)
    vals = [[str(c.get(k, "-")) for c in cols] for k in keys]
    colw = [max(12, len(r[:12]), *(len(v[i]) for v in vals)) for i, r in enumerate(args.revs)]
    print(f"{'':<{width}}  " + "  ".join(f"{r[:12]:>{w}}" for r, w in zip(args.revs, colw, strict=True)))
    for k, row in zip(keys, vals, strict=True):
        print(f"{k:<{width}}  " + "  ".join(f"{v:>{w}}" for v, w in zip(row, colw, strict=True)))


if __name__ == "__main__":
    main()
