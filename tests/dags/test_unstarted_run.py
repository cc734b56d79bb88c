"""A run whose start_run never ran (its schedule gate failed, say): the run steps that still run by
their all_done rule (sweep, validate, cost, report) skip, saying why, rather than fail on a missing input."""

from __future__ import annotations

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.exceptions import AirflowSkipException

from tests.conftest import ROOT


@pytest.mark.parametrize("task_id", ["sweep", "validate", "cost", "report"])
def test_a_run_step_skips_when_start_run_never_ran(task_id):
    dag = DagBag(dag_folder=str(ROOT / "dags" / "bakeoff_dag.py")).dags["bakeoff"]
    act = dag.get_task(task_id).python_callable
    with pytest.raises(AirflowSkipException, match=f"{task_id}: start_run did not run"):
        act(None)
