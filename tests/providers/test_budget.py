"""Budget guard arithmetic, the kill-switch timer derived from it, and the measured evaluation cost."""
from __future__ import annotations

import json

import pytest

from bakeoff import budget, store
from bakeoff.plan import load_plan, plan_from_dict


def tiny_plan(provider="aws", budget_usd=600.0, max_hours=3.0):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"] = [t for t in raw["targets"] if t["provider"] == "aws"]
    if provider == "local":
        raw["targets"][0].update(provider="local", instance_type="BM.GPU.B200.8", provider_options={})
    raw["workloads"][0].update(concurrency=[4], requests_per_point=36, warmup_requests=4, output_len=100, repeats=1)
    raw.update(budget_usd=budget_usd, max_instance_hours=max_hours)
    return plan_from_dict(raw)


def test_estimate_by_hand():
    plan = tiny_plan()
    t = plan.targets[0]
    # bench: (36 + 4) requests / 4 concurrent x 100 tokens x 0.05 s = 50 s
    bench_h = 50 / 3600
    # load: image pull 0.1 h + 70.6 B params x 1 byte (fp8) / 0.5 GB/s + engine start 0.15 h
    load_h = 0.1 + 70.6 / 0.5 / 3600 + 0.15
    hours = (0.25 + load_h + bench_h) * 1.25
    est = budget.estimate(plan)
    row = est["targets"][0]
    assert row["hours"] == pytest.approx(hours, abs=1e-3)
    assert row["usd"] == pytest.approx(hours * t.usd_per_hour, abs=0.01)
    assert est["estimate_usd"] == row["usd"] and row["spends"] is True
    assert row["kill_switch_s"] == pytest.approx(hours * 3600, abs=2)
    assert budget.check(plan) == est


def test_local_targets_price_the_hardware_but_boot_and_load_nothing():
    row = budget.estimate(tiny_plan("local"))["targets"][0]
    assert row["boot_h"] == 0 and row["load_h"] == 0 and row["spends"] is False
    assert row["hours"] == pytest.approx(50 / 3600 * 1.25, abs=1e-3)


def test_over_cap_is_refused_with_the_breakdown():
    with pytest.raises(budget.BudgetExceeded) as e:
        budget.check(tiny_plan(budget_usd=10))
    msg = str(e.value)
    assert msg.startswith("budget_usd:") and "b200-vllm" in msg and "USD/h" in msg and "Raise budget_usd" in msg


def test_kill_switch_never_exceeds_max_instance_hours_and_too_long_is_refused():
    plan = tiny_plan(max_hours=0.5)
    assert budget.kill_switch_s(plan, plan.targets[0]) == 0.5 * 3600
    with pytest.raises(budget.BudgetExceeded, match="max_instance_hours"):
        budget.check(plan)


def test_record_measured_cost(data_root):
    plan = tiny_plan()
    rdir = store.run_dir(plan.name, "r1")
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    store.update_run(rdir, run_id="r1", targets={"b200-vllm": {"provision": {"launched_at": 1000.0},
                                                               "terminate": {"terminated_at": 1000.0 + 1800}}})
    doc = budget.record_measured_cost(rdir)
    assert doc["usd"] == pytest.approx(0.5 * plan.targets[0].usd_per_hour, abs=0.01)
    assert json.loads((rdir / "evaluation_cost.json").read_text())["usd"] == doc["usd"]
    assert store.read_json(rdir / "run.json")["evaluation_cost"]["usd"] == doc["usd"]


def test_open_loop_and_sla_workloads_by_hand():
    plan = tiny_plan()
    t = plan.targets[0]
    raw = plan.model_dump(mode="json")
    base = dict(raw["workloads"][0], output_len=100, warmup_requests=0)
    raw["workloads"] = [
        # open loop: 20 arrivals at 2/s = 10 s, plus the last request's 100 x 0.05 s decode = 15 s
        dict(base, name="rate", load="rate", rates=[2.0], requests_per_point=20),
        # SLA search: 4 probes, each at most one point at the top load: 16 / 8 x 5 s = 10 s -> 40 s
        dict(base, name="sla", load="sla", concurrency=[1, 8], requests_per_point=16,
             sla={"over": "concurrency", "start": 1, "max": 8, "max_probes": 4}),
    ]
    assert budget.bench_hours(plan_from_dict(raw), t) * 3600 == pytest.approx(15 + 40)
