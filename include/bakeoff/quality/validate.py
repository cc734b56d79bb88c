"""Validate a whole run: GX suites per target, traffic compliance, accuracy verdicts, agreement.

Writes ``run_dir/validation.json`` (the readable summary reports and the DAG use) and GX's own
result documents under ``run_dir/validation/<target>/<suite>.json``. Nothing here deletes or
rewrites measured data: a failed target is marked failed, its numbers stay on disk for the
report's "did not pass" section. GX is imported only when a run is validated (it is slow to
import and DAG files must parse fast).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import pandas as pd

from bakeoff.quality import accuracy
from bakeoff.store import StorePath, at, load_points, load_requests, read_json, write_json

if TYPE_CHECKING:
    from bakeoff.plan import Plan
    from bakeoff.plan.target import Target

FILE = "validation.json"
RAW_DIR = "validation"
log = logging.getLogger(__name__)


class ValidationFailed(Exception):
    """At least one target failed validation; the message lists every failure, one per line."""

    def __init__(self, summary: dict[str, Any]):
        self.summary = summary
        bad = {s: t for s, t in summary["targets"].items() if not t["passed"]}
        head = (
            f"validation failed for {len(bad)} of {len(summary['targets'])} target(s) "
            f"(results kept; see {summary.get('summary_file', FILE)}):"
        )
        lines = [head]
        for slug, t in bad.items():
            lines.append(f"  {slug}:")
            lines += [f"    - {f}" for f in t["failures"]]
        super().__init__("\n".join(lines))


def raise_if_failed(summary: dict[str, Any]) -> None:
    """For the DAG, after results are written: fail the task with the readable summary."""
    if not summary["passed"]:
        raise ValidationFailed(summary)


def _rows_for(df: pd.DataFrame, target: Target) -> pd.DataFrame:
    if df.empty or "target" not in df.columns:
        return pd.DataFrame()
    return df[df["target"].isin([target.slug, target.name])].reset_index(drop=True)


def validate_run(plan: Plan, run_dir: str | StorePath) -> dict[str, Any]:
    """Run every suite for every planned target; write validation.json and GX results; return the summary."""
    from bakeoff.quality import gx, suites  # noqa: PLC0415 - GX is slow to import; only validation needs it

    started = time.time()
    run_dir = at(run_dir)
    requests, points = load_requests(run_dir), load_points(run_dir)
    docs = {t.slug: read_json(run_dir / f"target={t.slug}" / accuracy.FILE) for t in plan.targets}
    acc_enabled = plan.quality.accuracy.enabled
    verdicts = accuracy.judge(plan, docs) if acc_enabled else {"reference": None, "targets": {}}
    gx_session = gx.GxSession()

    targets: dict[str, Any] = {}
    for t in plan.targets:
        req, pts = _rows_for(requests, t), _rows_for(points, t)
        entry: dict[str, Any] = {"name": t.name, "suites": {}, "gx_failures": [], "warnings": []}
        entry["pacing"] = pacing(pts)
        for stale in (run_dir / RAW_DIR / t.slug).glob("*.json"):  # from an earlier try of this step
            stale.unlink()
        if req.empty and pts.empty:
            entry["gx_failures"].append(
                "no results: no requests or points were stored for this target "
                "(its deploy or benchmark failed; see its failed tasks)"
            )
        else:
            try:
                checks = suites.checks_for(plan, t, req, pts)
            except suites.MissingColumns as e:
                checks, entry["gx_failures"] = [], [f"unreadable results: {e}"]
            for check in checks:
                raw = gx_session.validate(check)
                rel = f"{RAW_DIR}/{t.slug}/{check.name}.json"  # relative to the run: the store may be object storage
                write_json(run_dir / rel, raw)
                failed = [r for r in raw["results"] if not r["success"]]
                entry["suites"][check.name] = {
                    "passed": raw["success"],
                    "expectations": len(raw["results"]),
                    "failed": len(failed),
                    "rows": len(check.frame),
                    "result_file": rel,
                }
                lines = [gx.describe(check.name, r, check.label) for r in failed]
                warn_only = check.name == suites.PACING and plan.quality.client_bound == "warn"
                entry["warnings" if warn_only else "gx_failures"] += lines
        acc = verdicts["targets"].get(t.slug)
        entry["accuracy"] = acc
        entry["failures"] = entry["gx_failures"] + (acc["failures"] if acc else [])
        entry["passed"] = not entry["failures"]
        targets[t.slug] = entry

    q = plan.quality
    summary = {
        "passed": all(t["passed"] for t in targets.values()),
        "plan": plan.name,
        "validated_at": started,
        "duration_s": round(time.time() - started, 3),
        "thresholds": {
            "max_error_rate": q.max_error_rate,
            "output_len_tolerance": q.output_len_tolerance,
            "min_completed_per_point": q.min_completed_per_point,
            "max_cv": q.max_cv,
            "client_bound": q.client_bound,
            "accuracy": q.accuracy.model_dump(
                mode="json", include={"enabled", "reference", "min_score_ratio", "output_tokens_tolerance", "backend"}
            ),
        },
        "targets": targets,
        # the monitor's verdict over every stored point: the share a reader must discount
        "pacing": _pacing_total(targets),
        "accuracy_reference": verdicts["reference"],
        "agreement": accuracy.agreement(docs),
        "summary_file": FILE,
    }
    write_json(run_dir / FILE, summary)
    pace = summary["pacing"]
    log.info(
        "validation: %s (%d targets, %d of %d points client-bound, quality.client_bound %s, %.1fs)",
        "passed" if summary["passed"] else "FAILED",
        len(targets),
        pace["client_bound"],
        pace["points"],
        q.client_bound,
        summary["duration_s"],
    )
    return summary


def pacing(points: pd.DataFrame) -> dict[str, Any]:
    """How many of a target's stored points the client set the pace for, and their share."""
    n = len(points)
    bound = int(points["client_bound"].astype("boolean").fillna(False).sum()) if n and "client_bound" in points else 0
    return {"points": n, "client_bound": bound, "client_bound_share": round(bound / n, 4) if n else None}


def _pacing_total(targets: dict[str, Any]) -> dict[str, Any]:
    n = sum(t["pacing"]["points"] for t in targets.values())
    bound = sum(t["pacing"]["client_bound"] for t in targets.values())
    return {"points": n, "client_bound": bound, "client_bound_share": round(bound / n, 4) if n else None}


def load_summary(run_dir: str | StorePath) -> dict[str, Any] | None:
    """The stored summary, or None when the run was never validated (reports use this)."""
    summary: dict[str, Any] | None = read_json(at(run_dir) / FILE)  # the JSON validate_run wrote
    return summary
