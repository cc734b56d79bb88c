"""The self-contained HTML report: one file, inline CSS and SVG, no scripts, no network.

Every plan-supplied string goes through jinja2's autoescape; only the chart SVG (made here by
matplotlib, text drawn as paths, comments stripped) is marked safe.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from bakeoff import catalog, cost
from bakeoff.core.numbers import as_float
from bakeoff.plan.checkpoints import checkpoint_of
from bakeoff.report import capacity, charts, claimcheck, labels, perwatt
from bakeoff.report.data import ReportData, fmt
from bakeoff.report.provisioning import refusal_text

STATUS_TEXT = {
    "passed": "passed",
    "not_validated": "not validated",
    "quarantined": "did not pass validation",
    "no_results": "failed: no results",
}


def _accuracy(d: ReportData) -> dict[str, str]:
    """Per target the accuracy verdict in words, with the score its model's floor requires."""
    floors = (d.validation or {}).get("accuracy_floors") or {}
    out = {}
    for slug, doc in d.accuracy.items():
        text = labels.accuracy_sentence(doc)
        if slug in floors:
            text += f"; floor = {float(floors[slug]['need']):.2f}"
        out[slug] = text
    return out


_env = Environment(
    loader=PackageLoader("bakeoff.report", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
)


def _started(ts: object) -> str:
    try:
        return datetime.fromtimestamp(as_float(ts), UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (TypeError, ValueError):
        return "unknown"


def _safe_svg(svg: str) -> Markup:
    return Markup(re.sub(r"<!--.*?-->", "", svg, flags=re.S))


def _ci(row: pd.Series, col: str) -> str:
    lo, hi = row.get(f"{col}_ci_low"), row.get(f"{col}_ci_high")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "– (1 repeat)"
    return f"{fmt(lo)} – {fmt(hi)}"


def _pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return "cheapest" if abs(x) < 1e-9 else f"+{x:.1f}%"


def sensitivity_grid(d: ReportData, workload: str) -> dict[str, dict[str, list[float]]] | None:
    """{'price': {name: [cost per factor]}, 'utilisation': {...}} for ranked targets only."""
    s = d.tables.sensitivity
    if s.empty:
        return None
    s = s[(s["workload"] == workload) & s["ranked"]]
    if s.empty:
        return None
    col = f"usd_per_m_{d.basis}"
    out: dict[str, dict[str, list[float]]] = {"price": {}, "utilisation": {}}
    for (dim, name), g in s.groupby(["dimension", "name"], sort=False):
        out[dim][name] = g.sort_values("factor")[col].tolist()
    return out


def _share(x: object) -> str:
    """A fraction as a percentage; a dash when the server or the trace gave none."""
    v = as_float(x)
    return f"{v * 100:.1f}%" if math.isfinite(v) else "–"


def chart_set(d: ReportData, workload: str) -> dict[str, Markup]:
    out = {
        "throughput": _safe_svg(charts.to_svg(charts.throughput_vs_interactivity(d, workload))),
        "cost": _safe_svg(charts.to_svg(charts.cost_vs_interactivity(d, workload))),
        "at_slo": _safe_svg(charts.to_svg(charts.cost_at_slo(d, workload))),
        "latency": _safe_svg(charts.to_svg(charts.latency_distributions(d, workload))),
    }
    for key, fig in (
        ("ttft_context", charts.ttft_vs_context(d, workload)),
        ("hit_rate", charts.hit_rate_vs_sessions(d, workload)),
    ):
        if fig is not None:
            out[key] = _safe_svg(charts.to_svg(fig))
    return out


def _cell(v: object) -> str:
    """A support-matrix value as text: lists joined, missing as empty, booleans as yes/no."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return "; ".join(_cell(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_cell(x)}" for k, x in v.items())
    return fmt(v) if isinstance(v, float) else str(v)


def _support_columns(rows: list[dict[str, Any]] | None) -> list[str]:
    cols: list[str] = []
    for r in rows or []:
        cols += [c for c in r if c not in cols]
    return cols


def render(d: ReportData) -> str:
    tgt = d.tables.targets
    trow = {r["target"]: r.to_dict() for _, r in tgt.iterrows()}
    trends = [charts.trend(d, wl) for wl in d.workloads]
    tco = catalog.tco()
    return _env.get_template("report.html.j2").render(
        d=d,
        plan=d.plan,
        h=d.tables.headline,
        started=_started(d.run.start.started_at),
        f=fmt,
        ci=_ci,
        pct=_pct,
        share=_share,
        trow=trow,
        names={t.slug: t.name for t in d.plan.targets},
        status_text=STATUS_TEXT,
        slo_text=d.plan.slo.in_words(),
        charts={wl: chart_set(d, wl) for wl in d.workloads},
        sens={wl: sensitivity_grid(d, wl) for wl in d.workloads},
        price_factors=cost.PRICE_FACTORS,
        utilisations=cost.UTILISATIONS,
        tco=tco,
        tco_tiers=tco["tiers"],
        support=d.support,
        support_cols=_support_columns(d.support),
        cell=_cell,
        gpus=sorted({t.gpu.name: t.gpu for t in d.plan.targets}.values(), key=lambda g: g.name),
        accuracy=_accuracy(d),
        label=labels.label,
        pv=labels.provenance_value,
        trend_svgs=[_safe_svg(charts.to_svg(f)) for f in trends if f is not None],
        claims=[claimcheck.context(c) for c in d.claim_checks],
        checkpoint=checkpoint_of,
        refusal_text=refusal_text,
        watt_head=perwatt.HEAD,
        watt_cells=lambda r: perwatt.cells(r, fmt),
        capacity_head=capacity.HEAD,
        capacity_cells=lambda r: capacity.cells(r, fmt),
    )
