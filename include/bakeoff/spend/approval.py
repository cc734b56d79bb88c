"""Approval before spend: which runs a person must approve before any node is provisioned, what they
are shown, and the record of their answer.

Per installation (Airflow Variables, which only whoever runs the installation sets):
  bakeoff_approval_threshold_usd   runs whose estimated billed spend is above it need approval
                                   (unset: no threshold)
  bakeoff_approvers                the approving role's members: a JSON list of Airflow user ids
                                   (or {"id", "name"} objects); Airflow's HITL API refuses anyone else
  bakeoff_approval_timeout_h       how long a request waits (default 24 h); no answer rejects
Whatever the threshold, the first scheduled run of a plan that bills money waits for approval, so
unpausing the DAG never silently starts a paid monthly run. Only billed spend counts: emulated
targets and existing endpoints cost nothing.

The decision is made once at admission (bakeoff.run.admission, from start_run) and kept in the start
record (``approval_needed``, with the plan's content digest); the approval step (the DAG's HITL task)
writes the ``approval`` record (who, when, what was shown), signed with a key derived from the
installation secret for this purpose only and bound to the run and the plan's digest. provision
refuses to start a node of a run that needs approval unless its record is ``approved``, its signature
holds and the plan it approved is the plan the run holds: a record written by hand, copied from
another run, or a plan changed after the answer gets nothing provisioned. A scheduled run counts as
approved before only with a signed approval of the same plan content, so raising a plan's budget
under the same name asks again. Light imports only: the report and the DAG layer use this module.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bakeoff import secrets, store
from bakeoff.core.facts import Approval, ApprovalNeed, BudgetEstimate, BudgetRow, Start
from bakeoff.core.numbers import as_float

if TYPE_CHECKING:
    from bakeoff.plan import Plan

THRESHOLD_VARIABLE = "bakeoff_approval_threshold_usd"
APPROVERS_VARIABLE = "bakeoff_approvers"
TIMEOUT_VARIABLE = "bakeoff_approval_timeout_h"
DEFAULT_TIMEOUT_H = 24.0
MAX_TIMEOUT_H = 24 * 14
RECORD = Approval.STEP
APPROVED, REJECTED, TIMED_OUT, REFUSED, PENDING, NOT_REQUIRED = (
    "approved",
    "rejected",
    "timed out",
    "refused",
    "pending",
    "not required",
)


class ApprovalError(ValueError):
    """An installation setting that cannot be used, or a run that may not spend yet; says how to fix it."""


def billed_usd(estimate: BudgetEstimate | Mapping[str, object]) -> float:
    """The estimate's spend on targets that bill money (the budget guard's rows with ``spends``); a
    start record's JSON is read as the estimate it holds."""
    rows = BudgetEstimate.model_validate(estimate).targets
    return round(sum(r.usd or 0.0 for r in rows if r.spends), 2)


def _number(raw: object, name: str, low: float, high: float) -> float | None:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    value = as_float(raw)
    if not (math.isfinite(value) and low <= value <= high):
        raise ApprovalError(f"Variable {name}: {raw!r} is not a number from {low:g} to {high:g}; fix or delete it")
    return value


def plan_digest(plan: Plan | dict[str, Any]) -> str:
    """SHA-256 of the plan's content as the run holds it (plan.json: the plan with its price sheet and
    overrides applied), keys sorted: what an approval is bound to."""
    doc = plan if isinstance(plan, dict) else plan.model_dump(mode="json")
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def requirement(
    plan: Plan, estimate: BudgetEstimate, threshold_raw: object = None, scheduled: bool = False
) -> ApprovalNeed:
    """Whether this run needs a person's approval before spending, and why (kept in the start record)."""
    spend = billed_usd(estimate)
    threshold = _number(threshold_raw, THRESHOLD_VARIABLE, 0, 1e9)
    digest = plan_digest(plan)

    def need(required: bool, reason: str) -> ApprovalNeed:
        return ApprovalNeed(
            required=required, spend_usd=spend, threshold_usd=threshold, plan_sha256=digest, reason=reason
        )

    if spend <= 0:
        return need(False, "nothing billed (emulated targets or existing endpoints)")
    if threshold is not None and spend > threshold:
        return need(
            True, f"estimated spend {spend:g} USD is above the threshold of {threshold:g} USD ({THRESHOLD_VARIABLE})"
        )
    if scheduled and not _scheduled_run_approved_before(plan.name, digest):
        return need(True, f"first scheduled run of plan {plan.name} that bills money, as its content now reads")
    limit = f"at most the threshold of {threshold:g} USD" if threshold is not None else "no threshold set"
    return need(False, f"estimated spend {spend:g} USD, {limit}")


def _scheduled_run_approved_before(plan_name: str, digest: str) -> bool:
    """A scheduled run of the same plan content whose approval record is signed by this installation."""
    return any(
        r.start.scheduled and _approved_why_not(r.approval, str(r.start.run_id), digest) is None
        for r in store.list_runs(plan_name)
    )


def approvers(raw: object) -> list[dict[str, str]]:
    """The approving role's members as Airflow HITL users ({"id", "name"}); refuses an empty role."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
    users = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, str) and item.strip():
            users.append({"id": item.strip(), "name": item.strip()})
        elif isinstance(item, dict) and str(item.get("id") or "").strip():
            uid = str(item["id"]).strip()
            users.append({"id": uid, "name": str(item.get("name") or uid)})
    if not users:
        raise ApprovalError(
            f"Variable {APPROVERS_VARIABLE}: this run needs approval before spending, and no approver is set; "
            'set it to a JSON list of the Airflow user ids who may approve spend, e.g. ["alice", "bob"]'
        )
    return users


def timeout_h(raw: object) -> float:
    return _number(raw, TIMEOUT_VARIABLE, 0.01, MAX_TIMEOUT_H) or DEFAULT_TIMEOUT_H


def _md(value: object) -> str:
    """Plan text (untrusted) as literal Markdown: characters that would start HTML, a link, emphasis or a
    table cell mid-line are escaped (Markdown shows the character itself)."""
    return re.sub(r"([\\`*_\[\]<>|&!])", r"\\\1", str(value))


def prediction_text(row: BudgetRow) -> str:
    """Where a target's estimate comes from: the calibrated twin's prediction, or "no prediction" (the
    pessimistic model, with the twin's reason) where the twin has no calibration for it."""
    basis = row.basis or ""
    if basis.startswith("twin"):
        return "predicted by the " + basis
    reason = basis.removeprefix("pessimistic").strip(" ()") or "no twin estimate recorded"
    return f"no prediction ({reason}); pessimistic model"


def spend_band(budget: BudgetEstimate) -> tuple[float, float]:
    """The billed spend's band: serving time at its prediction (each row's ``usd_low``) to the estimate
    with its margin (``usd``); rows recorded before ``usd_low`` existed fall back to the guard's margin."""
    high = billed_usd(budget)
    low = sum(
        r.usd_low if r.usd_low is not None else (r.usd or 0.0) / (1 + budget.margin) for r in budget.targets if r.spends
    )
    return round(min(low, high), 2), high


def request_text(run: Start) -> tuple[str, str]:
    """The subject and body (Markdown) an approver is shown: the plan, each target with the twin's
    predicted spend and band (or "no prediction"), and the run's spend band."""
    budget, need = run.budget, run.approval_needed
    rows = budget.targets
    low, spend = spend_band(budget)

    def usd(r: BudgetRow) -> str:
        if not r.spends:
            return "0 (not billed)"
        return f"{r.usd} (band {'?' if r.usd_low is None else r.usd_low} to {r.usd})"

    lines = [
        f"**Plan** {_md(run.plan)}, run {_md(run.run_id)}",
        f"**Why approval**: {_md(need.reason)}",
        "",
        "| target | provider | USD/h | hours | USD (band) | estimate from |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| {_md(r.target)} | {_md(r.provider)} | {r.usd_per_hour} | {r.hours} | "
            f"{usd(r)} | {_md(prediction_text(r))} |"
            for r in rows
        ),
        "",
        f"**Estimated spend**: {spend:g} USD billed (band {low:g} to {spend:g} USD: serving time at the "
        "twin's prediction, then with its margin; the pessimistic model's fixed margin where there is no "
        f"prediction); cap {budget.cap_usd} USD. Each node's kill switch stops it at its budgeted hours.",
        "Nothing is provisioned until this is approved; Reject, or no answer before the timeout, ends the run "
        "without spending.",
    ]
    return f"Approve {spend:g} USD for bake-off {run.plan}?", "\n".join(lines)


SIGNING_PURPOSE = "approval-record"  # the derived key's domain: it signs approval records only


def _signature(run_id: str, digest: str, decision: str, by: object) -> str:
    """HMAC over what an answer means (this run, this plan content, this decision, this person)."""
    body = json.dumps([run_id, digest, decision, by], sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secrets.purpose_key(SIGNING_PURPOSE), body, hashlib.sha256).hexdigest()


def record(run_dir: str | store.StorePath, decision: str, **facts: Any) -> None:
    """The run's approval record: its latest state (pending, then the decision), signed by the
    installation and bound to the run and the digest of the plan it holds."""
    run_id = str(store.run_facts(run_dir).start.run_id)
    digest = plan_digest(store.read_json(store.at(run_dir) / "plan.json") or {})
    signed = {"run_id": run_id, "plan_sha256": digest}
    signed["signature"] = _signature(run_id, digest, decision, facts.get("by"))
    store.record(run_dir, RECORD, {"decision": decision, "recorded_at": time.time(), **facts, **signed})


def _approved_why_not(got: Approval | None, run_id: str, digest: str) -> str | None:
    """None when ``got`` is this installation's signed approval of this run and plan content, else why not."""
    if got is None:
        return "none"
    if got.decision != APPROVED:
        return repr(got.decision)
    want = _signature(run_id, digest, APPROVED, got.by)
    if not hmac.compare_digest(str(got.signature or ""), want):
        if got.run_id == run_id and got.plan_sha256 not in (None, digest):
            return "an approval of other plan content (the plan changed after it was approved)"
        return "an approval record this installation did not sign (written by hand, or for another run)"
    return None


def ensure_approved(run_dir: str | store.StorePath) -> None:
    """Refuse to provision for a run that needs approval and has no signed approval of the plan it
    holds now (called before any cloud call)."""
    run = store.run_facts(run_dir)
    need = run.start.approval_needed
    if not need.required:
        return
    digest = plan_digest(store.read_json(store.at(run_dir) / "plan.json") or {})
    admitted = need.plan_sha256
    if admitted and admitted != digest:
        raise ApprovalError(
            "approval: the run's plan.json is not the plan admitted at its start (its content digest changed); "
            "nothing is provisioned. Start a new run of the plan as it should run"
        )
    why = _approved_why_not(run.approval, str(run.start.run_id), digest)
    if why is not None:
        raise ApprovalError(
            f"approval: this run needs a person's approval before spending ({need.reason}) and has "
            f"{why}; nothing is provisioned. Approve its approve_spend task in Airflow (Required actions), "
            "or start it again"
        )


def approval_line(approval: dict[str, Any] | None) -> str:
    """One approval record in words (the report and ``bakeoff verify`` print it)."""
    if not approval:
        return "no approval step recorded"
    decision = approval.get("decision")
    if decision == NOT_REQUIRED:
        return f"not required: {approval.get('reason')}"
    who = approval.get("by") or {}
    at = approval.get("at") or approval.get("recorded_at")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(at))) if at else "?"
    by = f" by {who.get('name') or who.get('id')}" if who else ""
    shown = f"; shown: {approval.get('spend_usd')} USD estimated" if approval.get("spend_usd") is not None else ""
    return f"{decision}{by} at {when}{shown}"
