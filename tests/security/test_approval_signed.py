"""Approval records are the installation's signature over the run and the plan's content, and
``bakeoff run`` meets the same admission as the DAG (issue 36, L4 and L5).

A hand-written ``approved`` record, one copied from another run, and a plan changed after its approval
provision nothing; the first-scheduled-run rule holds for a plan whose budget was raised under the same
name; the command line's start record carries the installation's threshold and node limits and it
refuses a run the DAG would hold for approval.
"""

from __future__ import annotations

import pytest
import yaml

from bakeoff import store
from bakeoff.cli import main
from bakeoff.run import admission, pipeline, provisioning
from bakeoff.spend import approval
from bakeoff.spend.approval import ApprovalError
from tests.conftest import ROOT

ALICE = {"id": "alice", "name": "Alice Approver"}


@pytest.fixture
def cloud_plan(tmp_path, monkeypatch):
    """The real-cloud plan without serving secrets (its floating recipe images get none)."""
    for env in (admission.THRESHOLD_ENV, admission.NODE_LIMITS_ENV):
        monkeypatch.delenv(env, raising=False)
    raw = yaml.safe_load((ROOT / "include" / "plans" / "mi355x-vs-b200.yaml").read_text())
    for t in raw["targets"]:
        t.pop("secrets", None)

    def write(**changes) -> str:
        path = tmp_path / "mi355x-vs-b200.yaml"
        path.write_text(yaml.safe_dump({**raw, **changes}))
        return str(path)

    return write


def _held(plan: str, run_id: str, **kw) -> str:
    run = pipeline.start_run(plan, run_id, approval_threshold_usd="100", **kw)
    assert run["approval_required"] is True
    return run["run_dir"]


def test_a_hand_written_approved_record_provisions_nothing(data_root, cloud_plan):
    rdir = _held(cloud_plan(), "manual__forged")
    store.record(rdir, approval.RECORD, {"decision": approval.APPROVED, "by": ALICE, "at": 1.0})
    with pytest.raises(ApprovalError, match="did not sign"):
        provisioning.provision(rdir, "b200-vllm")
    approval.record(rdir, approval.APPROVED, by=ALICE, at=1.0)  # the approval step's own record
    approval.ensure_approved(rdir)


def test_an_approval_copied_from_another_run_provisions_nothing(data_root, cloud_plan):
    first, second = _held(cloud_plan(), "manual__one"), _held(cloud_plan(), "manual__two")
    approval.record(first, approval.APPROVED, by=ALICE, at=1.0)
    store.record(second, approval.RECORD, store.read_record(first, approval.RECORD))
    with pytest.raises(ApprovalError, match="did not sign"):
        approval.ensure_approved(second)


def test_a_plan_changed_after_its_approval_provisions_nothing(data_root, cloud_plan):
    rdir = _held(cloud_plan(), "manual__changed")
    approval.record(rdir, approval.APPROVED, by=ALICE, at=1.0)
    approval.ensure_approved(rdir)
    doc = store.read_json(store.at(rdir) / "plan.json")
    doc["budget_usd"] = 990
    store.write_json(store.at(rdir) / "plan.json", doc)
    with pytest.raises(ApprovalError, match="digest changed"):
        approval.ensure_approved(rdir)


def test_raising_the_budget_under_the_same_name_asks_again_on_schedule(data_root, cloud_plan):
    first = pipeline.start_run(cloud_plan(), "scheduled__1", scheduled=True)
    assert first["approval_required"] is True
    approval.record(first["run_dir"], approval.APPROVED, by=ALICE, at=1.0)
    again = pipeline.start_run(cloud_plan(), "scheduled__2", scheduled=True)
    assert again["approval_required"] is False  # the same plan content, approved once on schedule
    raised = pipeline.start_run(cloud_plan(budget_usd=990), "scheduled__3", scheduled=True)
    assert raised["approval_required"] is True
    need = store.read_record(raised["run_dir"], store.START)["approval_needed"]
    assert "as its content now reads" in need["reason"]


def test_bakeoff_run_meets_the_dags_approval_and_node_limits(data_root, cloud_plan, monkeypatch, capsys):
    monkeypatch.setenv(admission.THRESHOLD_ENV, "100")
    monkeypatch.setenv(admission.NODE_LIMITS_ENV, '{"aws": 1, "vultr": 1}')
    assert main(["run", "--plan", cloud_plan(), "--run-id", "cli__held"]) == 2
    assert "needs a person's approval" in capsys.readouterr().err
    rdir = store.run_dir("mi355x-vs-b200", "cli__held")
    start = store.read_record(rdir, store.START)
    assert start["approval_needed"]["required"] is True
    assert store.read_json(store.at(rdir) / "node_limits.json") == {"aws": 1, "vultr": 1}
    assert not list(store.at(rdir).glob("target=*/steps/provision.json")), "nothing may be provisioned"
