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
from pathlib import Path
from typing import Any

import pandas as pd

from bakeoff.quality import accuracy
from bakeoff.store import load_points, load_requests, read_json, write_json

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


class _Gx:
    """One ephemeral GX context for the whole run, quiet: no progress bars, no analytics."""

    def __init__(self) -> None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
            ProgressBarsConfig,
        )

        for name in ("great_expectations", "great_expectations.core", "posthog"):
            logging.getLogger(name).setLevel(logging.ERROR)
        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            analytics_enabled=False,
            progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        )
        self.context = gx.get_context(mode="ephemeral", project_config=config)
        self.source = self.context.data_sources.add_pandas("bakeoff")
        self.batch_defs: dict[str, Any] = {}

    def validate(self, frame_name: str, frame: pd.DataFrame, suite, label: str) -> dict[str, Any]:
        bd = self.batch_defs.get(frame_name)
        if bd is None:
            asset = self.source.add_dataframe_asset(frame_name)
            bd = self.batch_defs[frame_name] = asset.add_batch_definition_whole_dataframe("whole")
        batch = bd.get_batch(batch_parameters={"dataframe": frame})
        fmt = {"result_format": "SUMMARY", "unexpected_index_column_names": [label], "partial_unexpected_count": 5}
        return batch.validate(suite, result_format=fmt).to_json_dict()


def _row(row: dict[str, Any], label: str) -> str:
    """'point=w c=1 r=0: tpot_ms_p99=13.6, tpot_ms_p90=18.6' - the row's label first."""
    values = ", ".join(f"{k}={_fmt(v)}" for k, v in row.items() if k != label)
    return f"{label}={row.get(label)}: {values}" if label in row else values


def _describe(suite_name: str, result: dict[str, Any], label: str) -> str:
    """'[suite] why: expectation(column=..): observed' for one failed expectation."""
    cfg = result["expectation_config"]
    kw = cfg["kwargs"]
    cols = ", ".join(f"{k}={kw[k]}" for k in ("column", "column_A", "column_B") if k in kw)
    why = (cfg.get("meta") or {}).get("why", "")
    res = result.get("result") or {}
    exc = result.get("exception_info") or {}
    if exc.get("raised_exception"):
        observed = f"could not be evaluated: {(exc.get('exception_message') or '').splitlines()[0][:200]}"
    elif "unexpected_count" in res:
        rows = res.get("partial_unexpected_index_list") or []
        observed = f"{res['unexpected_count']} of {res.get('element_count')} rows unexpected"
        if rows:
            observed += "; e.g. " + "; ".join(_row(r, label) for r in rows[:3])
    else:
        observed = f"observed {res.get('observed_value')!r}"
    return f"[{suite_name}] {why}: {cfg['type']}({cols}): {observed}"


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _rows_for(df: pd.DataFrame, target) -> pd.DataFrame:
    if df.empty or "target" not in df.columns:
        return pd.DataFrame()
    return df[df["target"].isin([target.slug, target.name])].reset_index(drop=True)


def validate_run(plan, run_dir: Path) -> dict[str, Any]:
    """Run every suite for every planned target; write validation.json and GX results; return the summary."""
    from bakeoff.quality import suites

    started = time.time()
    run_dir = Path(run_dir)
    requests, points = load_requests(run_dir), load_points(run_dir)
    docs = {t.slug: read_json(run_dir / f"target={t.slug}" / accuracy.FILE) for t in plan.targets}
    acc_enabled = plan.quality.accuracy.enabled
    verdicts = accuracy.judge(plan, docs) if acc_enabled else {"reference": None, "targets": {}}
    gx_session = _Gx()

    targets: dict[str, Any] = {}
    for t in plan.targets:
        req, pts = _rows_for(requests, t), _rows_for(points, t)
        entry: dict[str, Any] = {"name": t.name, "suites": {}, "gx_failures": []}
        for stale in (run_dir / RAW_DIR / t.slug).glob("*.json"):  # from an earlier try of this step
            stale.unlink()
        if req.empty and pts.empty:
            entry["gx_failures"].append(
                "no results: no requests or points were stored for this target "
                "(its deploy or benchmark failed; see run.json)"
            )
        else:
            try:
                checks = suites.checks_for(plan, t, req, pts)
            except suites.MissingColumns as e:
                checks, entry["gx_failures"] = [], [f"unreadable results: {e}"]
            for check in checks:
                raw = gx_session.validate(check.name, check.frame, check.suite, check.label)
                path = write_json(run_dir / RAW_DIR / t.slug / f"{check.name}.json", raw)
                failed = [r for r in raw["results"] if not r["success"]]
                entry["suites"][check.name] = {
                    "passed": raw["success"],
                    "expectations": len(raw["results"]),
                    "failed": len(failed),
                    "rows": len(check.frame),
                    "result_file": str(path.relative_to(run_dir)),
                }
                entry["gx_failures"] += [_describe(check.name, r, check.label) for r in failed]
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
            "accuracy": q.accuracy.model_dump(
                mode="json", include={"enabled", "reference", "min_score_ratio", "output_tokens_tolerance", "backend"}
            ),
        },
        "targets": targets,
        "accuracy_reference": verdicts["reference"],
        "agreement": accuracy.agreement(docs),
        "summary_file": FILE,
    }
    write_json(run_dir / FILE, summary)
    log.info(
        "validation: %s (%d targets, %.1fs)",
        "passed" if summary["passed"] else "FAILED",
        len(targets),
        summary["duration_s"],
    )
    return summary


def load_summary(run_dir: Path) -> dict[str, Any] | None:
    """The stored summary, or None when the run was never validated (reports use this)."""
    return read_json(Path(run_dir) / FILE)
