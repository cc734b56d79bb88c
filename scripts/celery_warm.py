"""Celery settings for the distributed run's workers: Airflow's defaults, with the bakeoff library
imported once when the worker starts.

Each task runs in a process forked from its worker, so what the worker imported is already loaded
there. Without this, every sensor poke imports the library (pandas, pyarrow, pydantic) anew, which
on a busy 2-core machine takes longer than the check itself: the slot would be held for imports.

Set with AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=celery_warm.CELERY_CONFIG (this folder on PYTHONPATH).
"""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

# imported for their side effect: the run's step modules (provisioning through pipeline) loaded before tasks fork
import bakeoff.run.pipeline
import bakeoff.run.teardown_steps  # noqa: F401

CELERY_CONFIG = DEFAULT_CELERY_CONFIG
