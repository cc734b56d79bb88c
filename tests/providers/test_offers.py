"""Fallback over instance types (``instance_types``): the plan's checks, the create trying each offer
against the EC2 sandbox with the first out of stock, and cost, budget and report priced by the type
that ran."""

from __future__ import annotations

import copy

import pytest
from cloud_helpers import launch_args, new_run_id

from bakeoff import catalog, cost, store
from bakeoff.core import facts
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.providers import CapacityError
from bakeoff.providers.aws import AwsProvider
from bakeoff.publishing import evidence
from bakeoff.report import provisioning
from bakeoff.spend import budget, offers

FIRST, SECOND = "p5en.48xlarge", "p5e.48xlarge"
SECOND_USD = 71.5  # a priced p5e row for these tests only: the catalog lists it without a price


@pytest.fixture(autouse=True)
def priced_second_offer(monkeypatch):
    rows = dict(catalog.instance_types())
    rows[SECOND] = rows[SECOND].model_copy(update={"usd_per_hour": SECOND_USD, "source": "test row"})
    monkeypatch.setattr(catalog, "instance_types", lambda: rows)


def _plan(**target):
    """The sandbox plan with its EC2 target on H200 offers (and these fields set)."""
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json", exclude_unset=True)
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == "aws"))
    t.pop("instance_type")
    t.update({"name": "h200-vllm", "instance_types": [FIRST, SECOND], **target})
    raw["targets"] = [t]
    return plan_from_dict(raw)


def test_the_first_offer_is_the_instance_type_and_each_is_priced_by_its_own_row():
    t = _plan().targets[0]
    assert t.instance_type == FIRST and t.offers == [FIRST, SECOND]
    ran = t.ran_as(SECOND)
    assert ran.instance_type == SECOND and ran.offers == [SECOND] and ran.usd_per_hour == SECOND_USD
    assert t.usd_per_hour == catalog.instance_types()[FIRST].usd_per_hour != SECOND_USD
    with pytest.raises(ValueError, match="not an offer"):
        t.ran_as("p5.48xlarge")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"instance_types": [FIRST, "p5.48xlarge"]}, "instance_types: p5.48xlarge is 8x h100"),
        ({"instance_types": [FIRST, "BM.GPU.H200.8"]}, "same GPU model and count on the same cloud"),
        ({"instance_types": [FIRST, "p5x.bogus"]}, "unknown instance type 'p5x.bogus'"),
        ({"instance_types": [FIRST]}, "write instance_type"),
        ({"instance_types": [FIRST, FIRST]}, "listed twice"),
        ({"instance_type": SECOND}, f"list {SECOND} first"),
    ],
)
def test_offers_that_would_change_what_is_compared_are_refused_naming_the_field(fields, words):
    with pytest.raises(PlanError) as e:
        _plan(**fields)
    assert "instance_type" in str(e.value) and words in str(e.value)


def test_an_unpriced_offer_needs_a_price(monkeypatch):
    rows = dict(catalog.instance_types())
    rows[SECOND] = rows[SECOND].model_copy(update={"usd_per_hour": None})
    monkeypatch.setattr(catalog, "instance_types", lambda: rows)
    with pytest.raises(PlanError, match=f"instance_types: {SECOND} has no catalog price"):
        _plan()
    assert _plan(price={"usd_per_hour": 60.0}).targets[0].offers == [FIRST, SECOND]


def test_the_budget_guard_prices_the_target_at_its_dearest_offer():
    t = _plan().targets[0]
    dearest = max(catalog.instance_types()[x].usd_per_hour for x in (FIRST, SECOND))
    assert budget.guard_usd_per_hour(t) == dearest == SECOND_USD  # the first listed is cheaper


def test_first_offer_out_of_stock_launches_the_second_and_records_every_attempt(aws_creds, moto_server):
    moto_server.gate.denied = {FIRST}  # planted: the first type is refused wherever it is asked for
    t, rid = _plan().targets[0], new_run_id()
    p = AwsProvider(aws_creds)
    inst = p.create(t, rid, **launch_args(rid, t))
    try:
        assert inst.instance_type == SECOND
        prov = inst.provisioning.model_dump(mode="json")
        regions = t.provider_options.regions
        assert prov["tried"] == [f"{FIRST} in {r}" for r in regions] + [f"{SECOND} in {regions[0]}"]
        assert prov["instance_type"] == SECOND and prov["instance_types"] == [FIRST, SECOND]
        assert prov["refusals"] == {"capacity": len(regions)} and prov["attempts"] == len(regions) + 1
        assert {r["instance_type"] for r in prov["refused"]} == {FIRST}
    finally:
        p.terminate(inst.id)


def test_every_offer_refused_names_each_and_keeps_the_attempts(aws_creds, moto_server):
    moto_server.gate.denied = {FIRST, SECOND}
    t, rid = _plan().targets[0], new_run_id()
    with pytest.raises(CapacityError) as e:
        AwsProvider(aws_creds).create(t, rid, **launch_args(rid, t))
    assert f"no capacity for {FIRST} or {SECOND}" in str(e.value)
    assert f"{SECOND} in us-west-2 (InsufficientInstanceCapacity" in str(e.value)
    assert e.value.provisioning is not None and len(e.value.provisioning.tried) == 4
    assert AwsProvider(aws_creds).list_tagged(rid) == []


def _record_launch(rdir, slug, ran):
    doc = {"instance_type": ran, "region": "us-west-2", "attempts": 2, "refusals": {"capacity": 1}}
    doc["tried"] = [f"{FIRST} in us-east-1", f"{ran} in us-west-2"]
    prov = facts.Provision(instance_id="i-1", launched_at=1.0, requested_at=1.0, provisioning=doc)
    store.record(rdir, prov.STEP, prov.to_json(), slug=slug)


def test_cost_and_the_provisioning_section_speak_of_the_type_that_ran(data_root):
    plan = _plan()
    t = plan.targets[0]
    rdir = str(store.run_dir(plan.name, "r-offers"))
    assert offers.as_ran(plan, rdir) is plan  # nothing launched yet: the plan as written
    _record_launch(rdir, t.slug, SECOND)
    ran = offers.as_ran(plan, rdir)
    frame = cost._targets_frame(ran, {t.slug: {"status": "passed", "ranked": True, "failures": []}})
    row = frame.iloc[0]
    assert row["instance_type"] == SECOND and row["node_usd_per_hour"] == SECOND_USD
    assert SECOND in row["node_spec"]
    assert evidence._price_sheet(ran, {})["targets"][t.name]["usd_per_hour"] == SECOND_USD
    section = provisioning.rows(plan, store.run_facts(rdir), 10.0)[0]
    assert section.instance_type == SECOND and section.offers == (f"{FIRST} in us-east-1", f"{SECOND} in us-west-2")


def test_a_record_naming_a_type_the_plan_does_not_list_prices_nothing_new(data_root):
    plan = _plan()
    rdir = str(store.run_dir(plan.name, "r-forged"))
    _record_launch(rdir, plan.targets[0].slug, "p6-b200.48xlarge")
    assert offers.as_ran(plan, rdir).targets[0].instance_type == FIRST
