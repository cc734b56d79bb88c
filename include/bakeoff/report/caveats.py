"""The report's caveats as registered rules, one list the HTML report, the Markdown summary and the
PDF brief all read (``ReportData.caveats``).

Each rule has a name, says when it applies from what the report gathered (the plan, the cost tables,
the run's records: ``ReportData``) and what it says then. Rules were an 87-line function in which a
new line could hide an old one's condition; as rules each is tested on its own, firing and not
(tests/report/test_caveats.py refuses a rule without its cases).

To add one: write its text (a function of ``ReportData`` returning a line, or several) and register
it with ``@caveat("name", when=...)`` where a reader should meet it: rules run in the order this
module registers them. A condition that the text needs too goes in a small helper both call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bakeoff import catalog
from bakeoff.plan.target import Target
from bakeoff.prediction.runs import band_count, out_of_band_caveat
from bakeoff.report import perwatt
from bakeoff.report.data import ReportData
from bakeoff.spend.approval import approval_line
from bakeoff.twin.emulate import efficiency_info

Text = Callable[["ReportData"], str | list[str]]
When = Callable[["ReportData"], bool]


@dataclass(frozen=True)
class Caveat:
    """One rule: ``when`` it applies, and the ``text`` it then adds (one line, or one per subject)."""

    name: str
    when: When
    text: Text

    def lines(self, d: ReportData) -> list[str]:
        """What this rule says about the report: nothing when it does not apply."""
        if not self.when(d):
            return []
        said = self.text(d)
        return [said] if isinstance(said, str) else list(said)


# name -> rule, in the order the report lists them
CAVEATS: dict[str, Caveat] = {}


def caveat(name: str, *, when: When) -> Callable[[Text], Text]:
    """Register the decorated text as the rule ``name``, applying ``when`` it says so."""

    def register(text: Text) -> Text:
        if name in CAVEATS:
            raise ValueError(f"caveat {name!r} is registered twice; give the new rule a name of its own")
        CAVEATS[name] = Caveat(name, when, text)
        return text

    return register


def caveat_lines(d: ReportData) -> list[str]:
    """Every registered rule's lines, in registration order."""
    return [line for rule in CAVEATS.values() for line in rule.lines(d)]


# --- the run itself ---------------------------------------------------------------------------------


@caveat("failed_steps", when=lambda d: bool(d.failed_steps))
def _failed_steps(d: ReportData) -> str:
    return (
        f"These steps of the run failed: {', '.join(d.failed_steps)}. What they would have measured or "
        "checked is missing from this report."
    )


@caveat("approval", when=lambda d: d.run.approval is not None)
def _approval(d: ReportData) -> str:
    return f"Spend approval: {approval_line(d.run.approval.as_shown() if d.run.approval else None)}."


# --- emulated figures -------------------------------------------------------------------------------


@caveat("emulated", when=lambda d: d.emulated)
def _emulated(d: ReportData) -> str:
    return (
        "EMULATED: every figure comes from the hardware emulator's roofline model, not from real GPUs; "
        "use it to check the pipeline, never to choose hardware."
    )


def _twin_timed(d: ReportData) -> list[Target]:
    return [x for x in d.plan.targets if x.emulated and x.emulator.efficiency == "twin"]


@caveat("twin_efficiencies", when=lambda d: bool(_twin_timed(d)))
def _twin_efficiencies(d: ReportData) -> str:

    parts = []
    for x in _twin_timed(d):
        e = efficiency_info(x)
        parts.append(
            f"{x.name} (expected error +-{e['band_pct']:g}% against published results; {e['basis']})"
            if e["source"] == "twin"
            else f"{x.name} (no calibration, so its manual efficiencies: {e.get('no_calibration', '')})"
        )

    inside, n = band_count(d.twin_checks, {x.name for x in _twin_timed(d)})
    held = (
        f"Of their EMULATED points, {inside} of {n} fall inside the twin's band (Predicted vs measured)"
        if n
        else "None of their points could be set beside the twin's prediction"
    )
    return (
        "The emulator ran on the calibrated twin's fitted efficiencies for: " + "; ".join(parts) + f". {held}; "
        "the band is the twin's error against published results, not a measurement of this hardware."
    )


def _out_of_band(d: ReportData) -> str | None:

    return out_of_band_caveat(d)


@caveat("twin_out_of_band", when=lambda d: bool(d.twin_checks) and _out_of_band(d) is not None)
def _twin_out_of_band(d: ReportData) -> str:
    return _out_of_band(d) or ""


def _time_scaled(d: ReportData) -> list[str]:
    return [f"{x.name} ({x.emulator.time_scale:g})" for x in d.plan.targets if x.emulator.time_scale != 1]


@caveat("time_scaled", when=lambda d: d.emulated and bool(_time_scaled(d)))
def _time_scaled_text(d: ReportData) -> str:
    return (
        f"The emulator ran with its delays scaled (time_scale) for: {', '.join(_time_scaled(d))}; the benchmark "
        "sent its load and recorded its figures on the emulated hardware's own clock, so they are that hardware's "
        "(the client's own timing error weighs 1/time_scale as much)."
    )


def _pinned(d: ReportData) -> list[str]:
    return [x.name for x in d.plan.targets if x.speculative and x.speculative.acceptance == "pinned"]


@caveat("pinned_acceptance", when=lambda d: bool(_pinned(d)))
def _pinned_acceptance(d: ReportData) -> str:
    return (
        f"Speculative acceptance is pinned (the golden acceptance length) for: {', '.join(_pinned(d))}. Their "
        "throughput compares with published figures, but a pinned engine skips verification, so its answers "
        "are not the model's: its accuracy gate says nothing about a real deployment. Run with acceptance: "
        "real for the figure your prompts get."
    )


# --- prices -----------------------------------------------------------------------------------------


def _undated(d: ReportData) -> list[str]:
    t = d.tables.targets
    catalog_priced = t[t["price_as_of"] != ""]
    return [str(n) for n in catalog_priced[catalog_priced["price_as_of"] == "undated"]["name"]]


@caveat("undated_prices", when=lambda d: bool(_undated(d)))
def _undated_prices(d: ReportData) -> str:
    return (
        f"Undated catalog prices (list prices of unknown date) for: {', '.join(_undated(d))}; "
        "confirm them or override with your contract price."
    )


def _third_party(d: ReportData) -> list[str]:
    t = d.tables.targets
    return [str(n) for n in t[t["price_source"].str.contains("(3p)", regex=False)]["name"]]


@caveat("third_party_prices", when=lambda d: bool(_third_party(d)))
def _third_party_prices(d: ReportData) -> str:
    return f"Prices from a third-party aggregator, not the provider's own page, for: {', '.join(_third_party(d))}."


def _markets(d: ReportData) -> dict[str, str]:
    t = d.tables.targets
    return {str(n): str(m) for n, m in zip(t["name"], t["market"], strict=True)}


@caveat("mixed_markets", when=lambda d: len(set(_markets(d).values())) > 1)
def _mixed_markets(d: ReportData) -> str:
    listed = ", ".join(f"{n}: {m}" for n, m in _markets(d).items())
    return (
        f"Targets are priced in different markets ({listed}): not like for like; override prices to compare "
        "the same market."
    )


def _off_market(d: ReportData) -> list[str]:
    return [n for n, m in _markets(d).items() if m not in (d.plan.pricing.market, "contract")]


@caveat("off_market", when=lambda d: bool(_off_market(d)))
def _off_market_text(d: ReportData) -> str:
    return (
        f"The plan asks for {d.plan.pricing.market} prices, but the price in force for "
        f"{', '.join(_off_market(d))} is not."
    )


@caveat("utilisation", when=lambda d: d.plan.pricing.utilisation < 1)
def _utilisation(d: ReportData) -> str:
    return (
        f"Costs assume {d.plan.pricing.utilisation:.0%} utilisation: idle paid hours are spread over the tokens served."
    )


# --- how the figures were measured ------------------------------------------------------------------


def _single_repeat(d: ReportData) -> bool:
    """Whether a cost at the SLO rests on one repeat (only targets that have a cost count)."""
    at = d.tables.at_slo
    costed = at[at["slo_met"].fillna(False).astype(bool)] if not at.empty and "slo_met" in at else at.iloc[0:0]
    return "repeats" in costed and bool((costed["repeats"] < 2).any())


@caveat("single_repeat", when=_single_repeat)
def _single_repeat_text(d: ReportData) -> str:
    return "Some costs at the SLO come from a single repeat: no confidence interval; add workload repeats for one."


def _energy_estimated(d: ReportData) -> bool:
    p = d.tables.points
    return not p.empty and bool((~p["energy_source"].astype(str).str.startswith("measured")).any())


@caveat("estimated_energy", when=_energy_estimated)
def _estimated_energy(d: ReportData) -> str:
    return (
        f"Energy is estimated from the nameplate (all-in kW per GPU) at {d.plan.pricing.usd_per_kwh} USD/kWh where "
        "not measured; cloud prices include power, so energy cost is for on-premises comparison, never added to them."
    )


@caveat("per_watt_mixed", when=lambda d: bool(perwatt.mixed_workloads(d.per_watt)))
def _per_watt_mixed(d: ReportData) -> str:
    return (
        f"Per watt, {', '.join(perwatt.mixed_workloads(d.per_watt))}: some targets' energy is measured (GPU only) "
        "and others' estimated from the nameplate (node share); the two kinds are not comparable, so read them "
        "side by side, not as one ranking."
    )


@caveat("capacity_stopped_short", when=lambda d: any(r.stopped_short for r in d.capacity))
def _capacity_short(d: ReportData) -> str:
    short = sorted({f"{r.name} ({r.tier}, {r.workload})" for r in d.capacity if r.stopped_short})
    return (
        f"The capacity search ran out of its budget of {d.plan.capacity.points} points before pinning down "
        f"{', '.join(short)}: those capacities are lower bounds; raise capacity.points for a closed bracket."
    )


@caveat("capacity_missing", when=lambda d: bool(d.plan.slo_tiers) and bool(_no_capacity(d)))
def _capacity_missing(d: ReportData) -> str:
    return (
        f"No capacity search was stored for {', '.join(_no_capacity(d))}: a co-located client does not search SLO "
        "tiers yet, and a target that never served has none."
    )


def _no_capacity(d: ReportData) -> list[str]:
    have = {r.name for r in d.capacity}
    return sorted(t.name for t in d.plan.targets if t.name not in have)


@caveat("throttled", when=lambda d: any(r.throttled for r in d.per_watt))
def _throttled(d: ReportData) -> str:
    names = sorted({r.name for r in d.per_watt if r.throttled})
    return (
        f"A GPU reported a slowdown (power cap, thermal or power brake) during the points at the SLO of "
        f"{', '.join(names)}: their throughput and energy are those of a throttled GPU."
    )


def _prompts_off(d: ReportData) -> dict[str, list[str]]:
    """Per workload: the targets whose server-measured prompts miss the requested length by more than
    the workload's tolerance."""
    out: dict[str, list[str]] = {}
    for w in d.plan.workloads:
        off = [
            str(r["target"])
            for r in d.measured_input(w.name)
            if math.isfinite(r["error"]) and abs(r["error"]) > w.input_len_tolerance
        ]
        if off:
            out[w.name] = off
    return out


@caveat("prompt_length_off", when=lambda d: bool(_prompts_off(d)))
def _prompt_length_off(d: ReportData) -> list[str]:
    tolerance = {w.name: w.input_len_tolerance for w in d.plan.workloads}
    return [
        f"Prompts of {name} as the server measured them are off the requested length by more than "
        f"{tolerance[name]:.0%} for {', '.join(off)}: its figures are not those of the workload as written."
        for name, off in _prompts_off(d).items()
    ]


# --- validation and what the figures mean -----------------------------------------------------------


@caveat("validation_missing", when=lambda d: d.validation is None)
def _validation_missing(d: ReportData) -> str:
    return "Validation did not run for this run: no target is quarantined, but none is vouched for either."


@caveat("did_not_pass", when=lambda d: not d.did_not_pass().empty)
def _did_not_pass(d: ReportData) -> list[str]:
    out = []
    for _, r in d.did_not_pass().iterrows():
        what = "has no results" if r["status"] == "no_results" else "did not pass validation"
        out.append(f"{r['name']} {what} and is left out of the ranking and break-even prices.")
    return out


@caveat("client_sizing", when=lambda d: bool(d.tables.headline.get("client_sizing")))
def _client_sizing(d: ReportData) -> list[str]:
    """Plan check's client sizing against the loop monitor's verdicts (bench.client.client_cores.sizing_check)."""
    return [f"Client sizing: {line}." for line in d.tables.headline["client_sizing"]]


@caveat("break_even_and_tco", when=lambda d: True)
def _break_even_and_tco(d: ReportData) -> str:
    tco = catalog.tco()
    return (
        "Break-even prices hold throughput fixed and scale cost linearly with price; TCO columns reprice GPUs "
        f"at public TCO tiers ({tco['source']}, {tco['as_of']})."
    )


# --- rack scale (report.rackscale) -----------------------------------------------------------------


@caveat("rack_scale", when=lambda d: bool(d.rack_scale))
def _rack_scale(d: ReportData) -> list[str]:
    out = [
        "Rack scale: a rack is 72 GPUs (an NVL72 rack; 8-GPU nodes counted per 72 GPUs, the same silicon); every "
        "node of a multi-node target is billed, so its per-GPU throughput divides by all of them, idle trays "
        "included; its break-even holds throughput fixed against the cheapest 8-GPU single node at the same SLO."
    ]
    if any(r.emulated for r in d.rack_scale):
        out.append(
            "Rack scale, EMULATED: each node is one emulated worker of its role's parallelism behind the emulator's "
            "router, the KV transfer is modelled (NVLink in a rack, the NICs between nodes); wide-EP all-to-all, "
            "several workers per node and the orchestrator's own scheduling are not."
        )
    if not any(r.baseline for r in d.rack_scale):
        out.append("Rack scale: no 8-GPU single-node target of this run met the SLO, so no break-even is shown.")
    return out
