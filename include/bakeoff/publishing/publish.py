"""Publishing a run's reports: a manifest beside them and an index of runs, in the reports store
(reports_root(): a local folder, or object storage such as ``s3://<conn_id>@bucket/reports``).

Layout:
  <plan>/<run>/<report files> + manifest.json     one folder per run
  <plan>/index.json, <plan>/index.html             every published run of the plan, newest first
  index.html                                        every plan
The index is rebuilt from the manifests each time, so publishing twice, or two runs publishing
one after the other, leaves a correct index. Light imports only: the UI plugin uses this module.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from bakeoff import durable
from bakeoff.core.numbers import as_float
from bakeoff.paths import StorePath, at, fresh, reports_root, safe_name

if TYPE_CHECKING:
    from bakeoff.plan import Plan

ASSET_PREFIX = "bakeoff://reports/"
MANIFEST = "manifest.json"


def asset_uri(plan_name: str) -> str:
    """The Airflow Asset the DAG updates when a plan's reports are published."""
    return f"{ASSET_PREFIX}{safe_name(plan_name)}"


def _atomic_text(path: StorePath, text: str) -> StorePath:
    durable.write_atomic(path, text.encode("utf-8"))
    return path


def _read_json(path: StorePath) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def list_published(root: str | StorePath | None = None, plan_name: str | None = None) -> list[dict[str, Any]]:
    """Every published run (from its manifest), newest first; what the indexes and the UI list."""
    base = fresh(at(root or reports_root()))
    pattern = f"{safe_name(plan_name)}/*/{MANIFEST}" if plan_name else f"*/*/{MANIFEST}"
    runs = []
    for f in base.glob(pattern):
        doc = _read_json(f)
        if isinstance(doc, dict):
            doc["plan_dir"], doc["run_dir"] = f.parent.parent.name, f.parent.name
            runs.append(doc)
    return sorted(runs, key=lambda d: (d.get("started_at") or 0, d.get("published_at") or 0), reverse=True)


FILE_LABELS = {
    "html": "report",
    "pdf": "brief (PDF)",
    "markdown": "Markdown",
    "evidence": "evidence bundle",
    "parquet": "cost table (Parquet)",
}


def file_label(kind: str) -> str:
    """A published file's link text: 'csv_cost_at_slo' -> 'cost at slo (CSV)'."""
    if kind in FILE_LABELS:
        return FILE_LABELS[kind]
    if kind.startswith("csv_"):
        return f"{kind.removeprefix('csv_').replace('_', ' ')} (CSV)"
    return kind.replace("_", " ")


def render_index(
    title: str, runs: list[dict[str, Any]], link_base: str = "", with_plan: bool = True, tabs: tuple[str, ...] = ()
) -> str:
    """HTML list of runs, every published file linked; links are relative: link_base + [plan/] + run/ + file.
    ``tabs``: the dashboard's pages, linked above the list where the page is served beside them (the UI)."""
    from jinja2 import Environment, PackageLoader, select_autoescape  # noqa: PLC0415 - jinja2 only when an index page is rendered

    env = Environment(loader=PackageLoader("bakeoff.report", "templates"), autoescape=select_autoescape(default=True))
    return env.get_template("index.html.j2").render(
        title=title, runs=runs, link_base=link_base, with_plan=with_plan, when=_when, label=file_label, tabs=tabs
    )


def _when(ts: object) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(as_float(ts)))
    except (TypeError, ValueError):
        return ""


def write_indexes(root: str | StorePath, plan_name: str) -> dict[str, StorePath]:
    """Rebuild the plan's index.json / index.html and the top-level index.html from the manifests."""
    root = at(root)
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


def _manifest(plan: Plan, run_dir: StorePath, files: dict[str, str], failed_steps: list[str]) -> dict[str, Any]:
    from bakeoff import store  # noqa: PLC0415 - the results store loads pandas; the UI imports this module
    from bakeoff.report.summary import summarize  # noqa: PLC0415 - so does the cost step's summary

    run = store.run_facts(run_dir)
    head = _read_json(run_dir / "cost.json") or {}
    return {
        "plan": plan.name,
        "run_id": run.run_id,
        "started_at": run.start.started_at,
        # the DAG run's outcome so far, from its task states (publish runs before the run ends)
        "status": "failed" if failed_steps else "success",
        "failed_steps": list(failed_steps),
        "emulated": bool(head.get("emulated", plan.emulated)),
        "summary": head.get("summary", ""),
        "published_at": time.time(),
        "files": files,
        "dashboard": summarize(plan, run_dir),  # what the dashboard pages read, one document per run
    }


def publish(
    plan: Plan,
    run_dir: str | StorePath,
    report_paths: dict[str, str],
    *,
    failed_steps: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """List the run's report files under reports_root()/<plan>/<run>/ (copying any built elsewhere),
    write its manifest and refresh the indexes. ``failed_steps``: this run's failed steps (the DAG
    run's failed tasks), which the manifest and the index show.

    Returns what the DAG needs: the run's report location and files, index paths and the Asset URI.
    """
    run_dir = at(run_dir)
    root = at(reports_root())
    dest = root / safe_name(plan.name) / safe_name(run_dir.name)
    files: dict[str, str] = {}
    for kind, ref in report_paths.items():
        src = at(ref)
        if not src.is_file():
            raise FileNotFoundError(f"publish: report file for {kind!r} is missing: {ref}; rerun the report step")
        target = dest / src.name
        if str(src) != str(target):  # built outside the reports store: stored before the manifest lists it
            durable.write_atomic(target, src.read_bytes())
        files[kind] = src.name
    manifest = _manifest(plan, run_dir, files, list(failed_steps))
    _atomic_text(dest / MANIFEST, json.dumps(manifest, indent=2, default=str))
    indexes = write_indexes(root, plan.name)
    return {
        "plan": plan.name,
        "run_id": manifest["run_id"],
        "asset_uri": asset_uri(plan.name),
        "summary": manifest["summary"],
        "status": manifest["status"],
        "location": str(dest),
        "files": {k: str(dest / v) for k, v in files.items()},
        "index": {k: str(v) for k, v in indexes.items()},
    }
