"""The "Claim check" section as text, one source for HTML, Markdown and the PDF brief.

Every figure bakeoff measured on the emulator carries EMULATED beside it, wherever it is shown.
"""

from __future__ import annotations

from typing import Any

from bakeoff.claims import ClaimCheck, CostCheck, FigureCheck, Measure
from bakeoff.report.data import fmt


def measure_text(m: Measure | None, emulated: bool, unit: str = "") -> str:
    """'2,512 (95% CI 2,430–2,590; 2.4 req/s, 3 repeats)' or a dash."""
    if m is None:
        return "–"
    ci = f"95% CI {fmt(m.low)}–{fmt(m.high)}; " if m.has_interval else "no CI; "
    stamp = " EMULATED" if emulated else ""
    return f"{fmt(m.value)}{unit}{stamp} ({ci}{m.load}, {m.repeats} repeat{'s' if m.repeats != 1 else ''})"


def claimed_text(value: float, tolerance: float, unit: str = "") -> str:
    about = f" (±{tolerance:.0%})" if tolerance else ""
    return f"{fmt(value)}{unit}{about}"


def fields_text(f: FigureCheck) -> str:
    """'same: model, precision, …; differs: input_len (claimed 20,000, run 2,000); not stated: …'."""
    same = [x.field for x in f.fields if x.same]
    parts = []
    if same:
        parts.append("same: " + ", ".join(same))
    if f.differs:
        parts.append("differs: " + ", ".join(f"{x.field} (claimed {x.claimed}, run {x.run})" for x in f.differs))
    if f.unstated:
        parts.append("not stated by the claim: " + ", ".join(f.unstated))
    return "; ".join(parts) or "–"


def figure_row(c: ClaimCheck, f: FigureCheck) -> dict[str, str]:
    return {
        "figure": f"{f.label}: {f.metric}",
        "target": f.target or "–",
        "claimed": claimed_text(f.claimed, f.tolerance),
        "at_config": measure_text(f.at_config, c.emulated)
        if f.at_config
        else ("– (configuration differs)" if f.differs else "–"),
        "at_slo": measure_text(f.at_slo, c.emulated) if f.at_slo else "– (no load met the SLO)",
        "verdict": f.verdict,
        "reason": f.reason,
        "fields": fields_text(f),
    }


def cost_row(c: ClaimCheck, k: CostCheck) -> dict[str, str]:
    pair = f"{k.target} / {k.rival}" if k.target and k.rival else "–"
    return {
        "figure": f"cost ratio {pair} at the SLO",
        "target": pair,
        "claimed": claimed_text(k.claimed, k.tolerance, "×"),
        "at_config": "– (cost is compared at the SLO)",
        "at_slo": measure_text(k.ratio, c.emulated, "×"),
        "verdict": k.verdict,
        "reason": k.reason,
        "fields": k.text,
    }


def rows(c: ClaimCheck) -> list[dict[str, str]]:
    """One row per claimed figure: the claim's own, its throughput comparisons, its cost ratios."""
    return [figure_row(c, f) for f in c.figures] + [cost_row(c, k) for k in c.costs]


def reasons(table: list[dict[str, str]]) -> list[str]:
    """'Not comparable (figure A; figure B): why': rows with the same verdict and reason said once (the brief)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in table:
        grouped.setdefault((r["verdict"], r["reason"]), []).append(r["figure"])
    return [f"{v.capitalize()} ({'; '.join(figs)}): {why}" for (v, why), figs in grouped.items()]


def header(c: ClaimCheck) -> str:
    """'wafer.ai, undated; recorded 2026-11: "GLM-5.2 on MI355X: …"'."""
    return f'{c.claim.who}, {c.claim.when}: "{c.claim.claim}"'


def summary(c: ClaimCheck) -> str:
    """One sentence for the brief: each figure's verdict."""
    parts = [f"{r['figure']}: {r['verdict']}" for r in rows(c)]
    stamp = " (EMULATED run)" if c.emulated else ""
    return "; ".join(parts) + stamp


def context(c: ClaimCheck) -> dict[str, Any]:
    """What every format shows about one claim."""
    cl = c.claim
    return {
        "id": cl.id,
        "header": header(c),
        "source": cl.source,
        "reading": cl.figure.reading,
        "also": "; ".join(f"{k} {fmt(v) if isinstance(v, (int, float)) else v}" for k, v in cl.also_reported.items()),
        "workload": c.workload or "–",
        "emulated": c.emulated,
        "rows": rows(c),
    }
