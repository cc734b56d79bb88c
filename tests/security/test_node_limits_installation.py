"""Node limits are the installation's, not a run's (issue 36, L6): two runs on one cloud together stay
within its limit. Claims are ordered across runs by start time; a claim is written, then checked again,
and yields to a run that started earlier but registered while it was being granted."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from bakeoff import store
from bakeoff.clusters import node_slots
from bakeoff.clusters.node_slots import claim, held, release
from bakeoff.plan import load_plan, plan_from_dict
from tests.clusters.slot_claimers import claimer  # claim, count the holders while holding, release

LIMIT = {"aws": 1}


def _run(root: Path, plan: str, started_at: float, targets: int = 1, limits=None, register: bool = True) -> Path:
    """A started run of ``targets`` one-node EC2 targets (as start_run leaves it: plan, limits, start record)."""
    raw = load_plan("distributed-three-sandbox").model_dump(mode="json")
    one = raw["targets"][0]
    raw["name"] = plan
    raw["targets"] = [{**json.loads(json.dumps(one)), "name": f"ec2-{i}"} for i in range(targets)]
    rdir = root / plan / "run_id=manual__1"
    store.write_json(rdir / "plan.json", raw)
    node_slots.record(rdir, limits or LIMIT)
    store.record(rdir, store.START, {"plan": plan, "run_id": "manual__1", "started_at": started_at})
    if register:
        node_slots.register(rdir, plan_from_dict(raw), started_at)
    return rdir


def test_a_second_run_waits_for_the_first_runs_node(tmp_path):
    first, second = _run(tmp_path, "plan-a", 100.0), _run(tmp_path, "plan-b", 200.0)
    assert not claim(second, "ec2-0")  # the earlier run has the first turn, claimed or not
    assert claim(first, "ec2-0") and not claim(second, "ec2-0")
    assert held(first) == {"aws": 1} and held(second) == {}
    assert release(first, "ec2-0") and claim(second, "ec2-0")


def test_an_earlier_run_counts_a_later_runs_held_node(tmp_path):
    later = _run(tmp_path, "plan-b", 200.0)
    assert claim(later, "ec2-0")
    earlier = _run(tmp_path, "plan-a", 100.0)  # started first, registered after the later run's claim
    assert not claim(earlier, "ec2-0")
    assert release(later, "ec2-0") and claim(earlier, "ec2-0")


def test_a_claim_yields_to_an_earlier_run_that_registered_meanwhile(tmp_path, monkeypatch):
    """Between the later run's look and its write, an earlier run registers: the look after the write sees
    it, and the later claim is given back, so the earlier run's claim is granted and only one node runs."""
    later = _run(tmp_path, "plan-b", 200.0)
    fits = node_slots._fits
    looks = []

    def look_then_earlier_registers(*args, **kwargs):
        ok = fits(*args, **kwargs)
        if not looks:
            _run(tmp_path, "plan-a", 100.0)
        looks.append(ok)
        return ok

    monkeypatch.setattr(node_slots, "_fits", look_then_earlier_registers)
    assert not claim(later, "ec2-0") and looks == [True, False]
    assert held(later) == {}
    monkeypatch.setattr(node_slots, "_fits", fits)
    assert claim(tmp_path / "plan-a" / "run_id=manual__1", "ec2-0") and not claim(later, "ec2-0")


def test_a_malformed_ledger_entry_is_skipped_not_trusted(tmp_path):
    run = _run(tmp_path, "plan-a", 100.0)
    ledger = tmp_path / node_slots.LEDGER / "aws"
    (ledger / "junk.json").write_text('{"plan": "../../etc", "run": "passwd", "targets": [{"slug": "x", "nodes": 9}]}')
    (ledger / "list.json").write_text("[1, 2]")
    (ledger / "bad.json").write_text('{"plan": "p", "run": "run_id=x", "started_at": 1, "targets": [7]}')
    assert claim(run, "ec2-0")


def test_two_runs_claiming_at_once_in_separate_processes_stay_within_one_limit(tmp_path):
    runs = [_run(tmp_path, f"plan-{x}", t, targets=4, limits={"aws": 3}) for x, t in (("a", 100.0), ("b", 101.0))]
    counter = tmp_path / "holders"
    counter.write_text("0")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=claimer, args=(str(r), f"ec2-{i}", str(counter), 0.05, out))
        for i in reversed(range(4))
        for r in runs
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    assert all(p.exitcode == 0 for p in procs)
    most = [out.get(timeout=5) for _ in procs]
    assert max(most) <= 3 and all(held(r) == {} for r in runs)
    assert len(most) == 8


def test_a_cloud_bakeoff_does_not_provision_is_never_entered_in_the_ledger(tmp_path):
    raw = load_plan("local-demo").model_dump(mode="json")
    rdir = tmp_path / "local-demo" / "run_id=manual__1"
    store.write_json(rdir / "plan.json", raw)
    node_slots.register(rdir, plan_from_dict(raw), 1.0)
    assert not (tmp_path / node_slots.LEDGER).exists()
