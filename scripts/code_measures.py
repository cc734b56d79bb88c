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
from collections.abc import Iterator
from pathlib import PurePosixPath

LIB = "include/bakeoff"
PACKAGE = "bakeoff"
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


def module_name(path: str) -> str:
    """``serving/deploy.py`` → ``bakeoff.serving.deploy``; a package's ``__init__.py`` is the package."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    out = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if out and out[0].arg in ("self", "cls"):
        out = out[1:]
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Each import with where it runs: ``module`` (at import time), ``annotation`` (under ``TYPE_CHECKING``)
    or ``function`` (inside a function body)."""

    def walk(node: ast.AST, where: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, where
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, "function")
            elif isinstance(child, ast.If) and _is_type_checking(child.test) and where == "module":
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), "annotation")
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), where)
            else:
                yield from walk(child, where)

    yield from walk(tree, "module")


def _targets(node: ast.Import | ast.ImportFrom, me: str, is_pkg: bool, modules: set[str]) -> set[str]:
    """The project modules an import statement loads (a ``from`` of a submodule names the submodule)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return {_known(n, modules) for n in names if n.split(".")[0] == PACKAGE} - {""}
    if node.level:
        base = me.split(".") if is_pkg else me.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        src = ".".join([*base, *([node.module] if node.module else [])])
    else:
        src = node.module or ""
    if src.split(".")[0] != PACKAGE:
        return set()
    out = set()
    for a in node.names:
        sub = f"{src}.{a.name}"
        out.add(sub if sub in modules else _known(src, modules))
    return out - {""}


def _known(name: str, modules: set[str]) -> str:
    """The longest known module a dotted name starts with."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return ""


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _cycle_row(graph: dict[str, set[str]]) -> str:
    comps = _cycles(graph)
    return f"{len(comps)} (largest {max(map(len, comps))})" if comps else "0"


def measures(src: dict[str, str], names: tuple[str, ...]) -> Row:
    py = {p: t for p, t in src.items() if p.endswith(".py")}
    trees = {p: ast.parse(t) for p, t in py.items()}
    modules = {module_name(p) for p in py}
    untyped = any_typed = getattr_default = type_checking = 0
    wheres = ("module", "annotation", "function")
    graph: dict[str, dict[str, set[str]]] = {w: {m: set() for m in modules} for w in wheres}
    function_imports = function_imports_project = 0
    for path, tree in trees.items():
        me = module_name(path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for p in _params(node):
                    if p.annotation is None:
                        untyped += 1
                    elif ast.unparse(p.annotation) == "Any":
                        any_typed += 1
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                type_checking += 1
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) == 3
                and isinstance(node.args[1], ast.Constant)
            ):
                getattr_default += 1
        for imp, where in _imports(tree):
            targets = _targets(imp, me, path.endswith("__init__.py"), modules) - {me}
            graph[where][me] |= targets
            if where == "function":
                function_imports += 1
                function_imports_project += bool(targets)
    run = graph["module"]
    annotated = {m: run[m] | graph["annotation"][m] for m in modules}
    every = {m: annotated[m] | graph["function"][m] for m in modules}
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
        "package cycles counting annotation-only": _cycle_row(_packages(annotated)),
    }
    for name in names:
        word = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
        literal = {p for p, tree in trees.items() if _names_literal(tree, name)}
        out[f"files naming {name!r} (str literal, .py)"] = len(literal)
        out[f"files mentioning {name} (any file)"] = sum(bool(word.search(t)) for t in src.values())
    return out


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto the library's top-level packages (a top-level module is its own)."""

    def top(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(top(m), set()).update(top(d) for d in deps if top(d) != top(m))
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
