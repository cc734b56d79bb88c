"""Reports of one run: self-contained HTML, Markdown summary, PDF negotiation brief, and CSV /
Parquet of every number. All four render from one ReportData, so they cannot disagree.

Import cost matters (the DAG imports lazily): matplotlib and fpdf2 load only in build_report.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from bakeoff.paths import safe_name

log = logging.getLogger(__name__)

__all__ = ["build_report"]


def _write_text(path: Path, text: str) -> str:
    from bakeoff.store import _atomic_write  # noqa: PLC0415

    def w(tmp):
        Path(tmp).write_text(text, encoding="utf-8")

    _atomic_write(path, w)
    return str(path)


def build_report(plan, run_dir: Path, out_dir: Path) -> dict[str, str]:
    """Write every report file for the run into out_dir; returns {kind: path}.

    Works on partial runs: a target without results is shown as failed, one that did not pass
    validation appears only in the 'did not pass' section.
    """
    from bakeoff.report import csvsafe, data, html, markdown, pdf  # noqa: PLC0415

    t0 = time.perf_counter()
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    d = data.gather(plan, run_dir)
    stem = f"bakeoff-{safe_name(plan.name)}-{safe_name(d.run_id)}"
    paths: dict[str, str] = {}
    paths["html"] = _write_text(out_dir / f"{stem}.html", html.render(d))
    paths["markdown"] = _write_text(out_dir / f"{stem}.md", markdown.render(d))
    paths["pdf"] = str(pdf.render(d, out_dir / f"{stem}-brief.pdf"))
    for kind, frame in (
        ("points", d.tables.points),
        ("cost_at_slo", d.tables.at_slo),
        ("sensitivity", d.tables.sensitivity),
        ("evaluation", d.tables.evaluation),
        ("targets", d.tables.targets),
    ):
        paths[f"csv_{kind}"] = _write_text(out_dir / f"{stem}-{kind.replace('_', '-')}.csv", csvsafe.to_csv(frame))
    src = run_dir / "cost.parquet"
    if src.exists():
        shutil.copyfile(src, out_dir / f"{stem}-cost.parquet")
        paths["parquet"] = str(out_dir / f"{stem}-cost.parquet")
    log.info("report for %s written to %s in %.2f s", d.run_id, out_dir, time.perf_counter() - t0)
    return paths
