"""Approval before spend holds: a run above the installation's threshold, or the first scheduled run
of a plan that bills money, provisions nothing until a member of the approving role approves; a
reject, a timeout or an answer from anyone outside the role ends it without spending, and every
outcome (who, when, what was shown) is in the run's record.

The approval step is the DAG's own operator (plugins/bakeoff_approval.py) on a run start_run really
recorded; Airflow's part (writing the request, parking the task, resuming it with the answer) is the
event its scheduler or API hands execute_complete, built here as Airflow builds it
(HITLDetail.as_resume_event_payload, the scheduler's timeout event).
"""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime

import pytest
import yaml
from airflow.providers.standard.exceptions import HITLRejectException, HITLTimeoutError
from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk.exceptions import AirflowSkipException

from bakeoff import store
from bakeoff.core import facts
from bakeoff.run import pipeline, provisioning
from bakeoff.spend import approval
from bakeoff.spend.approval import ApprovalError
from tests.conftest import ROOT

CLOUD_PLAN = "mi355x-vs-b200"  # two list-priced cloud nodes: a few hundred USD billed


@pytest.fixture
def cloud_plan(tmp_path) -> str:
    """The cloud plan without its serving secrets: its recipe images are floating tags, which the
    installation refuses secrets (a rule of its own, tests/security/test_secrets_trust.py)."""
    raw = yaml.safe_load((ROOT / "include" / "plans" / f"{CLOUD_PLAN}.yaml").read_text())
    for t in raw["targets"]:
        t.pop("secrets", None)
    path = tmp_path / f"{CLOUD_PLAN}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


ALICE = {"id": "alice", "name": "Alice Approver"}


def _operator_module():
    spec = importlib.util.spec_from_file_location(
        "bakeoff_approval_under_test", ROOT / "plugins" / "bakeoff_approval.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def asked(data_root, monkeypatch, cloud_plan):
    """A cloud run above a 100 USD threshold, its approval step asked of the role {alice}."""
    monkeypatch.setenv("AIRFLOW_VAR_BAKEOFF_APPROVERS", '["alice"]')
    run = pipeline.start_run(cloud_plan, "manual__approval", approval_threshold_usd="100")
    assert run["approval_required"] is True
    mod = _operator_module()
    op = mod.SpendApproval(task_id="approve_spend", run_dir=run["run_dir"])
    seen = {}

    def parked(self, context):  # Airflow writes the request and parks the task here
        seen.update(subject=self.subject, body=self.body, users=self.assigned_users, timeout=self.response_timeout)

    monkeypatch.setattr(HITLOperator, "execute", parked)
    op.execute({})
    return {"op": op, "run_dir": run["run_dir"], "seen": seen, "mod": mod}


def _answer(option: str, user: dict) -> dict:
    return {
        "chosen_options": [option],
        "params_input": {},
        "responded_at": datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
        "responded_by_user": user,
        "timedout": False,
    }


def test_the_request_shows_plan_targets_and_spend_to_the_role_only(asked):
    seen, rec = asked["seen"], store.read_record(asked["run_dir"], approval.RECORD)
    assert seen["users"] == [{"id": "alice", "name": "alice"}]
    assert seen["timeout"].total_seconds() == approval.DEFAULT_TIMEOUT_H * 3600
    assert CLOUD_PLAN in seen["body"] and "Estimated spend" in seen["body"] and "band" in seen["body"]
    start = store.read_record(asked["run_dir"], store.START)
    for row in start["budget"]["targets"]:
        assert f"| {row['target']} |" in seen["body"]
    _, body = approval.request_text(facts.Start(plan="<img src=x onerror=alert(1)>", budget={"targets": []}))
    assert "<img" not in body.replace("\\<", "") and "\\<img src=x onerror=alert(1)\\>" in body
    assert rec["decision"] == approval.PENDING and rec["shown"]["body"] == seen["body"]
    with pytest.raises(ApprovalError, match="has 'pending'; nothing is provisioned"):
        provisioning.provision(asked["run_dir"], start["budget"]["targets"][0]["target"])


def test_the_request_shows_the_twins_predicted_spend_and_band_or_no_prediction(asked):
    start = store.read_record(asked["run_dir"], store.START)
    rows = start["budget"]["targets"]
    body = asked["seen"]["body"]
    for row in rows:  # each target: the estimate with its band, and where it comes from
        assert f"{row['usd']} (band {row['usd_low']} to {row['usd']})" in body
        assert "predicted by the twin (" in body
    low = round(sum(r["usd_low"] for r in rows if r["spends"]), 2)
    assert f"band {low:g} to {approval.billed_usd(start['budget']):g} USD" in body
    uncalibrated = dict(rows[0], basis="pessimistic (no calibration rows for gpu h100)", usd_low=10.0, usd=20.0)
    _, body = approval.request_text(facts.Start(plan="p", budget={"targets": [uncalibrated], "margin": 0.25}))
    assert "no prediction (no calibration rows for gpu h100); pessimistic model" in body
    assert "band 10 to 20 USD" in body
    old_row = {k: v for k, v in uncalibrated.items() if k not in ("basis", "usd_low")}  # recorded before either
    _, body = approval.request_text(facts.Start(plan="p", budget={"targets": [old_row], "margin": 0.25}))
    assert "no prediction (no twin estimate recorded)" in body and "band 16 to 20 USD" in body


def test_approve_records_who_and_lets_provisioning_start(asked):
    out = asked["op"].execute_complete({}, _answer("Approve", ALICE))
    assert out["chosen_options"] == ["Approve"]
    rec = store.read_record(asked["run_dir"], approval.RECORD)
    assert rec["decision"] == approval.APPROVED and rec["by"] == ALICE
    assert (
        rec["at"] == datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp() and "Estimated spend" in rec["shown"]["body"]
    )
    approval.ensure_approved(asked["run_dir"])  # no error: provision may go on
    assert "approved by Alice Approver at 2026-12-01 12:00 UTC" in approval.approval_line(rec)


def test_reject_fails_the_step_and_nothing_is_provisioned(asked):
    with pytest.raises(HITLRejectException):
        asked["op"].execute_complete({}, _answer("Reject", ALICE))
    assert store.read_record(asked["run_dir"], approval.RECORD)["decision"] == approval.REJECTED
    with pytest.raises(ApprovalError, match="has 'rejected'"):
        approval.ensure_approved(asked["run_dir"])


def test_no_answer_before_the_timeout_rejects(asked):
    event = {"error": "The Human-in-the-loop response timeout has passed without a response.", "error_type": "timeout"}
    with pytest.raises(HITLTimeoutError):
        asked["op"].execute_complete({}, event)
    assert store.read_record(asked["run_dir"], approval.RECORD)["decision"] == approval.TIMED_OUT
    with pytest.raises(ApprovalError, match="has 'timed out'"):
        approval.ensure_approved(asked["run_dir"])


def test_an_approval_from_outside_the_role_is_refused(asked):
    """Airflow's API answers a user outside assigned_users 403; where the auth manager lets everyone
    answer (all-admins mode), the step itself refuses the answer."""
    with pytest.raises(asked["mod"].NotAnApprover, match="'mallory' is not among the approvers"):
        asked["op"].execute_complete({}, _answer("Approve", {"id": "mallory", "name": "mallory"}))
    rec = store.read_record(asked["run_dir"], approval.RECORD)
    assert rec["decision"] == approval.REFUSED and rec["by"]["id"] == "mallory"
    with pytest.raises(ApprovalError, match="has 'refused'"):
        approval.ensure_approved(asked["run_dir"])


def test_below_the_threshold_the_step_is_skipped(data_root, cloud_plan):
    run = pipeline.start_run(cloud_plan, "manual__cheap", approval_threshold_usd="100000")
    op = _operator_module().SpendApproval(task_id="approve_spend", run_dir=run["run_dir"])
    with pytest.raises(AirflowSkipException, match="no approval needed: estimated spend .* at most the threshold"):
        op.execute({})
    assert store.read_record(run["run_dir"], approval.RECORD)["decision"] == approval.NOT_REQUIRED
    approval.ensure_approved(run["run_dir"])


def test_first_scheduled_run_of_a_paid_plan_needs_approval_whatever_the_threshold(data_root, cloud_plan):
    plan = cloud_plan
    first = pipeline.start_run(plan, "scheduled__2026-12-01", approval_threshold_usd="100000", scheduled=True)
    assert first["approval_required"] is True
    reason = store.read_record(first["run_dir"], store.START)["approval_needed"]["reason"]
    assert reason.startswith("first scheduled run of plan")
    approval.record(first["run_dir"], approval.APPROVED, by=ALICE, at=1.0)
    second = pipeline.start_run(plan, "scheduled__2027-01-01", approval_threshold_usd="100000", scheduled=True)
    assert second["approval_required"] is False  # the threshold decides from now on
    demo = pipeline.start_run(str(ROOT / "include" / "plans" / "local-demo.yaml"), "scheduled__x", scheduled=True)
    assert demo["approval_required"] is False  # emulated: nothing billed


def test_bad_installation_settings_name_the_variable(data_root, monkeypatch, cloud_plan):
    plan = cloud_plan
    with pytest.raises(ApprovalError, match="Variable bakeoff_approval_threshold_usd: 'lots'"):
        pipeline.start_run(plan, "manual__bad", approval_threshold_usd="lots")
    with pytest.raises(ApprovalError, match="Variable bakeoff_approvers: .*no approver is set"):
        approval.approvers(None)
    with pytest.raises(ApprovalError, match="Variable bakeoff_approval_timeout_h"):
        approval.timeout_h("-1")
