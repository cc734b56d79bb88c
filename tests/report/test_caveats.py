"""Every registered report caveat fires when its condition holds and stays silent when it does not.

One synthetic run is costed and gathered once; each case derives the two reports it needs from it
(another plan, step list, run record or cost table), so a rule is checked on its own condition.
A rule registered without a case here fails ``test_every_registered_caveat_has_its_cases``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import synthetic

from bakeoff.core import facts
from bakeoff.cost import cost_run
from bakeoff.plan import plan_from_dict
from bakeoff.report.capacity import CapacityRow
from bakeoff.report.caveats import CAVEATS, Caveat, caveat, caveat_lines
from bakeoff.report.data import ReportData
from bakeoff.report.gather import gather
from bakeoff.report.rackscale import RackRow

NAMES = ("mi355x-vllm", "b200-vllm")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> ReportData:
    """Emulated, two passed targets at dated list prices, one repeat, estimated energy."""
    plan = synthetic.make_plan(names=NAMES, concurrency=(1, 4))
    rdir = synthetic.make_run(tmp_path_factory.mktemp("res"), plan)
    cost_run(plan, rdir)
    return gather(plan, rdir)


def with_plan(d: ReportData, change: Callable[[dict], None], **kw) -> ReportData:
    raw = synthetic.plan_dict(names=NAMES, concurrency=(1, 4), **kw)
    change(raw)
    return replace(d, plan=plan_from_dict(raw))


def with_frame(d: ReportData, table: str, **columns) -> ReportData:
    """The report with columns of one cost table set (a list: per row; else every row)."""
    df = getattr(d.tables, table).copy()
    for k, v in columns.items():
        df[k] = v
    return replace(d, tables=replace(d.tables, **{table: df}))


def with_watts(d: ReportData, sources: list[str], throttled: list[bool] | None = None) -> ReportData:
    """The report with its Per watt rows' energy kinds (and throttle flags) set, one per row in order."""
    assert len(d.per_watt) == len(sources), "the synthetic run has one per-watt row per target"
    flags = throttled or [False] * len(sources)
    rows = [replace(r, energy_source=s, throttled=f) for r, s, f in zip(d.per_watt, sources, flags, strict=True)]
    return replace(d, per_watt=rows)


def with_capacity(d: ReportData, stopped: bool) -> ReportData:
    """One capacity row for the first target at tier standard (the section reads nothing else here)."""
    nan = float("nan")
    row = CapacityRow(
        "chat", "standard", NAMES[0], "concurrency", 8.0, nan, 1.0, 1.0, 1.0, 1.0, nan, "", "", stopped, True
    )
    return replace(d, capacity=[row])


def each_target(key: str, value) -> Callable[[dict], None]:
    def change(raw: dict) -> None:
        for t in raw["targets"]:
            t[key] = value

    return change


def pinned(raw: dict) -> None:
    raw["targets"][0]["speculative"] = {
        "method": "eagle3",
        "draft_model": "example/llama-3.1-70b-eagle3",
        "acceptance": "pinned",
        "acceptance_length": 2.5,
    }


def not_emulated(d: ReportData) -> ReportData:
    return replace(d, tables=replace(d.tables, headline={**d.tables.headline, "emulated": False}))


def prompts(error: float) -> Callable[[ReportData], ReportData]:
    def change(d: ReportData) -> ReportData:
        return with_frame(
            d,
            "points",
            input_len_requested_mean=128.0,
            input_len_measured_mean=128.0 * (1 + error),
            input_len_error=error,
            prompt_sizing="words",
        )

    return change


OFF_BAND = {
    "target": "mi355x-vllm",
    "workload": "chat",
    "concurrency": 4,
    "measured_tps_per_gpu": 500.0,
    "predicted_tps_per_gpu": 1000.0,
    "error_pct": -50.0,
    "in_band": False,
}


RACK = RackRow(
    workload="chat",
    slug="b200-pair",
    name="b200-pair",
    shape="2 nodes of 8 GPUs, KV over nixl",
    nodes=2,
    gpus=16,
    usd_per_gpu_hour=14.0,
    usd_per_rack_hour=1008.0,
    usd_per_target_hour=224.0,
    output_tps_per_gpu=100.0,
    output_tps_per_rack=7200.0,
    usd_per_m=38.9,
    baseline="",
    baseline_usd_per_m=float("nan"),
    break_even_usd_per_gpu_hour=float("nan"),
    joules_per_output_token=21.7,
    energy_source="estimated: all-in kW per GPU",
    emulated=True,
    price_source="oci",
)


# name -> (the report where it fires, a fragment of its text, the report where it does not; None: always on)
CASES: dict[str, tuple[Callable[[ReportData], ReportData], str, Callable[[ReportData], ReportData] | None]] = {
    "failed_steps": (
        lambda d: replace(d, failed_steps=["benchmark", "accuracy_gate"]),
        "These steps of the run failed: benchmark, accuracy_gate.",
        lambda d: replace(d, failed_steps=[]),
    ),
    "approval": (
        lambda d: replace(
            d,
            run=d.run.model_copy(update={"approval": facts.Approval(decision="approved", at=1.78e9, spend_usd=12.5)}),
        ),
        "Spend approval: approved at 2026-05-28",
        lambda d: replace(d, run=d.run.model_copy(update={"approval": None})),
    ),
    "emulated": (lambda d: d, "EMULATED: every figure comes from the hardware emulator", not_emulated),
    "twin_efficiencies": (
        lambda d: with_plan(d, each_target("emulator", {"efficiency": "twin"})),
        "The emulator ran on the calibrated twin's fitted efficiencies for: mi355x-vllm (",
        lambda d: with_plan(d, each_target("emulator", {"efficiency": "manual"})),
    ),
    "twin_out_of_band": (
        lambda d: not_emulated(replace(d, twin_checks=[OFF_BAND, {**OFF_BAND, "in_band": True}])),
        "Outside the calibrated twin's band: 1 of 2 measured points, on mi355x-vllm",
        # every measured point inside the band: nothing to flag
        lambda d: not_emulated(replace(d, twin_checks=[{**OFF_BAND, "in_band": True}])),
    ),
    "time_scaled": (
        lambda d: with_plan(d, each_target("emulator", {"time_scale": 0.05})),
        "delays scaled (time_scale) for: mi355x-vllm (0.05), b200-vllm (0.05)",
        # scaled delays of figures that are not emulated: nothing to say
        lambda d: not_emulated(with_plan(d, each_target("emulator", {"time_scale": 0.05}))),
    ),
    "pinned_acceptance": (
        lambda d: with_plan(d, pinned),
        "Speculative acceptance is pinned (the golden acceptance length) for: mi355x-vllm. Their",
        lambda d: with_plan(d, lambda raw: None),
    ),
    "undated_prices": (
        lambda d: with_frame(d, "targets", price_as_of="undated"),
        "Undated catalog prices (list prices of unknown date) for: mi355x-vllm, b200-vllm;",
        lambda d: d,
    ),
    "third_party_prices": (
        lambda d: with_frame(d, "targets", price_source=["getdeploying.com (3p)", "oracle.com"]),
        "not the provider's own page, for: mi355x-vllm.",
        lambda d: with_frame(d, "targets", price_source="oracle.com"),
    ),
    "mixed_markets": (
        lambda d: with_frame(d, "targets", market=["on_demand", "contract"]),
        "different markets (mi355x-vllm: on_demand, b200-vllm: contract)",
        lambda d: with_frame(d, "targets", market="contract"),
    ),
    "off_market": (
        lambda d: with_frame(d, "targets", market=["on_demand", "spot"]),
        "The plan asks for on_demand prices, but the price in force for b200-vllm is not.",
        lambda d: with_frame(d, "targets", market=["on_demand", "contract"]),
    ),
    "utilisation": (
        lambda d: with_plan(d, lambda raw: None, utilisation=0.6),
        "Costs assume 60% utilisation",
        lambda d: with_plan(d, lambda raw: None, utilisation=1.0),
    ),
    "single_repeat": (
        lambda d: d,
        "Some costs at the SLO come from a single repeat",
        # a target without a cost at the SLO has no interval to miss
        lambda d: with_frame(d, "at_slo", slo_met=False),
    ),
    "estimated_energy": (
        lambda d: with_frame(d, "points", energy_source=["measured"] + ["estimated"] * (len(d.tables.points) - 1)),
        "Energy is estimated from the nameplate (all-in kW per GPU) at 0.1 USD/kWh",
        lambda d: with_frame(d, "points", energy_source="measured, energy counters, GPU only"),
    ),
    "per_watt_mixed": (
        lambda d: with_watts(d, ["measured, energy counters, GPU only", "estimated, nameplate"]),
        "some targets' energy is measured (GPU only) and others' estimated from the nameplate",
        lambda d: with_watts(d, ["estimated, nameplate", "estimated, nameplate"]),
    ),
    "capacity_stopped_short": (
        lambda d: with_capacity(d, stopped=True),
        "ran out of its budget of 12 points before pinning down mi355x-vllm (standard, chat)",
        lambda d: with_capacity(d, stopped=False),
    ),
    "capacity_missing": (
        lambda d: with_plan(d, lambda raw: raw.update(slo_tiers={"standard": {"ttft_p99_ms": 900}})),
        "No capacity search was stored for b200-vllm, mi355x-vllm",
        lambda d: d,
    ),
    "throttled": (
        lambda d: with_watts(d, ["estimated, nameplate"] * 2, throttled=[False, True]),
        "during the points at the SLO of b200-vllm",
        lambda d: with_watts(d, ["estimated, nameplate"] * 2),
    ),
    "prompt_length_off": (
        prompts(0.05),
        "off the requested length by more than 2% for b200-vllm, mi355x-vllm",
        prompts(0.01),
    ),
    "client_sizing": (
        lambda d: replace(d, tables=replace(d.tables, headline={**d.tables.headline, "client_sizing": ["chat: x"]})),
        "Client sizing: chat: x.",
        lambda d: replace(d, tables=replace(d.tables, headline={**d.tables.headline, "client_sizing": []})),
    ),
    "validation_missing": (
        lambda d: replace(d, validation=None),
        "Validation did not run for this run",
        lambda d: d,
    ),
    "did_not_pass": (
        lambda d: with_frame(d, "targets", ranked=[True, False], status=["passed", "no_results"]),
        "b200-vllm has no results and is left out of the ranking",
        lambda d: d,
    ),
    "break_even_and_tco": (lambda d: d, "Break-even prices hold throughput fixed", None),
    "rack_scale": (
        lambda d: replace(d, rack_scale=[RACK]),
        "Rack scale, EMULATED: each node is one emulated worker",
        lambda d: replace(d, rack_scale=[]),
    ),
}


def test_every_registered_caveat_has_its_cases():
    assert sorted(CASES) == sorted(CAVEATS), (
        f"caveats without cases here: {sorted(set(CAVEATS) - set(CASES))}; "
        f"cases of no registered caveat: {sorted(set(CASES) - set(CAVEATS))}"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_caveat_fires_when_its_condition_holds_and_only_then(base, name):
    fires, fragment, quiet = CASES[name]
    rule = CAVEATS[name]
    said = rule.lines(fires(base))
    assert said and any(fragment in line for line in said), f"{name}: expected {fragment!r} in {said}"
    if quiet is not None:
        assert rule.lines(quiet(base)) == [], f"{name} fired where its condition does not hold"


def test_the_report_lists_every_firing_rule_once_in_registration_order(base):
    d = replace(base, failed_steps=["benchmark"], validation=None)
    lines = caveat_lines(d)
    assert lines == [line for rule in CAVEATS.values() for line in rule.lines(d)]
    assert lines[0].startswith("These steps of the run failed") and lines[-1].startswith("Break-even")
    assert base.caveats == caveat_lines(base)  # gather fills the list the HTML, Markdown and PDF read


def test_one_line_per_subject_where_a_rule_has_several():
    rule = Caveat("many", when=lambda d: True, text=lambda d: ["a", "b"])
    assert rule.lines(None) == ["a", "b"]
    assert Caveat("off", when=lambda d: False, text=lambda d: "never").lines(None) == []


def test_a_name_cannot_be_registered_twice():
    with pytest.raises(ValueError, match="'emulated' is registered twice"):
        caveat("emulated", when=lambda d: True)(lambda d: "again")
    assert CAVEATS["emulated"].text.__name__ == "_emulated"
