"""DAG integrity: the DAG files import cleanly, fast, and keep the wiring the design relies on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import typing

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.utils.trigger_rule import TriggerRule

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def dagbag() -> DagBag:
    return DagBag(dag_folder=str(ROOT / "dags"))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"bakeoff", "bakeoff_reaper"} <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", ["bakeoff", "bakeoff_reaper"])
def test_tags_owner_retries(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert "bakeoff" in dag.tags
    assert dag.catchup is False
    for t in dag.tasks:
        assert t.owner == "bakeoff"
        assert t.retries is not None


def test_schedules(dagbag):
    assert dagbag.dags["bakeoff"].schedule == "@monthly"
    assert dagbag.dags["bakeoff_reaper"].schedule == "@hourly"


PROVIDERS = ("local", "static", "aws", "vultr", "digitalocean", "oci")


def test_one_group_per_provider_with_its_pool(dagbag):
    """Every provider a plan may name has a group whose provisioning takes that provider's pool."""
    from bakeoff.plan.target import ProviderName
    from bakeoff.providers import PROVIDERS as REGISTRY

    assert set(PROVIDERS) == set(typing.get_args(ProviderName)) == set(REGISTRY)
    pools = json.loads((ROOT / "config" / "pools.json").read_text())
    t = {task.task_id: task for task in dagbag.dags["bakeoff"].tasks}
    for p in PROVIDERS:
        assert t[f"{p}.provision"].pool == f"bakeoff_{p}"
        assert f"bakeoff_{p}" in pools, "config/pools.json must define every provisioning pool"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_setup_teardown_and_cleanup_wiring(dagbag, provider):
    dag = dagbag.dags["bakeoff"]
    t = {task.task_id: task for task in dag.tasks}
    g = provider
    assert t[f"{g}.provision"].is_setup
    assert t[f"{g}.terminate"].is_teardown
    assert f"{g}.provision" in t[f"{g}.terminate"].upstream_task_ids
    # the sweep runs whatever happened, after every teardown
    assert t["sweep"].trigger_rule == TriggerRule.ALL_DONE
    assert f"{g}.terminate" in t["sweep"].upstream_task_ids
    for name in ("validate", "cost", "report"):
        assert t[name].trigger_rule == TriggerRule.ALL_DONE
    # the watcher sees every failing step except setups, so the run's state tells the truth
    watcher = t["watcher"]
    assert watcher.trigger_rule == TriggerRule.ONE_FAILED
    assert {
        f"{g}.deploy",
        f"{g}.benchmark",
        f"{g}.accuracy_gate",
        "sweep",
        "validate",
        "cost",
        "report",
        "publish",
    } <= watcher.upstream_task_ids
    assert f"{g}.provision" not in watcher.upstream_task_ids
    # Airflow decides the run's state from its leaves: finish is the only one, runs whatever
    # happened after the watcher, and fails (once, no retry) when the run failed
    assert [leaf.task_id for leaf in dag.leaves] == ["finish"]
    assert t["finish"].trigger_rule == TriggerRule.ALL_DONE and t["finish"].retries == 0
    assert "watcher" in t["finish"].upstream_task_ids


def test_trigger_form_params(dagbag):
    params = dagbag.dags["bakeoff"].params
    for key in ("plan", "targets", "ttft_p99_ms", "tpot_p99_ms", "prices", "budget_usd", "utilisation"):
        assert key in params


def test_plan_param_lists_the_installed_plans(dagbag):
    """The form's plan is a choice built at parse time from the plans folder, the same list the
    library accepts when the run starts."""
    from bakeoff.plan import installed_plans

    schema = dagbag.dags["bakeoff"].params.get_param("plan").schema
    assert schema["enum"] == [None, *installed_plans()] and "local-demo" in schema["enum"]


def test_publish_updates_reports_asset(dagbag):
    """publish emits bakeoff://reports/<plan> through an alias, so downstream DAGs can react per plan."""
    publish = dagbag.dags["bakeoff"].get_task("publish")
    assert [o.name for o in publish.outlets] == ["bakeoff-reports"]


def test_parse_is_light():
    """Parsing must not import the heavy stack (pandas, GX, pyarrow, aiohttp) or the library's steps."""
    code = (
        "import sys, runpy; runpy.run_path('dags/bakeoff_dag.py'); runpy.run_path('dags/bakeoff_reaper_dag.py');"
        "heavy = [m for m in ('pandas', 'great_expectations', 'pyarrow', 'aiohttp', 'bakeoff') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"parse imported: {out.stdout.strip()}"
    assert time.monotonic() - start < 60


def test_no_module_shadows_the_library():
    """Airflow puts dags/ and plugins/ on sys.path: a bakeoff.py there would hide the package."""
    for folder in ("dags", "plugins"):
        assert not (ROOT / folder / "bakeoff.py").exists()
        assert not (ROOT / folder / "bakeoff").exists()
