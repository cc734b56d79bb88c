"""The steps' typed facts: records checked where they are read back, figures derived once."""

from __future__ import annotations

import pytest

from bakeoff import facts, store


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
