"""Vendor the command-line flags each serving engine release accepts, read from its own parser's source.

    python scripts/vendor_engine_flags.py --atom PATH [--trtllm PATH] [--cache DIR]

For every engine image the vendored recipes (``include/bakeoff/recipes/``) and the serving catalog
(``catalog/serving.yaml``) name, the engine release it holds is read from its tag (``images``), and that
release's argument parser is read from its published source:

- vLLM and SGLang: the release's wheel from the package index (``pip download --no-deps``, into
  ``--cache``, never installed: their imports need a GPU build of torch), whose ``argparse`` definitions
  are read with ``ast``: every literal flag given to ``add_argument``, plus the flags their parsers
  derive from dataclass fields (vLLM's ``FrontendArgs`` and ``--no-`` forms of boolean fields, which
  vLLM registers with ``BooleanOptionalAction``; SGLang's ``A[...]``-annotated ``ServerArgs`` fields,
  with their ``Arg(cli_name=, aliases=)``).
- ATOM: a git directory of ROCm/ATOM (``--atom``), read at the release's tag or, for an image built
  from a dated snapshot (``atom20260511``), at the last commit before that date; its newest commit is
  read too, as the snapshot the dev images (branch builds) are held to.
- TensorRT-LLM: a directory holding ``tensorrt_llm/commands/serve.py`` (``--trtllm``), its ``click``
  options; the release candidates the images name are not on the package index, so the file's own
  commit and version are recorded and every image is held to it (``basis`` says so).

An image whose tag names no release (a nightly or dev build) is held to the newest vendored release of
its engine, and its ``basis`` says that too. Writes ``include/bakeoff/catalog/engine_flags.json``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "include" / "bakeoff" / "catalog" / "engine_flags.json"
# the files whose parsers the serving command runs, per engine
FILES = {
    "vllm": [
        "vllm/engine/arg_utils.py",
        "vllm/entrypoints/openai/cli_args.py",
        "vllm/entrypoints/cli/serve.py",
    ],
    "sglang": ["sglang/srt/server_args.py"],
    "atom": [
        "atom/model_engine/arg_utils.py",
        "atom/entrypoints/openai_server.py",
        "atom/entrypoints/openai/api_server.py",
    ],
    "trtllm": ["tensorrt_llm/commands/serve.py"],
}
PACKAGES = {"vllm": "vllm", "sglang": "sglang"}
# pip only downloads here (the project's environment, made by uv, has none: the system's is used)
PIP = [sys.executable, "-m", "pip"] if importlib.util.find_spec("pip") else [shutil.which("pip3") or "pip3"]
VLLM_DATACLASSES = ("BaseFrontendArgs", "FrontendArgs")
VLLM_BOOL_SOURCES = ("EngineArgs", "AsyncEngineArgs", *VLLM_DATACLASSES)


# --- which release an image holds ---------------------------------------------------------------


def release_of(engine: str, image: str) -> str | None:
    """The release of ``engine`` an image's tag names; None for a nightly or dev build, or an image
    whose tag versions something else (a Dynamo runtime's own release)."""
    tag = image.split("@", 1)[0].rpartition(":")[2]
    patterns = {
        "vllm": r"v(\d+\.\d+\.\d+(?:\.post\d+)?)$",
        "sglang": r"v(\d+\.\d+\.\d+(?:\.post\d+)?)(?:-|$)",
        "atom": r".*_atom(\d+\.\d+\.\d+|\d{8})",
        "trtllm": r"(\d+\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?)$",
    }
    if engine == "trtllm" and "tensorrt-llm/release" not in image:
        return None
    m = re.match(patterns[engine], tag)
    return m.group(1) if m else None


def shipped_images() -> dict[str, str]:
    """Every engine image a shipped recipe or the serving catalog names, with its engine."""
    recipes = ROOT / "include" / "bakeoff" / "recipes"
    out = {}
    for name in ("inferencex.yaml", "inferencex-multinode.yaml"):
        doc = yaml.safe_load((recipes / name).read_text())
        out |= {r["image"]: r["engine"] for r in doc["recipes"].values() if r.get("image")}
    stacks = yaml.safe_load((ROOT / "include" / "bakeoff" / "catalog" / "serving.yaml").read_text())["stacks"]
    out |= {img: name for name, s in stacks.items() for img in (s.get("images") or {}).values()}
    return dict(sorted(out.items()))


# --- reading a parser's source ----------------------------------------------------------------


def _strings(node: ast.AST) -> list[str]:
    return [a.value for a in getattr(node, "args", []) if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def literal_flags(source: str) -> set[str]:
    """Flags given as literals to ``add_argument`` (argparse) or ``click.option``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "add_argument":
            out |= {s for s in _strings(node) if s.startswith("-")}
        elif node.func.attr == "option":  # click: "--flag/--no-flag" declares both
            out |= {part for s in _strings(node) for part in s.split("/") if part.startswith("-")}
    return out


def _classes(source: str, names: tuple[str, ...]) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name in names]


def _fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    return [s for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def _dashed(name: str) -> str:
    return "--" + name.replace("_", "-")


def vllm_flags(sources: dict[str, str]) -> set[str]:
    """Literal flags, FrontendArgs' fields, and ``--no-`` forms of every boolean field's flag."""
    flags = set().union(*(literal_flags(s) for s in sources.values()))
    bools = set()
    for src in sources.values():
        for cls in _classes(src, VLLM_DATACLASSES):
            flags |= {_dashed(f.target.id) for f in _fields(cls)}  # type: ignore[attr-defined]
        for cls in _classes(src, VLLM_BOOL_SOURCES):
            bools |= {f.target.id for f in _fields(cls) if re.search(r"\bbool\b", ast.unparse(f.annotation))}  # type: ignore[attr-defined]
    return flags | {f"--no-{_dashed(b)[2:]}" for b in bools if _dashed(b) in flags}


def sglang_flags(sources: dict[str, str]) -> set[str]:
    """Literal flags and ServerArgs' ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields (``no_cli`` left out)."""
    flags = set().union(*(literal_flags(s) for s in sources.values()))
    for src in sources.values():
        for cls in _classes(src, ("ServerArgs",)):
            for f in _fields(cls):
                ann = f.annotation
                if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
                    continue
                parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else []
                meta = parts[1] if len(parts) > 1 else None
                kw = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
                if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value:
                    continue
                if not (isinstance(meta, ast.Call) or (isinstance(meta, ast.Constant) and isinstance(meta.value, str))):
                    continue
                name = kw.get("cli_name")
                flags.add(name.value if isinstance(name, ast.Constant) else _dashed(f.target.id))  # type: ignore[attr-defined]
                aliases = kw.get("aliases")
                if isinstance(aliases, ast.List):
                    flags |= {a.value for a in aliases.elts if isinstance(a, ast.Constant)}
    return flags


def plain_flags(sources: dict[str, str]) -> set[str]:
    return set().union(*(literal_flags(s) for s in sources.values()))


def click_serve_flags(sources: dict[str, str]) -> set[str]:
    """The ``click.option`` flags of the ``serve`` command only (the file declares other commands too)."""
    out: set[str] = set()
    for src in sources.values():
        for fn in ast.walk(ast.parse(src)):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = [d for d in fn.decorator_list if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)]
            if not any(d.func.attr == "command" and _strings(d) == ["serve"] for d in calls):
                continue
            for d in calls:
                if d.func.attr == "option":
                    out |= {part for s in _strings(d) for part in s.split("/") if part.startswith("-")}
    return out | {"--help"}


def abbreviates(sources: dict[str, str]) -> bool:
    """Whether the parser takes a unique prefix of a flag for the flag (argparse's default; no
    ``ArgumentParser(allow_abbrev=False)`` in the sources). click never does."""
    for src in sources.values():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.keyword) and node.arg == "allow_abbrev":
                return not (isinstance(node.value, ast.Constant) and node.value.value is False)
    return True


EXTRACT = {"vllm": vllm_flags, "sglang": sglang_flags, "atom": plain_flags, "trtllm": click_serve_flags}


def wheel_sources(engine: str, version: str, cache: Path) -> tuple[dict[str, str], str]:
    """The parser files of a release's wheel, downloaded (not installed) into ``cache``."""
    pkg = PACKAGES[engine]
    found = sorted(cache.glob(f"{pkg}-{version}-*.whl"))
    if not found:
        cmd = [*PIP, "download", "--quiet", "--no-deps", f"{pkg}=={version}", "-d", str(cache)]
        subprocess.run(cmd, check=True)
        found = sorted(cache.glob(f"{pkg}-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as z:
        names = set(z.namelist())
        return {f: z.read(f).decode() for f in FILES[engine] if f in names}, f"{found[0].name} (package index)"


def git_sources(engine: str, git_dir: Path, release: str) -> tuple[dict[str, str], str]:
    """The parser files of ATOM at a release tag, or at the last commit before a dated snapshot."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True
        ).stdout

    if re.fullmatch(r"\d{8}", release):
        day = f"{release[:4]}-{release[4:6]}-{release[6:]}"
        ref = git("rev-list", "-1", f"--before={day}T23:59:59", "HEAD").strip()
        what = f"commit {ref} (last before {day})"
    else:
        ref = f"v{release}"
        what = f"tag {ref} (commit {git('rev-list', '-1', ref).strip()})"
    out = {}
    for f in FILES[engine]:
        try:
            out[f] = git("show", f"{ref}:{f}")
        except subprocess.CalledProcessError:
            continue
    return out, f"ROCm/ATOM {what}"


def dir_sources(engine: str, root: Path) -> dict[str, str]:
    return {f: (root / f).read_text() for f in FILES[engine] if (root / f).is_file()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--atom", type=Path, required=True, help="git directory of ROCm/ATOM")
    ap.add_argument("--trtllm", type=Path, help="directory holding tensorrt_llm/commands/serve.py")
    ap.add_argument("--trtllm-source", default="", help="where --trtllm's file came from (repository, commit, version)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/bakeoff-engine-wheels"))
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    a.cache.mkdir(parents=True, exist_ok=True)
    today = datetime.now(UTC).date().isoformat()
    previous = json.loads(a.out.read_text()) if a.out.is_file() else {"engines": {}}
    images = {img: (engine, release_of(engine, img)) for img, engine in shipped_images().items()}
    engines: dict[str, dict[str, Any]] = {}
    wanted = {v for v in images.values() if v[1] is not None}
    # ATOM's dev images name a branch build, not a release: they are held to the newest snapshot here
    head = subprocess.run(
        ["git", "--git-dir", str(a.atom), "log", "-1", "--format=%cd", "--date=format:%Y%m%d", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    wanted.add(("atom", head))
    for engine, release in sorted(wanted):
        if engine == "trtllm":
            continue
        if engine == "atom":
            sources, where = git_sources(engine, a.atom, release)
        else:
            sources, where = wheel_sources(engine, release, a.cache)
        flags = EXTRACT[engine](sources)
        engines.setdefault(engine, {})[release] = {
            "flags": sorted(flags),
            "abbreviations": abbreviates(sources),
            # vLLM's FlexibleArgumentParser reads --a_b as --a-b and --json-arg.key as a key of --json-arg
            "underscores_as_dashes": engine == "vllm",
            "dotted_keys": engine == "vllm",
            "source": f"{where}: {', '.join(sorted(sources))}",
            "read": today,
        }
        print(f"{engine} {release}: {len(flags)} flags", file=sys.stderr)
    if a.trtllm:
        sources = dir_sources("trtllm", a.trtllm)
        engines["trtllm"] = {
            "source-file": {
                "flags": sorted(click_serve_flags(sources)),
                "abbreviations": False,
                "underscores_as_dashes": False,
                "dotted_keys": False,
                "source": a.trtllm_source,
                "read": today,
            }
        }
    elif "trtllm" in previous["engines"]:
        engines["trtllm"] = previous["engines"]["trtllm"]
    newest = {e: max(v, key=_version_key) for e, v in engines.items()}
    held: dict[str, dict[str, str]] = {}
    for img, (engine, release) in sorted(images.items()):
        if engine == "trtllm":
            held[img] = {"engine": engine, "version": "source-file", "basis": "the one source file read (see source)"}
        elif release is None:
            held[img] = {
                "engine": engine,
                "version": newest[engine],
                "basis": "no release in the tag: the newest vendored",
            }
        else:
            held[img] = {"engine": engine, "version": release, "basis": "the release its tag names"}
    doc = {
        "about": "Flags each engine release's own parser accepts, read from its source by "
        "scripts/vendor_engine_flags.py; images: the release each shipped image is held to.",
        "engines": engines,
        "images": held,
    }
    a.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


if __name__ == "__main__":
    raise SystemExit(main())
