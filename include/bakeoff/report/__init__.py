"""Reports of one run: self-contained HTML, Markdown summary, PDF negotiation brief, and CSV /
Parquet of every number. All four render from one ReportData, so they cannot disagree.

Import cost matters (the DAG imports lazily): matplotlib and fpdf2 load only in build_report.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.paths import StorePath, at, safe_name

if TYPE_CHECKING:
    from bakeoff.plan import Plan

log = logging.getLogger(__name__)

__all__ = ["build_report"]


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def build_report(
    plan: Plan, run_dir: str | StorePath, out_dir: str | StorePath, failed_steps: list[str] | tuple[str, ...] = ()
) -> dict[str, str]:
    """Write every report file for the run into out_dir (a local folder or the reports store); returns
    {kind: path}. ``failed_steps``: the run's failed steps as the orchestrator knows them, shown in the report.

    Works on partial runs: a target without results is shown as failed, one that did not pass
    validation appears only in the 'did not pass' section. The files are built in a private local
    folder (the PDF and chart libraries write files), then each is stored whole.
    """
    import pandas as pd  # noqa: PLC0415 - pandas only when a report is built

    from bakeoff import store  # noqa: PLC0415 - pandas (store) only when a report is built
    from bakeoff.report import capacity, csvsafe, gather, html, markdown, pdf, perwatt, provisioning, rackscale  # noqa: PLC0415 - matplotlib and fpdf2 only when a report is built

    t0 = time.perf_counter()
    run_dir, out_dir = at(run_dir), at(out_dir)
    d = gather.gather(plan, run_dir, failed_steps=failed_steps)
    stem = f"bakeoff-{safe_name(plan.name)}-{safe_name(d.run_id)}"
    with tempfile.TemporaryDirectory(prefix="bakeoff-report-") as tmp:
        local = Path(tmp)
        built: dict[str, Path] = {
            "html": _write_text(local / f"{stem}.html", html.render(d)),
            "markdown": _write_text(local / f"{stem}.md", markdown.render(d)),
            "pdf": Path(pdf.render(d, local / f"{stem}-brief.pdf")),
        }
        for kind, frame in (
            ("points", d.tables.points),
            ("cost_at_slo", d.tables.at_slo),
            ("sensitivity", d.tables.sensitivity),
            ("evaluation", d.tables.evaluation),
            ("targets", d.tables.targets),
            # per cloud target: the type that ran, offers tried, refusals, times (none without a cloud target)
            ("provisioning", pd.DataFrame(provisioning.table(d.provisioning)) if d.provisioning else None),
            # per cluster target and workload: rack-scale price, throughput, break-even, energy (none without one)
            ("rack_scale", pd.DataFrame(rackscale.table(d.rack_scale)) if d.rack_scale else None),
            # per target and load level: the twin's prediction and band beside the measurement (none without one)
            ("predicted_vs_measured", pd.DataFrame(d.predicted_vs_measured) if d.twin_checks else None),
            # per target and workload at the SLO: tokens per joule and per kW, cost with energy, their kind
            ("per_watt", pd.DataFrame(perwatt.table(d.per_watt)) if d.per_watt else None),
            # per workload, SLO tier and target: capacity, per GPU / kW / USD-hour, cost there, the search's steps
            ("capacity", pd.DataFrame(capacity.table(d.capacity)) if d.capacity else None),
        ):
            if frame is not None:
                name = f"{stem}-{kind.replace('_', '-')}.csv"
                built[f"csv_{kind}"] = _write_text(local / name, csvsafe.to_csv(frame))
        cost_parquet = store.read_bytes(run_dir / "cost.parquet")
        if cost_parquet is not None:
            built["parquet"] = local / f"{stem}-cost.parquet"
            built["parquet"].write_bytes(cost_parquet)
        paths = {kind: str(store.write_bytes(out_dir / f.name, f.read_bytes())) for kind, f in built.items()}
    log.info("report for %s written to %s in %.2f s", d.run_id, out_dir, time.perf_counter() - t0)
    return paths
