"""Runs one of the browser tests' approval DAGs with Airflow's own ``dag.test()`` against the
api-server's database: start_run records each case's run (a cloud plan above a 100 USD threshold),
the real approval step writes its request and parks in ``awaiting_input``; an answer given in the
browser (Airflow's HITL API) resumes it. With ``--sweep``, the scheduler's awaiting-input timeout
sweep (``SchedulerJobRunner.check_awaiting_input_timeouts``) runs every second, as a scheduler would.

Usage (the api-server's environment): approval_runner.py DAG_ID CASE [CASE ...] [--sweep]
Prints one JSON line {"conf": {case: run_dir}} once the runs are recorded.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CLOUD_PLAN = "mi355x-vs-b200"  # two list-priced cloud nodes: a few hundred USD billed


def _plan_without_secrets() -> str:
    """The cloud plan without its serving secrets (its floating image tags may not carry them)."""
    raw = yaml.safe_load((ROOT / "include" / "plans" / f"{CLOUD_PLAN}.yaml").read_text())
    for t in raw["targets"]:
        t.pop("secrets", None)
    path = Path(tempfile.mkdtemp(prefix="approval-plan-")) / f"{CLOUD_PLAN}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _sweep_forever() -> None:
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    me = types.SimpleNamespace(log=__import__("logging").getLogger("awaiting-input-sweep"))
    while True:
        SchedulerJobRunner.check_awaiting_input_timeouts(me)
        time.sleep(1)


def main(argv: list[str]) -> None:
    sweep = "--sweep" in argv
    dag_id, *cases = [a for a in argv if a != "--sweep"]
    from bakeoff.run import pipeline

    plan = _plan_without_secrets()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    conf = {
        case: pipeline.start_run(plan, f"manual__{case}-{stamp}", approval_threshold_usd="100")["run_dir"]
        for case in cases
    }
    print(json.dumps({"conf": conf}), flush=True)
    from airflow.dag_processing.dagbag import DagBag

    sys.path.insert(0, str(ROOT / "plugins"))  # the approval step's module, as Airflow's workers see it
    bag = DagBag(dag_folder=str(Path(__file__).with_name("dags")))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags[dag_id]
    if sweep:
        threading.Thread(target=_sweep_forever, daemon=True).start()
    dag.test(run_conf=conf)


if __name__ == "__main__":
    main(sys.argv[1:])
