"""SLO tiers and the capacity search in a plan: the tiers keep the plan's order and the SLO vocabulary, the
budget guard counts the search's points, and a bad tier or search is refused naming the field and the fix."""

from __future__ import annotations

import pytest
import yaml

from bakeoff.plan import PlanError, load_plan, plan_from_dict, plans_dir
from bakeoff.spend import budget


def _raw(**extra):
    raw = yaml.safe_load((plans_dir() / "local-capacity.yaml").read_text())
    raw.update(extra)
    return raw


def _error(raw) -> str:
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="bad.yaml")
    return str(e.value)


def test_the_shipped_plan_names_three_tiers_in_the_slo_vocabulary():
    plan = load_plan("local-capacity")
    assert list(plan.slo_tiers) == ["interactive", "standard", "batch"]
    assert plan.slo_tiers["interactive"].in_words() == "p95 TTFT ≤ 150 ms, p95 TPOT ≤ 8 ms"
    assert plan.slo_tiers["batch"].per_request is not None and plan.capacity.points == 9


def test_the_budget_guard_counts_the_capacity_points():
    with_tiers = load_plan("local-capacity")
    without = plan_from_dict(_raw(slo_tiers={}))
    t = with_tiers.targets[0]
    assert budget.bench_hours(with_tiers, t) > budget.bench_hours(without, t)
    fewer = plan_from_dict(_raw(capacity={"start": 1, "max": 32, "points": 2}))
    assert budget.bench_hours(fewer, t) < budget.bench_hours(with_tiers, t)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"slo_tiers": {"Fast Lane": {"ttft_p95_ms": 100}}}, "a tier name is a lowercase word"),
        ({"slo_tiers": {"interactive": {}}}, "slo_tiers.interactive: give the tier at least one bound"),
        ({"slo_tiers": {"interactive": {"ttft_p97_ms": 100}}}, "valid keys: ttft_p50_ms"),
        ({"slo_tiers": {f"t{i}": {"ttft_p95_ms": 100} for i in range(7)}}, "at most 6 tiers"),
        ({"capacity": {"start": 64, "max": 8}}, "start (64) must not exceed max (8)"),
        ({"capacity": {"points": 500}}, "capacity.points"),
    ],
)
def test_a_bad_tier_or_search_names_the_field_and_the_fix(change, says):
    assert says in _error(_raw(**change))
