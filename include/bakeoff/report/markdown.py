"""The Markdown summary for chat and email: headline, ranking, who did not pass, caveats.

Plan-supplied strings are escaped for Markdown (pipes, brackets, HTML) so a name cannot break a
table or inject markup where the Markdown is rendered.
"""

from __future__ import annotations

import re

from bakeoff.plan.capacity import ordered
from bakeoff.report import capacity, claimcheck, perwatt
from bakeoff.report.data import ReportData, fmt
from bakeoff.report.html import STATUS_TEXT
from bakeoff.report.provisioning import refusal_text

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|<>])")


def esc(s: object) -> str:
    return _MD_SPECIAL.sub(r"\\\1", str(s)).replace("\n", " ")


def _band(d: ReportData, target: str) -> str:
    note = d.band_note(target)
    return f" ({note})" if note else ""


def render(d: ReportData) -> str:
    h, plan, basis = d.tables.headline, d.plan, d.basis
    emu = " **EMULATED**" if d.emulated else ""
    out = []
    if d.emulated:
        out.append("> **EMULATED** — every figure below comes from the hardware emulator, not from real GPUs.\n")
    out += [
        f"# Bake-off {esc(plan.name)} — run `{d.run_id}`",
        "",
        f"**{esc(d.summary)}**",
        "",
        *([f"**Different checkpoints.** {esc(d.checkpoint_note)}", ""] if d.checkpoint_note else []),
        f"Cost at the SLO ({esc(plan.slo.in_words())}), USD per million {basis} tokens, utilisation "
        f"{plan.pricing.utilisation:.0%}.",
        "",
    ]
    for wl in d.workloads:
        ranked = d.ranked(wl)
        out.append(f"## {esc(wl)}")
        out += [f"Prompt tokens asked / measured by the server: {esc(d.input_text(wl))}", ""]
        pacing = _client_bound(d, wl)
        if ranked.empty:
            out += ["No target has a cost at the SLO.", "", *pacing]
            continue
        out += [
            f"| # | target | node | USD/M {basis} | 95% CI | USD/M total | load | tok/s/user "
            "| USD/GPU-h | vs cheapest | break-even USD/GPU-h |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for _, r in ranked.iterrows():
            lo, hi = r[f"usd_per_m_{basis}_ci_low"], r[f"usd_per_m_{basis}_ci_high"]
            ci = f"{fmt(lo)}–{fmt(hi)}" if lo == lo and hi == hi else "–"
            vs = "cheapest" if r["vs_cheapest_pct"] == 0 else f"+{r['vs_cheapest_pct']:.1f}%"
            low = (
                f" (lower bound: client-bound at c{fmt(r['client_bound_concurrency'])})" if r.get("lower_bound") else ""
            )
            out.append(
                f"| {fmt(r['rank'])} | {esc(r['name'])}{emu}{_band(d, r['name'])} | {esc(r['node_spec'])} | "
                f"{fmt(r[f'usd_per_m_{basis}'])}{low} | {ci} | "
                f"{fmt(r['usd_per_m_total'])} | c{fmt(r['concurrency'])} | {fmt(r['interactivity'])} | "
                f"{fmt(r['usd_per_gpu_hour'])} | {vs} | {fmt(r['break_even_usd_per_gpu_hour'])} |"
            )
        out.append("")
        out += pacing
        out += _session_costs(d, wl)
    out += _claim_check(d)
    out += _twin_check(d)
    dnp = d.did_not_pass()
    if not dnp.empty:
        out += ["## Did not pass (not ranked)", ""]
        out += [f"- **{esc(r['name'])}** — {STATUS_TEXT[r['status']]}: {esc(r['failures'])}" for _, r in dnp.iterrows()]
        out.append("")
    out += _provisioning(d)
    out += _rack_scale(d)
    out += _per_watt(d)
    out += _capacity(d)
    ev = h.get("evaluation_cost_usd")
    out += [
        f"Measured cost of this evaluation: {fmt(ev)} USD billed"
        f" ({fmt(h.get('evaluation_cost_if_billed_usd'))} USD at list prices for every target).",
        "",
        "## Caveats",
        "",
    ]
    out += [f"- {esc(c)}" for c in d.caveats]
    out += [
        "",
        "How each target was measured: "
        + "; ".join(f"{esc(t.name)}: {esc(d.clients[t.slug])}" for t in plan.targets if t.slug in d.clients),
    ]
    if d.weights:
        out += ["", *(f"- {esc(t.name)}: {esc(d.weights[t.slug])}" for t in plan.targets if t.slug in d.weights)]
    out += [
        "",
        "Prices: "
        + "; ".join(
            f"{esc(r['name'])}: {fmt(r['node_usd_per_hour'])} USD/node-h, {esc(r['price_source'])}"
            for _, r in d.tables.targets.iterrows()
        ),
        "",
    ]
    return "\n".join(out)


def _client_bound(d: ReportData, wl: str) -> list[str]:
    """Targets that met the SLO only client-bound, and every client-bound point, each a paragraph."""
    return [line for text in d.pacing_lines(wl) for line in (f"**{esc(text)}**", "")]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _session_costs(d: ReportData, wl: str) -> list[str]:
    """What an agent session costs at the SLO, for a session workload (nothing otherwise)."""
    rows = d.session_costs(wl)
    if not rows:
        return []
    out = [
        "Agent sessions at the SLO (a session: every turn of it and its subagents answered):",
        "",
        "| target | concurrent sessions | USD per session | USD per 1,000 turns "
        "| prefix-cache hit rate (server / trace) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        emu = " **EMULATED**" if r["emulated"] else ""
        out.append(
            f"| {esc(r['name'])}{emu} | {fmt(r['sessions'])} | {fmt(r['usd_per_session'])} | "
            f"{fmt(r['usd_per_1k_turns'])} | {_pct(r['hit_rate'])} / {_pct(r['hit_rate_expected'])} |"
        )
    return [*out, ""]


def _twin_check(d: ReportData) -> list[str]:
    if not d.twin_checks:
        return []
    refit = any("refit_error_pct" in r for r in d.twin_checks)
    out = [
        "## Predicted vs measured",
        "",
        "| target | workload | concurrency | figures | measured output tok/s per GPU | predicted (band) | error | "
        "in the band |" + (" after the refit: predicted | error after the refit |" if refit else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|---|" if refit else ""),
    ]
    for r in d.twin_checks:
        lo, hi = r["band"]
        after = ""
        if refit:
            after = (
                f" {fmt(r['refit_predicted_tps_per_gpu'])} | {r['refit_error_pct']:+.1f}% |"
                if "refit_error_pct" in r
                else " – | – |"
            )
        out.append(
            f"| {esc(r['target'])} | {esc(r['workload'])} | {r['concurrency']} | {r.get('figures', 'measured')} | "
            f"{fmt(r['measured_tps_per_gpu'])} | "
            f"{fmt(r['predicted_tps_per_gpu'])} ({fmt(lo)}–{fmt(hi)}) | {r['error_pct']:+.1f}% | "
            f"{'yes' if r['in_band'] else 'no'} |{after}"
        )
    if refit:
        out += [
            "",
            "Error before (the shipped twin) and after the refit on this installation's own real runs "
            "(bakeoff twin refit); a run the refit learned from is scored in sample.",
        ]
    return [*out, ""]


def _claim_check(d: ReportData) -> list[str]:
    if not d.claim_checks and not d.claims_error:
        return []
    out = ["## Claim check", ""]
    if d.claims_error:
        out += [esc(d.claims_error), ""]
    for c in d.claim_checks:
        ctx = claimcheck.context(c)
        out += [
            f"**{esc(ctx['header'])}**{' **EMULATED**' if c.emulated else ''}",
            "",
            f"Source: {esc(ctx['source'])}. Checked on workload {esc(ctx['workload'])}.",
            "",
            "| claimed figure | claimed | bakeoff at the claim's configuration | bakeoff at your SLO | verdict | why |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {esc(r['figure'])} ({esc(r['target'])}) | {esc(r['claimed'])} | {esc(r['at_config'])} | "
            f"{esc(r['at_slo'])} | **{esc(r['verdict'])}** | {esc(r['reason'])} |"
            for r in ctx["rows"]
        ]
        out.append("")
        if ctx["published"]:
            out += [f"Published: {esc(ctx['published'])}.", ""]
        if b := ctx["basis"]:
            out += [f"**What the cost claim rests on.** {esc(b['own'])}", ""]
            out += [f"- {esc(line)}" for line in b["sides"]] + ["", esc(b["recomputed"]), ""]
            out += [f"- {esc(line)}" for line in b["like_for_like"]] + [""]
            out += [f"{esc(b['supports'])}{' **EMULATED**' if c.emulated else ''}", ""]
    return out


def _provisioning(d: ReportData) -> list[str]:
    """Per cloud target: what was asked, what refused it, how long to a running node and to serving."""
    if not d.provisioning:
        return []
    out = [
        "## Provisioning",
        "",
        "| target | cloud | instance type | outcome | offers tried | attempts | refusals | to running s "
        "| to serving-ready s | billed h |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d.provisioning:
        billed = fmt(r.billed_hours) + (" (still billing)" if r.still_billing else "")
        out.append(
            f"| {esc(r.name)} | {esc(r.provider)} | {esc(r.instance_type)} | {esc(r.outcome)} | "
            f"{esc('; '.join(r.offers) or '–')} | {fmt(r.attempts)} | {esc(refusal_text(r.refusals))} | "
            f"{fmt(r.to_running_s)} | {fmt(r.to_serving_s)} | {billed} |"
        )
    return [*out, ""]


def _capacity(d: ReportData) -> list[str]:
    """Per workload, SLO tier and target: capacity, per GPU, per kW, per USD/h, cost there (report.capacity)."""
    if not d.capacity:
        return []
    rows = [(capacity.cells(r, fmt), r.emulated) for r in d.capacity]
    tiers = "; ".join(f"{esc(n)}: {esc(d.plan.slo_tiers[n].in_words())}" for n in ordered(list(d.plan.slo_tiers)))
    return _section("Capacity at SLO tiers", capacity.HEAD, rows, 2, f"Tiers: {tiers}.")


def _section(
    title: str, head: tuple[str, ...], rows: list[tuple[list[str], bool]], name_col: int, note: str
) -> list[str]:
    """A section's table, its target column stamped EMULATED where the row is, and a closing line."""
    out = [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cells, emulated in rows:
        c = [esc(x) for x in cells]
        c[name_col] += " **EMULATED**" if emulated else ""
        out.append("| " + " | ".join(c) + " |")
    return [*out, note, ""]


def _per_watt(d: ReportData) -> list[str]:
    """Per target and workload at the SLO: tokens per joule and per kW, cost with energy (report.perwatt)."""
    if not d.per_watt:
        return []
    rows = [(perwatt.cells(r, fmt), r.emulated) for r in d.per_watt]
    return _section(
        "Per watt", perwatt.HEAD, rows, 1, f"Energy priced at {fmt(d.plan.pricing.usd_per_kwh)} USD/kWh (the plan's)."
    )


def _rack_scale(d: ReportData) -> list[str]:
    """Per cluster target: price per GPU- and rack-hour, throughput per GPU and per rack at the SLO,
    break-even against the cheapest 8-GPU node, energy per output token (report.rackscale)."""
    if not d.rack_scale:
        return []
    basis = d.basis
    out = [
        "## Rack scale",
        "",
        f"| workload | target | shape | GPUs billed | USD/GPU-h | USD/rack-h | USD/h target | out tok/s/GPU "
        f"| out tok/s/rack | USD/M {basis} | vs 8-GPU node | break-even USD/GPU-h | J/out token |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d.rack_scale:
        emu = " **EMULATED**" if r.emulated else ""
        vs = f"{esc(r.baseline)} {fmt(r.baseline_usd_per_m)}" if r.baseline else "no 8-GPU node at the SLO"
        energy = f"{fmt(r.joules_per_output_token)} ({esc(r.energy_source)})" if r.energy_source else "–"
        out.append(
            f"| {esc(r.workload)} | {esc(r.name)}{emu} | {esc(r.shape)} | {fmt(r.gpus)} | {fmt(r.usd_per_gpu_hour)} | "
            f"{fmt(r.usd_per_rack_hour)} | {fmt(r.usd_per_target_hour)} | {fmt(r.output_tps_per_gpu)} | "
            f"{fmt(r.output_tps_per_rack)} | {fmt(r.usd_per_m)} | {vs} | {fmt(r.break_even_usd_per_gpu_hour)} | "
            f"{energy} |"
        )
    return [*out, ""]
