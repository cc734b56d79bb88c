"""Per-watt figures at the SLO, checked by hand: tokens per joule and per kW, cost with energy, the kind of
each energy figure, intervals over repeats, and the report's Per watt rows and CSV records."""

from __future__ import annotations

import math

import pytest
import synthetic

from bakeoff import cost
from bakeoff.report import perwatt

COUNTERS = "measured, energy counters, GPU only"


def _run(tmp_path):
    plan = synthetic.make_plan()  # mi355x-vllm (8.6 USD/GPU-h, all-in 2.65 kW) and b200-vllm; 0.10 USD/kWh
    rows = [
        # MI355X measured through its counters: 500 W per GPU at 200 and 300 output tok/s per GPU
        {"target": "mi355x-vllm", "concurrency": 4, "repeat": r, "output_tps_per_gpu": tps, "power_w_per_gpu": 500.0}
        | {"energy_method": COUNTERS, "throttled": r == 1}
        for r, tps in enumerate((200.0, 300.0))
    ]
    rows.append({"target": "b200-vllm", "concurrency": 4, "repeat": 0, "output_tps_per_gpu": 400.0})
    return plan, cost.compute(plan, synthetic.write_points(tmp_path, plan, rows))


def test_per_watt_columns_by_hand(tmp_path):
    _, tables = _run(tmp_path)
    p = tables.points.set_index(["target", "repeat"])
    mi = p.loc[("mi355x-vllm", 0)]
    assert mi["energy_source"] == COUNTERS
    assert mi["output_tokens_per_joule"] == pytest.approx(200.0 / 500.0)  # 0.4 tokens per J
    assert mi["joules_per_output_token_at_level"] == pytest.approx(2.5)
    assert mi["output_tps_per_kw_gpu_measured"] == pytest.approx(400.0)  # 200 tok/s / 0.5 kW
    assert mi["output_tps_per_kw_nameplate"] == pytest.approx(200.0 / 2.65)
    # energy: 0.5 kW x 0.10 USD/kWh = 0.05 USD/GPU-h over 0.72 M output tokens/h; beside 8.6 / 0.72
    assert mi["energy_usd_per_m_output"] == pytest.approx(0.05 / 0.72)
    assert mi["usd_per_m_output_with_energy"] == pytest.approx(8.6 / 0.72 + 0.05 / 0.72)
    b2 = p.loc[("b200-vllm", 0)]
    assert b2["energy_source"] == cost.ESTIMATED and math.isnan(b2["output_tps_per_kw_gpu_measured"])


def test_per_watt_at_the_slo_has_intervals_and_names_its_kind(tmp_path):
    plan, tables = _run(tmp_path)
    at = tables.at_slo.set_index("target")
    mi = at.loc["mi355x-vllm"]
    assert mi["output_tokens_per_joule"] == pytest.approx((0.4 + 0.6) / 2)
    assert mi["output_tokens_per_joule_ci_low"] == pytest.approx(0.4)
    assert mi["output_tokens_per_joule_ci_high"] == pytest.approx(0.6)
    assert mi["joules_per_output_token_at_slo"] == pytest.approx(2.0) and bool(mi["throttled"])
    rows = perwatt.rows(tables.at_slo, plan.pricing.usd_per_kwh)
    assert {r.name: r.energy_source for r in rows} == {"mi355x-vllm": COUNTERS, "b200-vllm": cost.ESTIMATED}
    assert perwatt.mixed_workloads(rows) == [plan.workloads[0].name]
    by = {r.name: r for r in rows}
    assert by["b200-vllm"].tps_per_kw_gpu[0] != by["b200-vllm"].tps_per_kw_gpu[0]  # NaN: nothing measured
    cells = perwatt.cells(by["mi355x-vllm"], lambda x: f"{x:.2f}")
    assert cells[2] == "0.50 (0.40–0.60)" and cells[-1] == COUNTERS + "; throttled"
    rec = {r["target"]: r for r in perwatt.table(rows)}["mi355x-vllm"]
    assert rec["figures"] == "EMULATED" and rec["output_tps_per_kw_gpu_measured_ci_high"] == pytest.approx(600.0)
