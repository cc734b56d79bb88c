"""The browser tests' DAGs (tests/ui_browser only, never installed): the bakeoff DAG's own spend-approval
step (plugins/bakeoff_approval.py) on runs start_run recorded as needing approval, each followed by the
check provision makes before any cloud call, so a test sees whether the run may spend.

``bakeoff_approval_check`` asks three runs at once (approve, reject, an outsider's answer);
``bakeoff_approval_timeout`` asks one and nobody answers (its runner sets a short timeout).
Each run's folder comes in the DAG run's conf, keyed by the case.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task
from bakeoff_approval import SpendApproval


def _asks(cases: tuple[str, ...]) -> None:
    for case in cases:
        asked = SpendApproval(task_id=f"approve_{case}", run_dir=f"{{{{ dag_run.conf['{case}'] }}}}", retries=0)

        @task(task_id=f"provision_{case}", retries=0)
        def provision(run_dir: str) -> str:
            from bakeoff.spend import approval

            approval.ensure_approved(run_dir)  # what provisioning.provision checks before any cloud call
            return "provisioned"

        asked >> provision(f"{{{{ dag_run.conf['{case}'] }}}}")


@dag(dag_id="bakeoff_approval_check", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def approval_check():
    _asks(("approve", "reject", "outsider"))


@dag(dag_id="bakeoff_approval_timeout", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def approval_timeout():
    _asks(("timeout",))


approval_check()
approval_timeout()
