"""bakeoff_reaper: the last line of defence against leaked instances.

Hourly, on every configured provider, terminates instances tagged by bakeoff whose run has ended
or whose expiry has passed, and logs what it did. Every cloud is tried; the task fails when any
cloud (or region) could not be scanned or a node could not be terminated, so a blind pass is never green.
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
    def reap() -> dict:
        from bakeoff_hooks import configured_providers, masked, resolve

        from bakeoff import reaper

        out = reaper.reap(provider_names=configured_providers(), credentials_fn=masked(resolve))
        if out["errors"]:  # a cloud that could not be scanned may hold billing nodes: the task must not be green
            raise RuntimeError(
                f"reaper: {len(out['terminated'])} terminated, but could not scan or terminate: "
                + "; ".join(f"{where}: {why}" for where, why in out["errors"].items())
            )
        return out

    reap()


bakeoff_reaper()
