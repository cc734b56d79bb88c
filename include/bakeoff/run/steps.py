"""The steps of one bake-off, declared once, in order: the DAG's tasks and `bakeoff run` are both
derived from this sequence, so neither can run a step the other skips.

A run's steps come in three parts: ``BEFORE`` (once per run, before any target), ``PER_TARGET`` (the
DAG's task group ``target``, mapped over the run's targets; the CLI's loop over them, one after the
other) and ``AFTER`` (once per run, whatever happened to the targets). Each step names the function it
calls and its module in ``bakeoff.run`` (``function`` imports it when called); the outputs of earlier
steps it takes, by step name; and whether it waits (a sensor in the DAG, a loop of checks in the CLI).
``ORCHESTRATION`` names the DAG's tasks that are Airflow's own business and not steps of the run, each
with its reason.

Imported while the DAG file is parsed: this module imports nothing of the project, nor anything heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

# How a waiting step looks: "claim" asks once and answers True once it holds what it waits for (a
# node slot); "check" looks once and returns None while waiting, measuring its deadline from when the
# wait began (``since``).
Wait = Literal["claim", "check"]
# The DAG's trigger rules these steps use: after every upstream succeeded, or after every upstream ended.
TriggerRule = Literal["all_success", "all_done"]
# A per-target step that starts what needs tearing down (setup), or tears it down whatever happened (teardown).
Role = Literal["setup", "teardown"]
# The modules of bakeoff.run that hold the steps: the run's start, serving, benchmark and reporting steps
# (pipeline), the nodes brought up (provisioning) and taken down (teardown_steps).
Module = Literal["pipeline", "provisioning", "teardown_steps"]

DAY_S = 86_400


@dataclass(frozen=True)
class Step:
    """One step of a run: its name (the DAG's task id), the function it calls (``call`` in the ``module`` of
    bakeoff.run), the earlier steps whose outputs it takes (after ``run_dir`` and, per target, ``slug``),
    and how it runs."""

    name: str
    call: str
    module: Module = "pipeline"
    takes: tuple[str, ...] = ()
    wait: Wait | None = None
    # a wait's backstop in the DAG: one timeout for every map index, at the plan fields' ceilings (each
    # check enforces its own target's deadline)
    ceiling_s: float | None = None
    role: Role | None = None
    trigger_rule: TriggerRule = "all_success"
    retries: int | None = None  # None: the DAG's default
    credentials: bool = False  # reaches a provider: the caller passes its credentials resolver
    failed_steps: bool = False  # reads the run's failed steps (the DAG run's failed tasks, the CLI's own list)

    @property
    def per_target(self) -> bool:
        return self in PER_TARGET


BEFORE: tuple[Step, ...] = (
    # plan, price sheet, overrides, budget guard, start record
    Step("start_run", call="start_run", retries=0),
    # a person approves the spend before anything is provisioned, when the run needs it (the CLI cannot
    # ask anyone: it stops there, provisioning nothing)
    Step("approve_spend", call="approval_needed", retries=0),
)

PER_TARGET: tuple[Step, ...] = (
    # the target's nodes under its cloud's node limit (bakeoff.clusters.node_slots); terminate releases them
    Step("wait_slot", call="node_slot", module="provisioning", wait="claim", ceiling_s=DAY_S, retries=0),
    Step("provision", call="provision", module="provisioning", role="setup", credentials=True),
    # the node boots: ready_timeout_s at most
    Step(
        "wait_node",
        call="node_ready",
        module="provisioning",
        takes=("provision",),
        wait="check",
        ceiling_s=DAY_S,
        retries=0,
        credentials=True,
    ),
    Step("deploy", call="deploy", takes=("wait_node",), retries=0),
    # the server loads the model: deploy_timeout_s at most
    Step(
        "wait_serving",
        call="serving_ready",
        takes=("wait_node",),
        wait="check",
        ceiling_s=DAY_S,
        retries=0,
        credentials=True,
    ),
    Step("accuracy_gate", call="accuracy_gate", takes=("wait_serving",), retries=0),
    Step("benchmark", call="benchmark", takes=("wait_serving",), retries=0),
    # a co-located benchmark runs on the node: max_instance_hours at most
    Step(
        "wait_benchmark",
        call="benchmark_done",
        takes=("wait_serving", "benchmark"),
        wait="check",
        ceiling_s=2 * DAY_S,
        retries=0,
    ),
    Step(
        "terminate", call="terminate", module="teardown_steps", takes=("provision",), role="teardown", credentials=True
    ),
)

AFTER: tuple[Step, ...] = (
    # terminate every recorded id, then anything tagged with the run
    Step("sweep", call="sweep", module="teardown_steps", trigger_rule="all_done", credentials=True),
    Step("validate", call="validate", trigger_rule="all_done", retries=0),
    Step("cost", call="cost", trigger_rule="all_done"),
    Step("report", call="report", trigger_rule="all_done", failed_steps=True),
    # the evidence bundle, then the run's reports listed in the index pages
    Step("publish", call="publish", takes=("report",), failed_steps=True),
)

SEQUENCE: tuple[Step, ...] = (*BEFORE, *PER_TARGET, *AFTER)

# The DAG's tasks that are not steps of the run: `bakeoff run` has nothing to do for them.
ORCHESTRATION: dict[str, str] = {
    "schedule_gate": "a scheduled DAG run starts only from the Variable bakeoff_schedule_from on",
    "preflight": "the trigger form's optional pre-flight (the CLI's is its own command, bakeoff preflight)",
    "targets_of": "the items the task group is mapped over (the CLI loops over the run's targets)",
    "watcher": "fails the DAG run when a step failed (the CLI's exit status says it)",
}


def function(step: Step) -> Callable[..., Any]:
    """The function a step calls, its module imported here, at run time (never while the DAG file is parsed)."""
    return cast(Callable[..., Any], getattr(importlib.import_module(f"bakeoff.run.{step.module}"), step.call))


def order() -> list[str]:
    """The run's step names in order, the per-target ones once (as the DAG's task group lists them)."""
    return [s.name for s in SEQUENCE]
