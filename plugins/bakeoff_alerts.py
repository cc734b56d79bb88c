"""Alerts: a mail when a bake-off run fails or is still going at its deadline.

One notifier serves both: the DAG's ``on_failure_callback`` and the callback of its deadline alert.
The address is read when an alert fires, not at parse time (a Variable read while parsing costs a
metadata call per parse): the Airflow Variable ``bakeoff_alert_email``, else the environment's
``BAKEOFF_ALERT_EMAIL``. With neither set, an alert is a log line and nothing else. The mail goes
through the SMTP provider's connection (``smtp_default``, or ``[email] email_conn_id``), from the
Variable ``bakeoff_alert_from`` (else ``BAKEOFF_ALERT_FROM``, else bakeoff@localhost).

The deadline is cheap to compute at parse time because it cannot depend on the plan (only known
once the run starts): ``BAKEOFF_MAX_RUN_HOURS``, default the plan's default ``max_instance_hours``
(3 h, which the budget guard refuses any target's estimate to exceed, and at which each node's kill
switch powers it off) plus an hour for the run-level steps (sweep, validation, cost, report). An
installation that runs longer plans raises it.
"""

from __future__ import annotations

import html
import logging
import os
import sys
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseNotifier, DeadlineAlert, DeadlineReference, SyncCallback

log = logging.getLogger(__name__)

ALERT_VARIABLE, ALERT_ENV = "bakeoff_alert_email", "BAKEOFF_ALERT_EMAIL"
FROM_VARIABLE, FROM_ENV = "bakeoff_alert_from", "BAKEOFF_ALERT_FROM"
HOURS_ENV = "BAKEOFF_MAX_RUN_HOURS"
DEFAULT_MAX_RUN_HOURS = 3.0 + 1.0  # the plan's default max_instance_hours, plus the run-level steps


def _setting(variable: str, env: str) -> str | None:
    from airflow.sdk import Variable  # noqa: PLC0415 - read when an alert fires, never while parsing

    try:
        value = Variable.get(variable, default=None)
    except Exception as e:  # noqa: BLE001 - an alert must still go out on the environment's address
        log.warning("alert: could not read the Variable %s (%s); using $%s", variable, type(e).__name__, env)
        value = None
    return (value or os.environ.get(env) or "").strip() or None


def alert_address() -> str | None:
    """Where alerts go, or None when no alert is configured."""
    return _setting(ALERT_VARIABLE, ALERT_ENV)


def max_run_hours() -> float:
    """Hours after a run is queued at which it is overdue (see the module docstring)."""
    raw = os.environ.get(HOURS_ENV)
    if not raw:
        return DEFAULT_MAX_RUN_HOURS
    try:
        hours = float(raw)
    except ValueError:
        raise ValueError(f"{HOURS_ENV}={raw!r}: hours as a number, e.g. 6") from None
    if not 0 < hours <= 24 * 7:
        raise ValueError(f"{HOURS_ENV}={raw!r}: between 0 and 168 hours")
    return hours


def deadline_interval() -> timedelta:
    return timedelta(hours=max_run_hours())


def run_deadline() -> DeadlineAlert | None:
    """The DAG's deadline: RunAlert("deadline") once a run is still going ``max_run_hours`` after it
    was queued. None under ``airflow dags test`` (the demo, the end-to-end tests): its run is never
    queued, so there is no deadline to keep, and Airflow 3.3's test loop fails a finished run of a
    DAG that declares one (it looks the alerts up by id, and a test run's DAG holds none)."""
    if sys.argv[1:3] == ["dags", "test"]:
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=deadline_interval(),
        callback=SyncCallback(RunAlert, kwargs={"reason": "deadline"}),
    )


class RunAlert(BaseNotifier):
    """Mail the run's outcome (``reason``: failed, or past its deadline) to the alert address."""

    def __init__(self, reason: str = "failed", **kwargs: Any):
        super().__init__(**kwargs)
        self.reason = reason

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Nothing to render: the mail is built from the context (and a DAG callback's context holds
        a serialized DAG, which has no template environment)."""

    def notify(self, context: Any) -> None:
        to = alert_address()
        if not to:
            log.info("alert (%s): no %s Variable or $%s set; nothing sent", self.reason, ALERT_VARIABLE, ALERT_ENV)
            return
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier  # noqa: PLC0415 - only when one fires

        subject, body = message(self.reason, context)
        SmtpNotifier(
            to=to,
            from_email=_setting(FROM_VARIABLE, FROM_ENV) or "bakeoff@localhost",
            subject=subject,
            html_content=body,
        ).notify(context)
        log.info("alert (%s) sent to %s", self.reason, to)


def message(reason: str, context: Any) -> tuple[str, str]:
    """(subject, HTML body) from what a DAG callback or a deadline callback knows about the run."""
    run = context.get("dag_run")  # a DagRun (failure callback) or its API form, a dict (deadline callback)
    fact = run.get if isinstance(run, dict) else (lambda name: getattr(run, name, None))
    dag_id = fact("dag_id") or getattr(context.get("dag"), "dag_id", None) or "bakeoff"
    run_id = fact("run_id") or fact("dag_run_id") or context.get("run_id") or "?"
    what = "is past its deadline" if reason == "deadline" else "failed"
    subject = f"[bakeoff] {dag_id} run {run_id} {what}"
    why = context.get("reason") or ""
    body = (
        f"<p>The {html.escape(dag_id)} run <b>{html.escape(str(run_id))}</b> {what}.</p>"
        + (f"<p>{html.escape(str(why))}</p>" if why else "")
        + "<p>Its failed tasks and logs are in the Airflow UI; everything measured is kept in the results store.</p>"
    )
    return subject, body
