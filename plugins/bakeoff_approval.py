"""The spend approval step: Airflow's HITL ApprovalOperator, asked only when the run needs it.

Right after the budget guard (start_run) and before anything is provisioned. start_run decided
whether a person must approve (bakeoff.spend.approval: above the installation's threshold, or the first
scheduled run of a plan that bills money); when not, this step records why and is skipped. When
so, it asks the approving role's members (Variable ``bakeoff_approvers``, passed to Airflow as the
task's ``assigned_users``, so Airflow's API answers anyone else 403), showing the plan, each target
and the estimated spend with its band, and waits in Airflow's ``awaiting_input`` state (no worker
held). No answer before the timeout rejects. Reject, a timeout, or an answer from anyone outside the
role fails the step, so no target is provisioned (provision checks the record again); every outcome
is written to the run's ``approval`` record: who, when, and what was shown.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator

TASK_ID = "approve_spend"


class NotAnApprover(PermissionError):
    """An answer from someone outside the approving role (possible only where the auth manager lets
    every user answer, e.g. SimpleAuthManager's all-admins mode)."""


class SpendApproval(ApprovalOperator):
    """Approve or reject a run's spend; ``run_dir`` is templated from start_run's result."""

    template_fields = (*ApprovalOperator.template_fields, "run_dir")

    def __init__(self, *, run_dir: str, **kwargs: Any) -> None:
        super().__init__(
            subject="Approve this bake-off's spend?",
            body="(the plan, its targets and the estimated spend are filled in when the run starts)",
            fail_on_reject=True,  # a rejected run must provision nothing: its downstream fails, never runs
            **kwargs,
        )
        self.run_dir = run_dir

    def execute(self, context: Any) -> Any:
        from airflow.sdk import Variable  # noqa: PLC0415 - read when the step runs, never while parsing
        from airflow.sdk.exceptions import AirflowSkipException  # noqa: PLC0415

        from bakeoff import store  # noqa: PLC0415
        from bakeoff.spend import approval  # noqa: PLC0415

        start = store.run_facts(self.run_dir).start
        need = start.approval_needed
        if not need.required:
            approval.record(self.run_dir, approval.NOT_REQUIRED, reason=need.reason)
            raise AirflowSkipException(f"no approval needed: {need.reason}")
        users = approval.approvers(Variable.get(approval.APPROVERS_VARIABLE, default=None))
        hours = approval.timeout_h(Variable.get(approval.TIMEOUT_VARIABLE, default=None))
        self.subject, self.body = approval.request_text(start)
        self.assigned_users = users
        self.response_timeout = timedelta(hours=hours)
        approval.record(
            self.run_dir,
            approval.PENDING,
            shown={"subject": self.subject, "body": self.body},
            approvers=users,
            spend_usd=need.spend_usd,
            reason=need.reason,
            timeout_h=hours,
        )
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from bakeoff import store  # noqa: PLC0415
        from bakeoff.spend import approval  # noqa: PLC0415

        asked = store.run_facts(self.run_dir).approval or approval.Approval(decision=approval.PENDING)
        kept = asked.model_dump(mode="json", include={"shown", "approvers", "spend_usd", "reason"})
        if "error" in event:
            decision = approval.TIMED_OUT if event.get("error_type") == "timeout" else "failed"
            approval.record(self.run_dir, decision, at=time.time(), error=str(event.get("error")), **kept)
            return super().execute_complete(context, event)  # raises HITLTimeoutError / HITLTriggerEventError
        by = dict(event.get("responded_by_user") or {})
        at = event.get("responded_at")
        when = at.timestamp() if hasattr(at, "timestamp") else time.time()
        allowed = {str(u.get("id")) for u in asked.approvers or []}
        if str(by.get("id")) not in allowed:
            approval.record(self.run_dir, approval.REFUSED, by=by, at=when, **kept)
            raise NotAnApprover(
                f"approve_spend: {by.get('name') or by.get('id')!r} is not among the approvers "
                f"({approval.APPROVERS_VARIABLE}); the run is not approved and nothing is provisioned"
            )
        chosen = list(event.get("chosen_options") or [])
        decision = approval.APPROVED if chosen == [self.APPROVE] else approval.REJECTED
        approval.record(self.run_dir, decision, by=by, at=when, **kept)
        return super().execute_complete(context, event)  # HITLRejectException on Reject
