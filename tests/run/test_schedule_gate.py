"""The schedule gate: a scheduled run goes on only from the Variable bakeoff_schedule_from on."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bakeoff.run.schedule_gate import VARIABLE, refusal, schedule_from

DEC = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_scheduled_run_with_the_variable_unset_starts_nothing_and_says_how_to_enable_it():
    for unset in (None, "", "  "):
        why = refusal("scheduled", DEC, unset)
        assert why and VARIABLE in why and "YYYY-MM-DD" in why


def test_a_scheduled_run_due_before_the_date_is_skipped_and_one_due_at_or_after_it_goes_on():
    assert "before Variable bakeoff_schedule_from" in refusal("scheduled", DEC, "2027-01-01")
    assert refusal("scheduled", datetime(2027, 1, 1, tzinfo=UTC), "2027-01-01") is None
    assert refusal("scheduled", datetime(2027, 2, 1), "2027-01-01") is None  # naive: UTC


def test_runs_started_by_hand_are_not_gated():
    for run_type in ("manual", "asset_triggered", "backfill"):
        assert refusal(run_type, DEC, None) is None


def test_the_date_may_carry_a_time_and_an_offset():
    assert schedule_from("2027-01-01T02:00:00+02:00") == datetime(2027, 1, 1, tzinfo=UTC)
    assert schedule_from("2027-01-01") == datetime(2027, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("bad", ["next month", "2027-13-01", "01/01/2027"])
def test_a_value_that_is_not_a_date_is_an_error_naming_the_variable_and_the_form(bad):
    with pytest.raises(ValueError, match=rf"Variable {VARIABLE}: .* use YYYY-MM-DD"):
        refusal("scheduled", DEC, bad)
