"""Bundle the parts of DigitalOcean's and Vultr's published OpenAPI definitions that bakeoff calls.

    python scripts/vendor_cloud_specs.py --digitalocean PATH --vultr PATH

PATH is a checkout (work tree) or a bare git directory of ``digitalocean/openapi`` and of
``vultr/vultr-python-client``. Writes ``include/bakeoff_sandbox/specs/<cloud>.json``: the operations
listed in ``OPERATIONS`` with every ``$ref`` inlined (one self-contained JSON the sandbox fakes
validate against), code samples and examples dropped, plus ``<cloud>.SOURCE`` (repository, commit,
commit date, licence) and the licence text. ``ERRATA`` lists the few places where a definition
contradicts itself; each correction names the evidence.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import re
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml


class _Yaml11Safe(yaml.SafeLoader):
    """YAML as OpenAPI authors mean it: only true/false are booleans (PyYAML's YAML 1.1 reads the
    droplet status enum value ``off`` as False)."""


_Yaml11Safe.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml11Safe.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

OUT = Path(__file__).resolve().parents[1] / "include" / "bakeoff_sandbox" / "specs"
DROP = {"x-codeSamples", "example", "examples", "x-examples"}

SOURCES = {
    "digitalocean": {
        "repository": "https://github.com/digitalocean/openapi",
        "root": "specification/DigitalOcean-public.v2.yaml",
        "licence": ("LICENSE", "Apache-2.0"),
    },
    "vultr": {
        "repository": "https://github.com/vultr/vultr-python-client",
        "root": "openapi-client/swagger.json",
        "licence": ("LICENSE.md", "Apache-2.0"),
    },
}
# path -> methods bakeoff (provider, sweep, reaper, pre-flight) calls
OPERATIONS = {
    "digitalocean": {
        "/v2/account": ["get"],
        "/v2/droplets": ["get", "post"],
        "/v2/droplets/{droplet_id}": ["get", "delete"],
        "/v2/firewalls": ["get", "post"],
        "/v2/firewalls/{firewall_id}": ["get", "delete"],
        "/v2/tags": ["post"],
        "/v2/tags/{tag_id}": ["get"],
        "/v2/sizes": ["get"],
        "/v2/regions": ["get"],
        "/v2/images/{image_id}": ["get"],
        "/v2/account/keys/{ssh_key_identifier}": ["get"],
    },
    "vultr": {
        "/account": ["get"],
        "/bare-metals": ["get", "post"],
        "/bare-metals/{baremetal-id}": ["get", "delete"],
        "/plans-metal": ["get"],
        "/regions": ["get"],
        "/os": ["get"],
        "/ssh-keys/{ssh-key-id}": ["get"],
    },
}


def _vultr_create_key(spec: dict[str, Any]) -> str:
    """The create answer's schema names its key ``baremetal``; the same operation's example, the GET
    answer and govultr's ``bareMetalServerBase`` all say ``bare_metal``."""
    schema = spec["paths"]["/bare-metals"]["post"]["responses"]["202"]["content"]["application/json"]["schema"]
    schema["properties"] = {"bare_metal": schema["properties"].pop("baremetal")}
    return "POST /bare-metals 202: answer key baremetal -> bare_metal (its own example, GET, govultr)"


def _vultr_plans_metal_key(spec: dict[str, Any]) -> str:
    """The bare-metal plans listing's schema names its key ``plans``; the same operation's example and
    govultr's ``bareMetalPlansBase`` (``json:"plans_metal"``) say ``plans_metal``, which the pre-flight reads."""
    schema = spec["paths"]["/plans-metal"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    schema["properties"] = {("plans_metal" if k == "plans" else k): v for k, v in schema["properties"].items()}
    return "GET /plans-metal 200: answer key plans -> plans_metal (its own example, govultr)"


def _vultr_plans_metal_disk(spec: dict[str, Any]) -> str:
    """A bare-metal plan's ``disk`` is a string in the schema; govultr's ``BareMetalPlan`` reads it as
    ``Disk int`` (GB per disk), as the operation's own example gives it (240)."""
    schema = spec["paths"]["/plans-metal"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    schema["properties"]["plans_metal"]["items"]["properties"]["disk"]["type"] = "integer"
    return "GET /plans-metal 200: plans_metal[].disk string -> integer (its own example, govultr)"


ERRATA: dict[str, list[Callable[[dict[str, Any]], str]]] = {
    "digitalocean": [],
    "vultr": [_vultr_create_key, _vultr_plans_metal_key, _vultr_plans_metal_disk],
}


class Source:
    """Files of a checkout or of a bare git directory, at its HEAD."""

    def __init__(self, path: Path):
        self.path = path
        self.bare = not (path / ".git").exists() and (path / "HEAD").is_file()
        self._cache: dict[str, Any] = {}

    def git(self, *args: str) -> str:
        flag = ["--git-dir", str(self.path)] if self.bare else ["-C", str(self.path)]
        return subprocess.run(["git", *flag, *args], check=True, capture_output=True, text=True).stdout

    def text(self, name: str) -> str:
        return self.git("show", f"HEAD:{name}") if self.bare else (self.path / name).read_text()

    def load(self, name: str) -> Any:
        if name not in self._cache:
            text = self.text(name)
            self._cache[name] = json.loads(text) if name.endswith(".json") else yaml.load(text, Loader=_Yaml11Safe)
        return self._cache[name]


def _pointer(doc: Any, fragment: str) -> Any:
    for part in [p for p in fragment.lstrip("/").split("/") if p]:
        doc = doc[part.replace("~1", "/").replace("~0", "~")]
    return doc


def inline(src: Source, node: Any, here: str, stack: tuple[str, ...] = ()) -> Any:
    """``node`` (found in file ``here``) with every $ref replaced by what it names; a reference back
    into itself becomes an open schema (``{}``), as none of the kept operations needs the recursion."""
    if isinstance(node, list):
        return [inline(src, v, here, stack) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref_file, _, fragment = str(node["$ref"]).partition("#")
        target = posixpath.normpath(posixpath.join(posixpath.dirname(here), ref_file)) if ref_file else here
        key = f"{target}#{fragment}"
        if key in stack:
            return {}
        resolved = inline(src, _pointer(src.load(target), fragment), target, (*stack, key))
        siblings = {k: v for k, v in node.items() if k != "$ref" and k not in DROP}
        return {**resolved, **inline(src, siblings, here, stack)} if isinstance(resolved, dict) else resolved
    return {k: inline(src, v, here, stack) for k, v in node.items() if k not in DROP}


def bundle(cloud: str, src: Source) -> tuple[dict[str, Any], list[str]]:
    root = SOURCES[cloud]["root"]
    full = src.load(root)
    paths: dict[str, Any] = {}
    for path, methods in OPERATIONS[cloud].items():
        item = full["paths"][path]
        kept = {m: item[m] for m in methods}
        if "parameters" in item:
            kept["parameters"] = item["parameters"]
        paths[path] = inline(src, kept, root)
    spec = {
        "openapi": full["openapi"],
        "info": {k: full["info"][k] for k in ("title", "version") if k in full["info"]},
        "servers": full.get("servers", []),
        "paths": paths,
    }
    return spec, [fix(spec) for fix in ERRATA[cloud]]


def write(cloud: str, src: Source, out: Path = OUT) -> Path:
    spec, errata = bundle(cloud, src)
    commit = src.git("rev-parse", "HEAD").strip()
    date = src.git("log", "-1", "--format=%cI", "HEAD").strip()
    lic_file, lic_name = SOURCES[cloud]["licence"]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{cloud}.json").write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")
    (out / f"{cloud}.LICENSE").write_text(src.text(lic_file))
    lines = [
        f"repository: {SOURCES[cloud]['repository']}",
        f"file: {SOURCES[cloud]['root']} (and the files it references)",
        f"commit: {commit}",
        f"commit date: {date}",
        f"licence: {lic_name} ({lic_file} of the repository, copied as {cloud}.LICENSE)",
        f"bundled: {datetime.now(UTC).date().isoformat()} by scripts/vendor_cloud_specs.py (make cloud-specs)",
        "kept: " + "; ".join(f"{' '.join(m.upper() for m in ms)} {p}" for p, ms in OPERATIONS[cloud].items()),
        "changed: $refs inlined; code samples and examples dropped",
        *(f"erratum: {e}" for e in errata),
    ]
    (out / f"{cloud}.SOURCE").write_text("\n".join(lines) + "\n")
    return out / f"{cloud}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--digitalocean", type=Path, help="checkout or git dir of digitalocean/openapi")
    ap.add_argument("--vultr", type=Path, help="checkout or git dir of vultr/vultr-python-client")
    args = ap.parse_args(argv)
    if not (args.digitalocean or args.vultr):
        ap.error("name at least one checkout: --digitalocean PATH and/or --vultr PATH")
    for cloud in ("digitalocean", "vultr"):
        path = getattr(args, cloud)
        if path:
            print(f"wrote {write(cloud, Source(path))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
