"""Whether a scheduled run may start: the first scheduled run of an installation is a decision.

Why: Airflow creates a run for the schedule's latest tick as soon as a DAG is unpaused (``catchup=False``
still runs the most recent one), so switching ``bakeoff`` on would at once start a run of whatever
plan the Variable ``bakeoff_plan`` names, a paid one for a cloud plan. Scheduled runs therefore go on
only from the date in the Variable ``bakeoff_schedule_from`` on; until it is set none does. Runs
started by hand (the trigger form, the REST API) are not gated: they are decisions already.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

VARIABLE = "bakeoff_schedule_from"
SCHEDULED = "scheduled"  # Airflow's DagRunType.SCHEDULED


def schedule_from(value: str | None) -> datetime | None:
    """The Variable's value as a UTC instant (a date means its midnight UTC); None when unset."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        when = (
            datetime.fromisoformat(text)
            if "T" in text or " " in text
            else datetime.combine(date.fromisoformat(text), datetime.min.time())
        )
    except ValueError:
        raise ValueError(
            f"Variable {VARIABLE}: {text!r} is not a date; use YYYY-MM-DD (UTC), e.g. the first day of next month"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def refusal(run_type: object, run_after: datetime, value: str | None) -> str | None:
    """None when the run may go on; else why this scheduled run starts nothing, naming the fix."""
    if getattr(run_type, "value", run_type) != SCHEDULED:  # Airflow gives a DagRunType enum or its string
        return None
    start = schedule_from(value)
    if start is None:
        return (
            f"scheduled run skipped: Variable {VARIABLE} is unset; set it to the date (YYYY-MM-DD, UTC) "
            "from which scheduled runs may start (docs/production.md, Change the schedule)"
        )
    due = run_after if run_after.tzinfo else run_after.replace(tzinfo=UTC)
    if due < start:
        return f"scheduled run skipped: due {due.isoformat()}, before Variable {VARIABLE} ({start.isoformat()})"
    return None
