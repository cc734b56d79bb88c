"""Trace and log files give finite numbers in order, and the budget holds only finite, non-negative
figures (second review, N4).

Each test is an attempt that worked before: a trace whose timestamps go backwards gave negative think
times, the JSON reader took NaN and Infinity, deeply nested JSON raised RecursionError instead of a
file error, and ``budget.check`` / ``recheck`` compared a negative total with the cap and passed it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bakeoff.bench.client.workloads import MAX_JSON_DEPTH, WorkloadFileError, parse_json
from bakeoff.bench.sessions.session_sources import read_logs, read_trace
from bakeoff.plan import load_plan
from bakeoff.spend import budget


def _line(**fields) -> dict:
    return {"input_length": 1, "output_length": 4, "hash_ids": [1], **fields}


def _trace(tmp_path: Path, *lines: str) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_a_session_whose_time_goes_backwards_is_refused_naming_file_and_line(tmp_path):
    """Mixed timestamp and delay turns are not re-sorted: before, the third turn thought -0.5 s."""
    p = _trace(
        tmp_path,
        json.dumps(_line(session_id="s", timestamp=1000)),
        json.dumps(_line(session_id="s", delay=10)),
        json.dumps(_line(session_id="s", timestamp=500)),
    )
    with pytest.raises(WorkloadFileError, match=r"trace\.jsonl line 3: timestamp 500 ms is before .*\(1000 ms\)"):
        read_trace(p, 64)


def test_a_trace_in_order_still_reads(tmp_path):
    p = _trace(tmp_path, *(json.dumps(_line(session_id="s", timestamp=t)) for t in (0, 1500, 4000)))
    (s,) = read_trace(p, 64)
    assert [t.think_s for t in s.turns] == [0.0, 1.5, 2.5]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_a_trace_are_refused_naming_file_and_line(tmp_path, number):
    p = _trace(
        tmp_path,
        json.dumps(_line(timestamp=0)),
        f'{{"input_length": 1, "output_length": 4, "hash_ids": [1], "timestamp": {number}}}',
    )
    with pytest.raises(WorkloadFileError, match=r"trace\.jsonl:2: .* is not a finite number"):
        read_trace(p, 64)


def test_deeply_nested_json_is_a_file_error_not_a_crash(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    p = _trace(tmp_path, json.dumps(_line(timestamp=0)), '{"extra": ' + deep + "}")
    with pytest.raises(WorkloadFileError, match=rf"trace\.jsonl:2: nested more than {MAX_JSON_DEPTH} levels"):
        read_trace(p, 64)
    with pytest.raises(WorkloadFileError, match="nested more than"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "x.json")
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x.json") is not None


def test_a_log_whose_time_goes_backwards_or_is_not_finite_is_refused(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("conversation_id,turn,prompt_tokens,output_tokens,timestamp\nc,0,10,5,100\nc,1,30,5,40\n")
    with pytest.raises(WorkloadFileError, match=r"log\.csv line 3: .*conversation c.* before the previous turn"):
        read_logs(p, 64)
    p.write_text("conversation_id,turn,prompt_tokens,output_tokens,timestamp\nc,0,10,5,nan\n")
    with pytest.raises(WorkloadFileError, match=r"log\.csv line 2: timestamp must be a finite number"):
        read_logs(p, 64)


# --- the budget refuses what it cannot compare ---------------------------------------------------------


@pytest.mark.parametrize("total", [-514_278_529.0, math.nan, math.inf])
def test_a_negative_or_non_finite_estimate_is_refused(monkeypatch, total):
    plan = load_plan("mi355x-vs-b200-sandbox")
    real = budget.estimate

    def broken(p):  # what a backwards trace made of the estimate before it was refused at reading
        return {**real(p), "estimate_usd": total}

    monkeypatch.setattr(budget, "estimate", broken)
    with pytest.raises(budget.BudgetExceeded, match="not a finite amount >= 0"):
        budget.check(plan)


def test_a_relaunch_whose_remaining_time_came_out_negative_does_not_pass_the_cap(monkeypatch):
    """10 h billed at the guard price is over a 1,000 USD cap whatever the rest of the estimate says."""
    plan = load_plan("mi355x-vs-b200-sandbox")
    t = plan.targets[0]
    now = 1.8e9
    from bakeoff.core.facts import RunFacts

    run = RunFacts.from_records({}, {t.slug: {"provision": {"instance_id": "i-1", "launched_at": now - 10 * 3600}}})
    monkeypatch.setattr(budget, "target_hours", lambda p, target: -1e6)
    with pytest.raises(budget.BudgetExceeded, match="not a finite amount >= 0"):
        budget.recheck(plan, t.slug, run, now=now)
