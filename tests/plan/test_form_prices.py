"""Contract prices as the trigger form gives them: one line per target ("mi355x-vllm = 40.0"), each
refused with an error naming the line or the target (bakeoff.plan.price_entries, apply_overrides)."""

import pytest

from bakeoff.plan import PlanError, apply_overrides, load_plan, price_entries
from tests.conftest import ROOT

PLAN = ROOT / "include" / "plans" / "mi355x-vs-b200.yaml"


def _price(plan, name: str) -> float | None:
    return next(t.price.usd_per_hour for t in plan.targets if t.name == name and t.price)


def test_lines_set_each_targets_contract_price():
    plan = apply_overrides(load_plan(PLAN), {"prices": ["mi355x-vllm = 41.5", "", "  b200-vllm: 60 "]})
    assert _price(plan, "mi355x-vllm") == 41.5 and _price(plan, "b200-vllm") == 60.0
    assert price_entries({"b200-vllm": 7}) == {"b200-vllm": 7}  # the API's mapping and older runs' conf
    assert price_entries(None) == {} and price_entries([]) == {} and price_entries(["", " "]) == {}


@pytest.mark.parametrize(
    "lines, named",
    [
        (["b200-vllm = 40", "h100-vllm = 30"], "prices.h100-vllm: no such target in this run"),
        (["b200-vllm 40"], "prices line 1: 'b200-vllm 40' is not"),
        (["mi355x-vllm = 1", "b200-vllm = forty"], "prices line 2: 'b200-vllm = forty'"),
        (["b200-vllm = 4", "b200-vllm = 5"], "prices.b200-vllm: priced twice"),
        (["b200-vllm = 0"], "prices.b200-vllm: 0 USD per node-hour is out of range"),
        (["mi355x-vllm = 100000"], "prices.mi355x-vllm: 100000 USD per node-hour is out of range"),
    ],
)
def test_a_bad_line_or_target_is_refused_naming_it(lines, named):
    with pytest.raises(PlanError) as e:
        apply_overrides(load_plan(PLAN), {"prices": lines})
    assert named in str(e.value)
