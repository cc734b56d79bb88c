"""bakeoff_reaper: the last line of defence against leaked instances.

Hourly, on every configured provider, terminates instances tagged by bakeoff whose run has ended
(the bakeoff DAG run's state, asked through the Task SDK) or whose expiry has passed, and logs what
it did. Every cloud is tried; the task fails when any cloud (or region) could not be scanned or a
node could not be terminated, so a blind pass is never green.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task


@dag(
    dag_id="bakeoff_reaper",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "bakeoff", "retries": 2, "retry_delay": pendulum.duration(minutes=2)},
    tags=["bakeoff", "cleanup"],
    doc_md=__doc__,
)
def bakeoff_reaper():
    @task
    def reap():
        # run time only: the DAG file parses without the library, Airflow's task runner or the hooks
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        from bakeoff.airflow_api import DAG_ID
        from bakeoff.cleanup import reaper
        from bakeoff_connections import configured_providers, masked, resolve

        def run_state(plan: str, run_id: str) -> str | None:
            return RuntimeTaskInstance.get_dagrun_state(dag_id=DAG_ID, run_id=run_id)

        out = reaper.reap(provider_names=configured_providers(), credentials_fn=masked(resolve), run_state=run_state)
        if out["errors"]:  # a cloud that could not be scanned may hold billing nodes: the task must not be green
            raise RuntimeError(
                f"reaper: {len(out['terminated'])} terminated, but could not scan or terminate: "
                + "; ".join(f"{where}: {why}" for where, why in out["errors"].items())
            )
        return out

    reap()


bakeoff_reaper()
