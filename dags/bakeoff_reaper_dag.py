"""bakeoff_reaper: the last line of defence against leaked instances.

Hourly, on every configured provider, terminates instances tagged by bakeoff whose run has ended
or whose expiry has passed, and logs what it did.
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

        return reaper.reap(provider_names=configured_providers(), credentials_fn=masked(resolve))

    reap()


bakeoff_reaper()
