"""The "Claim check" section as text, one source for HTML, Markdown and the PDF brief.

Every figure bakeoff measured on the emulator carries EMULATED beside it, wherever it is shown.
"""

from __future__ import annotations

from typing import Any

from bakeoff.claims import BasisCheck, ClaimCheck, CostCheck, FigureCheck, Measure, Side
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


def side_text(s: Side, price: bool = False) -> str:
    """'MI355X x8, sglang, mxfp4, 20k in / 1k out' (+ the price's source and date); unstated fields say so."""
    parts = [f"{s.gpu.upper()}" + (f" x{s.gpus}" if s.gpus else " (GPUs not stated)")]
    if not price:
        parts += [s.engine or "engine not stated", s.precision or "precision not stated"]
        parts.append(s.workload or "workload not stated")
    else:
        parts += [f"price from {s.price_source or 'a source not stated'}, {s.price_as_of or 'undated'}"]
    return ", ".join(parts)


def basis_lines(b: BasisCheck) -> dict[str, Any]:
    """The claim's own arithmetic, its sides, the like-for-like recomputation and what the run supports."""
    tp, price = b.basis.throughput, b.basis.price
    assert tp.this.value and tp.other.value
    own = (
        f"The claim's numbers give {b.throughput_ratio:.2f}× throughput against {tp.other.gpu.upper()} "
        f"({fmt(tp.this.value)} vs {fmt(tp.other.value)} {tp.metric.replace('_', ' ')}) and a {b.price_ratio:.2f}× "
        f"price ratio against {price.other.gpu.upper()}: cost per token {b.throughput_ratio:.2f}⁻¹ / "
        f"{b.price_ratio:.2f} = {b.cost_ratio:.2f}× the rival's cost per token."
    )
    if b.mixed:
        own += (
            f" The throughput is compared with {tp.other.gpu.upper()} and the price with "
            f"{price.other.gpu.upper()}: the two halves of the arithmetic are about different GPUs."
        )
    sides = [
        f"throughput, this side: {side_text(tp.this)}",
        f"throughput, other side: {side_text(tp.other)}",
        f"price, this side: {side_text(price.this, price=True)}",
        f"price, other side: {side_text(price.other, price=True)}",
    ]
    like = [
        f"{p.basis} ({p.source}, {p.as_of}{'' if p.dated else ': not used, undated'}): {tp.this.gpu.upper()} "
        f"{p.this_usd:.2f} vs {tp.other.gpu.upper()} {p.other_usd:.2f} USD/GPU-h, price ratio {p.price_ratio:.2f}× "
        f"→ cost ratio {p.cost_ratio:.2f}×"
        for p in b.like_for_like
    ]
    dated = [p.cost_ratio for p in b.like_for_like if p.dated]
    recomputed = (
        f"At like-for-like prices (same cloud and market, dated) the same throughputs give "
        f"{min(dated):.2f}–{max(dated):.2f}× {tp.other.gpu.upper()}'s cost per token, not {b.cost_ratio:.2f}×."
        if dated
        else f"The catalog has no dated like-for-like price pair for {tp.this.gpu.upper()} and {tp.other.gpu.upper()}."
    )
    return {"own": own, "sides": sides, "recomputed": recomputed, "like_for_like": like, "supports": b.supports + "."}


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
        "basis": basis_lines(c.basis) if c.basis else None,
        "published": f"{cl.published.address}, {cl.published.date}" if cl.published else None,
    }
