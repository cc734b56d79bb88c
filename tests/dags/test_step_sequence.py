"""The DAG and `bakeoff run` run the same steps in the same order: the DAG's tasks as the parsed DagBag
has them, beside the steps the CLI's loop calls (every bakeoff.run step function it reaches recorded,
nothing run), both from the one declared sequence (bakeoff.run.steps)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag

from bakeoff import cli
from bakeoff.run import steps
from tests.conftest import ROOT

GROUP = "target."


def dag_order() -> list[str]:
    """The bakeoff DAG's task ids in dependency order (ties by name), the task group's prefix dropped,
    Airflow's own tasks (steps.ORCHESTRATION) left out."""
    dag = DagBag(dag_folder=str(ROOT / "dags" / "bakeoff_dag.py")).dags["bakeoff"]
    upstream = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    order: list[str] = []
    while upstream:
        ready = sorted(t for t, up in upstream.items() if not up - set(order))
        assert ready, f"a cycle among {sorted(upstream)}"
        order.append(ready[0])
        del upstream[ready[0]]
    names = [t.removeprefix(GROUP) for t in order]
    return [n for n in names if n not in steps.ORCHESTRATION]


def cli_order(
    monkeypatch, targets: list[str], fail: dict[str, str] | None = None, **answer: Any
) -> tuple[int, list[tuple[str, str]]]:
    """Run `bakeoff run`'s loop with every step's bakeoff.run function replaced by a recorder:
    (its exit status, (step, target or "") for each step called, in order). ``fail``: step -> the
    target it raises for ("" for a run step); ``answer``: a function's return value instead of the usual."""
    called: list[tuple[str, str]] = []
    answers: dict[str, Any] = {
        "start_run": {"run_dir": "run", "targets": targets, "approval_required": False},
        "approval_needed": None,
        "node_slot": True,
        "report": {"html": "report.html"},
        "publish": {"files": {"evidence": "evidence.zip"}},
        **answer,
    }
    by_call = {s.call: s.name for s in steps.SEQUENCE}
    target_calls = {s.call for s in steps.PER_TARGET}

    def recorder(call: str):
        def record(*args: Any, **_: Any) -> Any:
            who = str(args[1]) if call in target_calls else ""
            called.append((by_call[call], who))
            if (fail or {}).get(by_call[call]) == who:
                raise RuntimeError(f"{by_call[call]} failed")
            return answers.get(call, {"step": call})

        return record

    for s in steps.SEQUENCE:
        monkeypatch.setattr(importlib.import_module(f"bakeoff.run.{s.module}"), s.call, recorder(s.call))
    monkeypatch.setattr(cli, "_print_summary", lambda *_: None)
    rc = cli.run_steps("local-demo", "r1", targets, cli.Progress(), slot_poll_s=0)
    return rc, called


def test_the_declared_steps_name_distinct_tasks_and_step_functions():
    names = [s.name for s in steps.SEQUENCE]
    assert len(set(names)) == len(names)
    assert len({s.call for s in steps.SEQUENCE}) == len(names)
    assert not set(names) & set(steps.ORCHESTRATION)
    for s in steps.SEQUENCE:
        assert callable(steps.function(s)), s.call
        assert all(names.index(t) < names.index(s.name) for t in s.takes), f"{s.name} takes a later step"
    assert [s.role for s in steps.PER_TARGET].count("setup") == 1


def test_the_dag_and_bakeoff_run_run_the_same_steps(monkeypatch, capsys):
    """One target: the CLI's steps, in order, are the DAG's (neither has a step the other lacks)."""
    dag = dag_order()
    rc, called = cli_order(monkeypatch, ["t1"])
    ran = [name for name, _ in called]
    assert rc == 0
    assert ran == dag, (
        f"only the DAG: {sorted(set(dag) - set(ran))}; only bakeoff run: {sorted(set(ran) - set(dag))}\n"
        f"DAG:          {dag}\nbakeoff run:  {ran}"
    )
    assert dag == steps.order()


def test_bakeoff_run_takes_each_target_through_every_target_step(monkeypatch, capsys):
    rc, called = cli_order(monkeypatch, ["t1", "t2"])
    per_target = [s.name for s in steps.PER_TARGET]
    assert rc == 0
    assert [n for n, who in called if who == "t1"] == per_target
    assert [n for n, who in called if who == "t2"] == per_target
    assert [n for n, who in called if not who] == [s.name for s in (*steps.BEFORE, *steps.AFTER)]


def test_a_failed_target_is_torn_down_and_the_run_steps_still_run(monkeypatch, capsys):
    """As in the DAG: terminate is a teardown, sweep to report are all_done, publish follows report."""
    rc, called = cli_order(monkeypatch, ["t1"], fail={"deploy": "t1"})
    ran = [name for name, _ in called]
    assert rc == 1
    assert ran[ran.index("deploy") + 1 :] == ["terminate", *(s.name for s in steps.AFTER)]


@pytest.mark.parametrize("failing", ["validate", "report"])
def test_a_failed_run_step_stops_only_what_needs_it(monkeypatch, capsys, failing):
    rc, called = cli_order(monkeypatch, ["t1"], fail={failing: ""})
    ran = [name for name, who in called if not who]
    assert rc == 1
    after = [s.name for s in steps.AFTER]
    assert ran[2:] == (after if failing == "validate" else after[:-1])  # publish takes the report's files


def test_a_run_that_needs_approval_stops_before_any_target_step(monkeypatch, capsys):
    rc, called = cli_order(monkeypatch, ["t1"], approval_needed={"required": True, "reason": "over 1 USD"})
    assert rc == 2
    assert called == [("start_run", ""), ("approve_spend", "")]
    assert "cannot ask for it, so nothing is provisioned" in capsys.readouterr().err
