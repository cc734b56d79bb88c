"""The steps' typed facts: records checked where they are read back, figures derived once."""

from __future__ import annotations

import pytest

from bakeoff import store
from bakeoff.core import facts


def test_a_record_of_the_wrong_shape_is_refused_naming_the_record_and_the_field(data_root):
    rdir = store.run_dir("demo", "r-bad")
    store.record(rdir, "provision", {"tries": [{"launched_at": "yesterday"}]}, slug="a")
    with pytest.raises(
        facts.RecordInvalid, match=r"target=a/steps/provision.json: provision record field tries.0.launched_at"
    ):
        store.run_facts(rdir)
    store.record(rdir, "provision", {"launched_at": 5.0, "lanched_at": 6.0}, slug="a")
    with pytest.raises(facts.RecordInvalid, match=r"field lanched_at: Extra inputs are not permitted"):
        store.run_facts(rdir)


def test_what_a_step_writes_reads_back_as_the_same_facts(data_root):
    rdir = store.run_dir("demo", "r-round")
    prov = facts.Provision(
        instance_id="i-2",
        launched_at=20.0,
        tries=(
            facts.Launch(instance_id="i-1", launched_at=10.0, ended_at=15.0),
            facts.Launch(instance_id="i-2", launched_at=20.0),
        ),
    )
    start = facts.Start(
        plan="demo", run_id="r-round", targets={"a": facts.TargetStart(name="A"), "b": facts.TargetStart()}
    )
    store.record(rdir, start.STEP, start.to_json())
    store.record(rdir, prov.STEP, prov.to_json(), slug="a")
    store.record(rdir, "deploy", facts.Deploy(ready=True, emulated=True).to_json(), slug="b")
    store.record(rdir, "validation", {"passed": True})  # a step the typed view leaves to its own readers
    run = store.run_facts(rdir)
    a = run.target("a")
    assert a.provision == prov and a.name == "A" and run.target("b").deploy == facts.Deploy(ready=True, emulated=True)
    assert run.emulated and not run.target("never").launches()
    assert a.running_since() == 20.0 and a.billed_seconds(now=30.0) == pytest.approx(5.0 + 10.0)
    with pytest.raises(Exception, match="frozen"):
        a.provision.instance_id = "i-3"  # type: ignore[misc, union-attr]


def test_a_launch_ends_at_the_termination_recorded_after_it_never_before():
    term = facts.Terminate(terminated_at=12.0)
    early = facts.TargetFacts(slug="a", provision=facts.Provision(launched_at=20.0), terminate=term)
    assert early.running_since() == 20.0 and early.last_ended_at() is None  # an older termination: still billing
    late = facts.TargetFacts(slug="a", provision=facts.Provision(launched_at=10.0), terminate=term)
    assert late.billed_hours(now=1e9) == pytest.approx(2.0 / 3600) and late.first_launched_at() == 10.0


def test_an_iso_time_in_a_record_reads_as_epoch_seconds():
    launch = facts.parse(facts.Launch, {"launched_at": "2026-11-01T00:00:00Z"}, "x")
    assert launch.launched_at == 1793491200.0
    with pytest.raises(facts.RecordInvalid, match=r"x: provision.tries record field launched_at"):
        facts.parse(facts.Launch, {"launched_at": "soon"}, "x")


# an old run's provision record, as an earlier version wrote it (the REST clouds' own dict, the
# pipeline's create_s, the later steps' times), with a key this version does not know
OLD_PROVISION = {
    "instance_id": "i-9",
    "launched_at": 100.0,
    "tries": [],
    "provisioning": {"attempts": 2, "refusals": {"capacity": 1}, "region": "ord", "create_s": 4.0, "gpu_s": 1},
}


def test_an_old_runs_provisioning_record_loads_typed_and_is_stored_with_its_own_keys(data_root):
    rdir = store.run_dir("demo", "r-old")
    store.record(rdir, "provision", OLD_PROVISION, slug="a")
    prov = store.run_facts(rdir).target("a").provision
    assert prov is not None and isinstance(prov.provisioning, facts.ProvisioningRecord)
    rec = prov.provisioning
    assert (rec.attempts, rec.refusal_counts(), rec.region, rec.create_s) == (2, {"capacity": 1}, "ord", 4.0)
    assert not rec.timed("running_s")
    timed = rec.with_time("running_s", 30.0)
    assert timed.timed("running_s") and timed.running_s == 30.0
    # stored again: the keys it was given (the unknown one dropped), nothing this version adds by default
    assert prov.model_copy(update={"provisioning": timed}).to_json()["provisioning"] == {
        "attempts": 2,
        "refusals": {"capacity": 1},
        "region": "ord",
        "create_s": 4.0,
        "running_s": 30.0,
    }


def test_a_malformed_provisioning_value_is_dropped_and_the_rest_kept():
    rec = facts.ProvisioningRecord.model_validate(
        {"attempts": True, "refusals": {"capacity": -1, "quota": 2}, "offers": ["b200 in r1"], "create_s": -3}
    )
    assert rec.attempts is None and rec.refusal_counts() == {"quota": 2} and rec.create_s is None
    assert rec.tried == ("b200 in r1",)  # "offers" is read as the places asked
