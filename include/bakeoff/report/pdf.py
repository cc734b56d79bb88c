"""The negotiation brief: one to two A4 pages a procurement team takes to the table.

Which target is cheapest at the buyer's SLO and by how much, the break-even prices, the sensitivity
table, what was measured and how, and the caveats. Emulated figures are stamped EMULATED in the
header of every page. Text is set in DejaVu Sans (shipped with matplotlib), so any Unicode name in
a plan prints.
"""

from __future__ import annotations

import io
import logging
import math
from pathlib import Path

import matplotlib
from fpdf import FPDF, FontFace, XPos, YPos

from bakeoff import cost
from bakeoff.plan.workload import Sessions, Workload
from bakeoff.report import capacity, charts, claimcheck
from bakeoff.report.data import ReportData, fmt
from bakeoff.report.html import STATUS_TEXT
from bakeoff.report.provisioning import refusal_text

FONT_DIR = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
RED = (192, 0, 0)
log = logging.getLogger(__name__)
# fpdf's font subsetting logs every table it keeps at INFO (~75 lines a brief, in the CLI's output and the
# report task's log alike): none of it is the run's news.
logging.getLogger("fontTools").setLevel(logging.WARNING)
MAX_PAGES = 2


class Brief(FPDF):
    def __init__(self, d: ReportData):
        super().__init__(orientation="P", unit="mm", format="A4")
        self.d = d
        self.add_font("dejavu", "", FONT_DIR / "DejaVuSans.ttf")
        self.add_font("dejavu", "B", FONT_DIR / "DejaVuSans-Bold.ttf")
        self.set_margins(14, 12, 14)
        self.set_auto_page_break(True, margin=14)
        self.set_title(f"bakeoff negotiation brief {d.plan.name}")
        self.set_creator("bakeoff")

    def header(self) -> None:
        if self.d.emulated:
            self.set_fill_color(*RED)
            self.set_text_color(255, 255, 255)
            self.set_font("dejavu", "B", 10)
            self.cell(
                0,
                7,
                "EMULATED — figures from the hardware emulator, not from real GPUs",
                fill=True,
                align="C",
                new_x=XPos.LMARGIN,
                new_y=YPos.NEXT,
            )
            self.set_text_color(0, 0, 0)
        self.set_font("dejavu", "", 7)
        self.set_text_color(110, 110, 110)
        self.cell(
            0,
            5,
            f"bakeoff negotiation brief · plan {self.d.plan.name} · run {self.d.run_id}",
            new_x=XPos.LMARGIN,
            new_y=YPos.NEXT,
        )
        self.set_text_color(0, 0, 0)
        self.ln(1)

    def footer(self) -> None:
        self.set_y(-10)
        self.set_font("dejavu", "", 7)
        self.set_text_color(110, 110, 110)
        stamp = "EMULATED · " if self.d.emulated else ""
        self.cell(0, 5, f"{stamp}page {self.page_no()}/{{nb}} · generated {self.d.generated_at}", align="R")
        self.set_text_color(0, 0, 0)

    # small helpers -------------------------------------------------------------------------------
    def h2(self, text: str) -> None:
        self.ln(1.5)
        self.set_font("dejavu", "B", 10.5)
        self.cell(0, 6, text, new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        self.set_font("dejavu", "", 8.5)

    def para(self, text: str, size: float = 8.5, bold: bool = False) -> None:
        self.set_font("dejavu", "B" if bold else "", size)
        self.multi_cell(0, size * 0.5, text, align="L", new_x=XPos.LMARGIN, new_y=YPos.NEXT)
        self.set_font("dejavu", "", 8.5)

    def bullets(self, items: list[str]) -> None:
        for it in items:
            self.multi_cell(0, 4, f"•  {it}", align="L", new_x=XPos.LMARGIN, new_y=YPos.NEXT)

    def grid(self, head: list[str], rows: list[list[str]], widths: tuple[float, ...] | None = None) -> None:
        self.set_font("dejavu", "", 7.5)
        with self.table(
            col_widths=widths,
            text_align="LEFT",
            line_height=4.2,
            padding=0.8,
            headings_style=FontFace(emphasis="BOLD", fill_color=(236, 238, 241)),
            first_row_as_headings=True,
        ) as t:
            r = t.row()
            for h in head:
                r.cell(h)
            for row in rows:
                r = t.row()
                for c in row:
                    r.cell(c)
        self.set_font("dejavu", "", 8.5)


def _ranking_rows(d: ReportData, wl: str) -> list[list[str]]:
    b = d.basis
    rows = []
    for _, r in d.ranked(wl).iterrows():
        lo, hi = r[f"usd_per_m_{b}_ci_low"], r[f"usd_per_m_{b}_ci_high"]
        ci = f" ({fmt(lo)}–{fmt(hi)})" if lo == lo and hi == hi else ""
        vs = "cheapest" if r["vs_cheapest_pct"] == 0 else f"+{r['vs_cheapest_pct']:.1f}%"
        move = r["break_even_price_change_pct"]
        be = f"{fmt(r['break_even_usd_per_gpu_hour'])} ({move:+.0f}%)" if move == move else "–"
        name = f"{r['name']}{' [EMULATED]' if r['emulated'] else ''}"
        rows.append(
            [
                name,
                r["node_spec"],
                fmt(r["usd_per_gpu_hour"]),
                f"{fmt(r[f'usd_per_m_{b}'])}{ci}" + (f" — {d.lower_bound_note(r)}" if r.get("lower_bound") else ""),
                f"c{fmt(r['concurrency'])}, {fmt(r['interactivity'])} tok/s/user",
                vs,
                be,
            ]
        )
    return rows


def _sensitivity_rows(d: ReportData, wl: str) -> tuple[list[str], list[list[str]]]:
    s = d.tables.sensitivity
    head = ["target"] + [f"price ×{f}" for f in cost.PRICE_FACTORS] + [f"util {u:.0%}" for u in cost.UTILISATIONS]
    if s.empty:
        return head, []
    s = s[(s["workload"] == wl) & s["ranked"]]
    col = f"usd_per_m_{d.basis}"
    rows = []
    for name, g in s.groupby("name", sort=False):
        price = g[g["dimension"] == "price"].sort_values("factor")[col].tolist()
        util = g[g["dimension"] == "utilisation"].sort_values("factor")[col].tolist()
        rows.append([str(name)] + [fmt(v, 3) for v in price + util])
    return head, rows


def _sessions_how(w: Workload, b: Sessions) -> str:
    """A session workload (``b``: its sessions block) in one sentence: its source, its load and what a
    point counts."""
    load = (
        f"closed loop at {', '.join(map(str, b.concurrent_sessions))} concurrent sessions"
        if b.concurrent_sessions
        else f"open loop at {', '.join(f'{r:g}' for r in b.session_rates)} session arrivals/s"
    )
    source = f"{b.source} sessions" + (f" from {b.path}" if b.path else f" ({b.sessions} generated)")
    limits = f", points stopped after {b.duration_s:g} s" if b.duration_s else ""
    return (
        f"Workload {w.name}: agent sessions, {source}, {w.endpoint} endpoint; {load}{limits}; "
        f"{b.warmup_sessions} warm-up session(s) per point, {w.repeats} repeat(s). Each turn re-sends its "
        f"session's context; prefix-cache hit rate from the server's own counters beside the trace's prediction."
    )


def _measured_how(d: ReportData) -> list[str]:
    plan = d.plan
    out = []
    for w in plan.workloads:
        if w.sessions is not None:  # kind: sessions (the plan holds the block there and only there)
            out.append(_sessions_how(w, w.sessions))
            continue
        lo_in, hi_in = w.length_bounds(w.input_len)
        lo_out, hi_out = w.length_bounds(w.output_len)
        eos = "EOS ignored" if w.ignore_eos else "EOS honoured"
        levels = ", ".join(map(str, w.rates if w.load == "rate" else w.levels()))
        warmup = w.warmup_requests if w.warmup_requests is not None else "2×c"
        out.append(
            f"Workload {w.name}: {w.endpoint} endpoint, input {lo_in}–{hi_in} tokens, "
            f"output {lo_out}–{hi_out} tokens ({eos}), {w.load} load at {levels}; "
            f"{w.requests_per_point or '10×c'} requests per level after {warmup} warm-up, {w.repeats} repeat(s)."
        )
    out.append(
        "Streaming clients timed every chunk; TTFT to first generated text, "
        "TPOT = (E2E − TTFT)/(output tokens − 1), interactivity = 1000/TPOT, output tokens from the server's usage. "
        "Cost at the SLO = cheapest load level where every repeat meets every SLO; "
        "USD/M tokens = USD per GPU-hour / (tokens/s per GPU × 3600 / 1e6), "
        "tokens/s per GPU over the GPUs serving the model (TP × PP)."
    )
    for _, r in d.tables.targets.iterrows():  # the price source names its market and date
        out.append(
            f"Price of {r['name']}: {fmt(r['node_usd_per_hour'])} USD/node-h = {fmt(r['usd_per_gpu_hour'])} USD/GPU-h "
            f"({r['price_source']})."
        )
    out += [f"{t.name}: {d.weights[t.slug]}." for t in plan.targets if t.slug in d.weights]
    h = d.tables.headline
    out.append(
        f"This evaluation held instances for {fmt(d.tables.evaluation['instance_hours'].sum(min_count=1))} "
        f"node-hours: {fmt(h.get('evaluation_cost_usd'))} USD billed "
        f"({fmt(h.get('evaluation_cost_if_billed_usd'))} USD at list prices)."
    )
    return out


def _claim_check(pdf: Brief, d: ReportData) -> None:
    """Each claim in a few lines: the claim and source, one row per figure, the verdicts' reasons."""
    if d.claims_error:
        pdf.h2("Claim check")
        pdf.para(d.claims_error, size=7.5)
    for c in d.claim_checks:
        ctx = claimcheck.context(c)
        pdf.h2(f"Claim check{' — EMULATED' if c.emulated else ''}")
        pdf.para(ctx["header"], size=8, bold=True)
        pdf.para(f"Source: {ctx['source']}", size=6.5)
        rows = [[r["figure"], r["claimed"], r["at_config"], r["at_slo"], r["verdict"]] for r in ctx["rows"]]
        pdf.grid(
            ["claimed figure", "claimed", "bakeoff at the claim's configuration", "bakeoff at your SLO", "verdict"],
            rows,
            (42, 20, 48, 48, 24),
        )
        pdf.para(" · ".join(claimcheck.reasons(ctx["rows"])), size=6.5)
        if b := ctx["basis"]:
            pdf.para(f"What the cost claim rests on. {b['own']}", size=6.5)
            pdf.para(f"{b['recomputed']} {b['supports']}{' (EMULATED)' if c.emulated else ''}", size=6.5)


def _provisioning(pdf: Brief, d: ReportData) -> None:
    """Per cloud target: the type that ran (a fallback is priced by it), the offers tried, refusals, times."""
    if not d.provisioning:
        return
    pdf.h2("Provisioning")
    pdf.grid(
        ["target", "instance type", "outcome", "offers tried", "refusals", "to running / serving s"],
        [
            [
                r.name,
                r.instance_type,
                r.outcome,
                "; ".join(r.offers) or "–",
                refusal_text(r.refusals),
                f"{fmt(r.to_running_s)} / {fmt(r.to_serving_s)}",
            ]
            for r in d.provisioning
        ],
        (28, 30, 30, 48, 20, 26),
    )


def _per_watt(pdf: Brief, d: ReportData) -> None:
    """Per target and workload at the SLO (report.perwatt): tokens per joule and per kW, cost with energy."""
    if not d.per_watt:
        return
    first = d.per_watt[0].workload  # the brief keeps to two pages: one workload, estimates only; the rest in the report
    rows = [
        [
            f"{r.name}{' [EMULATED]' if r.emulated else ''}",
            fmt(r.tokens_per_joule[0]),
            fmt(r.tps_per_kw_gpu[0]),
            fmt(r.tps_per_kw_nameplate[0]),
            fmt(r.usd_per_m_with_energy[0]),
            r.energy_source.split(",")[0] + (", throttled" if r.throttled else ""),
        ]
        for r in d.per_watt
        if r.workload == first
    ]
    pdf.h2(f"Per watt — {first} (intervals and every workload: report and CSV)")
    head = ["target", "out tok/J", "tok/s/kW GPU", "tok/s/kW nameplate", "USD/M out + energy", "energy"]
    pdf.grid(head, rows, (40, 22, 24, 28, 28, 28))


def _capacity_cell(r: capacity.CapacityRow) -> str:
    """The search's bracket, short: '≥ 8 (< 9)', '≥ 32 (max)' where the search's max still met the tier,
    'none met'; '*' where the budget of points ran out first (the report says it in words)."""
    if not math.isfinite(r.best):
        return "none met"
    upper = f"(< {fmt(r.first_failing)})" if math.isfinite(r.first_failing) else "(max)"
    return f"≥ {fmt(r.best)} {upper}" + (" *" if r.stopped_short else "")


def _capacity(pdf: Brief, d: ReportData) -> None:
    """Per SLO tier and target (report.capacity): the capacity the search found, per GPU, per kW and per
    USD/hour, and the cost there, one line a row; the search's steps and the unrounded figures stay in the
    report and its CSV."""
    if not d.capacity:
        return
    rows = []
    for r in d.capacity:
        money = f"{fmt(r.usd_per_session)} /session" if r.over == "sessions" else f"{fmt(r.usd_per_m_output)} /M out"
        rows.append(
            [
                r.workload,
                r.tier,
                f"{r.name}{' [EMULATED]' if r.emulated else ''}",
                _capacity_cell(r),
                fmt(r.per_gpu),
                fmt(r.per_kw),
                fmt(r.per_usd_hour),
                money if math.isfinite(r.best) else "–",
            ]
        )
    pdf.h2("Capacity at SLO tiers (the search's steps and intervals: report and CSV)")
    head = ["workload", "tier", "target", "in flight", "per GPU", "per kW", "per USD/h", "USD there"]
    pdf.grid(head, rows, (22, 19, 38, 26, 14, 14, 17, 32))
    pdf.para(
        "In flight: the most requests (request workloads) or concurrent agent sessions the target sustained within "
        "the tier, below the first load that missed it. Per GPU: requests/s served there, or sessions; per kW on the "
        "measured GPU power where the point measured it, else nameplate. * the search ran out of its budget of "
        "points first: a lower bound. Rows marked [EMULATED] are the hardware emulator's figures.",
        size=7,
    )


def _rack_scale(pdf: Brief, d: ReportData) -> None:
    """Per cluster target and workload (report.rackscale): price per GPU- and rack-hour, throughput per
    GPU and per rack at the SLO, cost beside the cheapest 8-GPU node, break-even, energy; EMULATED per row."""
    if not d.rack_scale:
        return
    pdf.h2("Rack scale")
    rows = []
    for r in d.rack_scale:
        vs = f"{r.baseline} {fmt(r.baseline_usd_per_m)}" if r.baseline else "no 8-GPU node at the SLO"
        energy = f"{fmt(r.joules_per_output_token)} {r.energy_source.split(',')[0]}" if r.energy_source else "–"
        rows.append(
            [
                r.workload,
                f"{r.name}{' [EMULATED]' if r.emulated else ''}",
                r.shape,
                fmt(r.gpus),
                f"{fmt(r.usd_per_gpu_hour)} / {fmt(r.usd_per_rack_hour)}",
                f"{fmt(r.output_tps_per_gpu)} / {fmt(r.output_tps_per_rack)}",
                fmt(r.usd_per_m),
                vs,
                fmt(r.break_even_usd_per_gpu_hour),
                energy,
            ]
        )
    pdf.grid(
        [
            "workload",
            "target",
            "shape",
            "GPUs billed",
            "USD/GPU-h / rack-h",
            "out tok/s GPU / rack",
            f"USD/M {d.basis} at SLO",
            "vs 8-GPU node",
            "break-even USD/GPU-h",
            "J/out token",
        ],
        rows,
        (16, 26, 28, 10, 20, 20, 14, 20, 14, 14),
    )
    pdf.para(
        "A rack is 72 GPUs (an NVL72 rack; 8-GPU nodes counted per 72 GPUs), every node of a target billed. "
        "Break-even: the GPU-hour price below which the cluster costs less per million tokens than the 8-GPU node "
        "at the same SLO. Rows marked [EMULATED] are the hardware emulator's figures.",
        size=7,
    )


def _build(d: ReportData, chart_mm: float, with_capacity: bool = True) -> Brief:
    pdf = Brief(d)
    pdf.add_page()
    pdf.set_font("dejavu", "B", 15)
    pdf.cell(0, 9, f"Negotiation brief: {d.plan.name}", new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    pdf.para(
        f"SLO: {d.plan.slo.in_words()} · cost per million {d.basis} tokens · "
        f"utilisation {d.plan.pricing.utilisation:.0%} · "
        f"{d.plan.pricing.market} prices",
        size=8,
    )
    pdf.ln(1)
    pdf.para(d.summary, size=10, bold=True)
    if d.checkpoint_note:
        pdf.para(f"Different checkpoints: {d.checkpoint_note}", size=7.5)
    widths = (26, 38, 19, 30, 30, 17, 22)
    for wl in d.workloads:
        pdf.h2(f"Cheapest at the SLO — {wl}")
        rows = _ranking_rows(d, wl)
        if rows:
            pdf.grid(
                [
                    "target",
                    "node",
                    "USD/GPU-h today",
                    f"USD/M {d.basis} at SLO (95% CI)",
                    "load at SLO",
                    "vs cheapest",
                    "break-even USD/GPU-h",
                ],
                rows,
                widths,
            )
            pdf.para(
                "Break-even: the price per GPU-hour at which the target's cost at the SLO equals "
                "the best other target's (for the cheapest: the price up to which it stays cheapest). "
                "The bracket is the change from today's price.",
                size=7,
            )
        else:
            pdf.para("No target has a cost at the SLO for this workload.")
        for text in d.pacing_lines(wl):
            pdf.para(text, size=8, bold=True)
        missed = d.unranked_passed(wl)
        if not missed.empty:
            pdf.para(f"Met the SLO at no measured load: {', '.join(map(str, missed['name']))}.", size=8)
        sessions = d.session_costs(wl)
        if sessions:
            pdf.grid(
                ["target", "concurrent sessions", "USD per session", "USD per 1,000 turns", "hit rate server / trace"],
                [
                    [
                        f"{r['name']}{' [EMULATED]' if r['emulated'] else ''}",
                        fmt(r["sessions"]),
                        fmt(r["usd_per_session"]),
                        fmt(r["usd_per_1k_turns"]),
                        " / ".join(
                            "–" if x is None else f"{x * 100:.1f}%" for x in (r["hit_rate"], r["hit_rate_expected"])
                        ),
                    ]
                    for r in sessions
                ],
                (40, 28, 28, 30, 40),
            )
        if len(rows) and len(d.workloads) == 1 and chart_mm:
            png = charts.to_png(charts.cost_at_slo(d, wl, small=True), dpi=130)
            pdf.image(io.BytesIO(png), w=chart_mm)
        head, srows = _sensitivity_rows(d, wl)
        if srows:
            pdf.h2(f"Sensitivity of cost at the SLO (USD/M {d.basis} tokens) — {wl}")
            pdf.grid(head, srows, (32,) + (15,) * (len(head) - 1))
    _claim_check(pdf, d)
    dnp = d.did_not_pass()
    if not dnp.empty:
        pdf.h2("Did not pass — not ranked")
        pdf.bullets([f"{r['name']}: {STATUS_TEXT[r['status']]} — {r['failures']}" for _, r in dnp.iterrows()])
    _provisioning(pdf, d)
    _rack_scale(pdf, d)
    _per_watt(pdf, d)
    if with_capacity:
        _capacity(pdf, d)
    elif d.capacity:
        pdf.para("Capacity at SLO tiers: in the report and its CSV (left out here to keep the brief to two pages).")
    pdf.h2("What was measured and how")
    pdf.bullets(_measured_how(d))
    pdf.h2("Caveats")
    pdf.bullets(d.caveats)
    return pdf


CHART_MM = (110.0, 75.0, 0.0)  # the chart's width, tried in turn until the brief fits without a stub page
STUB_PAGE = 0.3  # a last page filled less than this is a stub: a smaller chart (or none) should fold it back


def _fits(pdf: Brief) -> bool:
    """At most MAX_PAGES, and no last page that holds only a few lines."""
    stub = pdf.page_no() > 1 and pdf.get_y() < pdf.h * STUB_PAGE
    return pdf.page_no() <= MAX_PAGES and not stub


def render(d: ReportData, path: Path) -> Path:
    """Write the brief; when the full layout runs past two pages or leaves a last page of a few lines,
    shrink the chart, then drop it, keeping the first layout that fits. Still past two pages: the capacity
    table is left to the report (a short last page is no reason to leave it out)."""
    for chart_mm in CHART_MM:
        pdf = _build(d, chart_mm)
        if _fits(pdf):
            break
    if d.capacity and pdf.page_no() > MAX_PAGES:
        for chart_mm in CHART_MM:
            pdf = _build(d, chart_mm, with_capacity=False)
            if _fits(pdf):
                break
    if pdf.page_no() > MAX_PAGES:
        log.warning(
            "negotiation brief runs to %d pages (aim: %d); the plan has many targets or workloads",
            pdf.page_no(),
            MAX_PAGES,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path
