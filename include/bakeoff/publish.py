"""Publishing a run's reports: into the local reports folder (with an index of runs) and, when a
boto3 S3 client is given, to S3 under the same layout.

Local layout (reports_root()):
  <plan>/<run>/<report files> + manifest.json     one folder per run
  <plan>/index.json, <plan>/index.html             every published run of the plan, newest first
  index.html                                        every plan
The index is rebuilt from the manifests each time, so publishing twice, or two runs publishing
one after the other, leaves a correct index. Light imports only: the UI plugin uses this module.
"""

from __future__ import annotations

import json
import mimetypes
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bakeoff import durable
from bakeoff.paths import reports_root, safe_name

ASSET_PREFIX = "bakeoff://reports/"
MANIFEST = "manifest.json"


def asset_uri(plan_name: str) -> str:
    """The Airflow Asset the DAG updates when a plan's reports are published."""
    return f"{ASSET_PREFIX}{safe_name(plan_name)}"


def _atomic_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        durable.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def list_published(root: Path | None = None, plan_name: str | None = None) -> list[dict[str, Any]]:
    """Every published run (from its manifest), newest first; what the indexes and the UI list."""
    base = Path(root or reports_root())
    pattern = f"{safe_name(plan_name)}/*/{MANIFEST}" if plan_name else f"*/*/{MANIFEST}"
    runs = []
    for f in base.glob(pattern):
        doc = _read_json(f)
        if isinstance(doc, dict):
            doc["plan_dir"], doc["run_dir"] = f.parent.parent.name, f.parent.name
            runs.append(doc)
    return sorted(runs, key=lambda d: (d.get("started_at") or 0, d.get("published_at") or 0), reverse=True)


def render_index(title: str, runs: list[dict[str, Any]], link_base: str = "", with_plan: bool = True) -> str:
    """HTML list of runs; links are relative: link_base + [plan/] + run/ + file."""
    from jinja2 import Environment, PackageLoader, select_autoescape  # noqa: PLC0415

    env = Environment(loader=PackageLoader("bakeoff.report", "templates"), autoescape=select_autoescape(default=True))
    return env.get_template("index.html.j2").render(
        title=title, runs=runs, link_base=link_base, with_plan=with_plan, when=_when
    )


def _when(ts: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(ts)))
    except (TypeError, ValueError):
        return ""


def write_indexes(root: Path, plan_name: str) -> dict[str, Path]:
    """Rebuild the plan's index.json / index.html and the top-level index.html from the manifests."""
    plan_dir = root / safe_name(plan_name)
    runs = list_published(root, plan_name)
    out = {
        "index_json": _atomic_text(plan_dir / "index.json", json.dumps(runs, indent=2, default=str)),
        "index_html": _atomic_text(
            plan_dir / "index.html", render_index(f"bakeoff reports: {plan_name}", runs, with_plan=False)
        ),
    }
    out["root_index_html"] = _atomic_text(root / "index.html", render_index("bakeoff reports", list_published(root)))
    return out


def _manifest(plan, run_dir: Path, files: dict[str, str]) -> dict[str, Any]:
    run = _read_json(run_dir / "run.json") or {}
    head = _read_json(run_dir / "cost.json") or {}
    # publishing runs before the run is marked finished: a run still "running" here is being published
    status = run.get("status") if run.get("status") not in (None, "running") else "published"
    return {
        "plan": plan.name,
        "run_id": run.get("run_id") or run_dir.name,
        "started_at": run.get("started_at"),
        "status": status,
        "emulated": bool(head.get("emulated", plan.emulated)),
        "summary": head.get("summary", ""),
        "published_at": time.time(),
        "files": files,
    }


def _upload(s3_client, bucket: str, key: str, path: Path) -> str:
    ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if path.suffix in (".md", ".csv", ".html", ".json"):
        ctype += "; charset=utf-8"
    s3_client.upload_file(str(path), bucket, key, ExtraArgs={"ContentType": ctype})
    return f"s3://{bucket}/{key}"


def publish(
    plan,
    run_dir: Path,
    report_paths: dict[str, str],
    *,
    s3_client=None,
    bucket: str | None = None,
    prefix: str | None = None,
) -> dict[str, Any]:
    """Copy the report files to reports_root()/<plan>/<run>/, refresh the indexes, upload to S3.

    Returns what the DAG needs: local folder and files, index paths, S3 URIs and the Asset URI.
    """
    if s3_client is not None and not bucket:
        raise ValueError(
            "publish: an S3 client was given without a bucket; set the plan's or the Variable's "
            "report bucket, or pass s3_client=None for local publishing only"
        )
    run_dir = Path(run_dir)
    root = reports_root()
    dest = root / safe_name(plan.name) / safe_name(run_dir.name)
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    for kind, src in report_paths.items():
        src = Path(src)
        if not src.is_file():
            raise FileNotFoundError(f"publish: report file for {kind!r} is missing: {src}; rerun the report step")
        target = dest / src.name
        if src.resolve() != target.resolve():
            shutil.copyfile(src, target)
            durable.fsync_path(target)  # on disk before the manifest that lists it
        files[kind] = src.name
    manifest = _manifest(plan, run_dir, files)
    _atomic_text(dest / MANIFEST, json.dumps(manifest, indent=2, default=str))
    indexes = write_indexes(root, plan.name)
    result: dict[str, Any] = {
        "plan": plan.name,
        "run_id": manifest["run_id"],
        "asset_uri": asset_uri(plan.name),
        "summary": manifest["summary"],
        "local_dir": str(dest),
        "files": {k: str(dest / v) for k, v in files.items()},
        "index": {k: str(v) for k, v in indexes.items()},
        "s3": {},
    }
    if s3_client is not None:
        base = "/".join(p for p in ((prefix or "").strip("/"), safe_name(plan.name), dest.name) if p)
        for kind, name in {**files, "manifest": MANIFEST}.items():
            result["s3"][kind] = _upload(s3_client, bucket, f"{base}/{name}", dest / name)
        plan_base = base.rsplit("/", 1)[0]
        for kind in ("index_json", "index_html"):
            result["s3"][kind] = _upload(s3_client, bucket, f"{plan_base}/{indexes[kind].name}", indexes[kind])
    return result
