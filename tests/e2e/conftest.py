"""End-to-end fixtures: a private Airflow home on SQLite, and small plans derived from the demo."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory, airflow_db) -> dict[str, str]:
    """Environment for `airflow` subprocesses: own AIRFLOW_HOME, SQLite DB, data root."""
    home = tmp_path_factory.mktemp("airflow-e2e")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BAKEOFF"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow' / 'airflow.db'}",
            "BAKEOFF_DATA": str(home / "data"),
            "BAKEOFF_PLANS": str(home / "plans"),  # the DAG runs installed plans only, by name
            # the e2e static endpoints are emulators on loopback: this installation allows that
            "BAKEOFF_ALLOW_PRIVATE_ENDPOINTS": "true",
            # the sandbox's fake clouds answer at once: the cloud sensors check every 2 s, not every 30 s
            "BAKEOFF_CLOUD_POKE_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
    )
    (home / "airflow").mkdir()
    shutil.copytree(ROOT / "include" / "plans", home / "plans")
    shutil.copyfile(airflow_db, home / "airflow" / "airflow.db")  # the session's migrated database
    subprocess.run(
        [AIRFLOW, "pools", "import", str(ROOT / "config" / "pools.json")],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return env


def small_plan(
    tmp_path: Path, name: str, *, fault: dict[str, str] | None = None, emulator: dict[str, dict] | None = None
) -> Path:
    """The demo plan shrunk to a few requests per point; fault maps target name -> stage to fail,
    emulator maps target name -> emulator settings to merge (e.g. an accuracy_error_rate)."""
    raw = yaml.safe_load((ROOT / "include" / "plans" / "local-demo.yaml").read_text())
    raw["name"] = name
    for w in raw["workloads"]:
        w.update(concurrency=[1, 4], requests_per_point=8, warmup_requests=2, output_len=32, input_len=256, repeats=1)
    for t in raw["targets"]:
        # every emulated delay at 1/20 (one scale for both targets, as the sandbox plans run): the
        # tests check the run's wiring and records, not the emulated figures
        t.setdefault("emulator", {})["time_scale"] = 0.05
        if fault and t["name"] in fault:
            t.setdefault("provider_options", {})["inject_fault"] = fault[t["name"]]
        if emulator and t["name"] in emulator:
            t.setdefault("emulator", {}).update(emulator[t["name"]])
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def run_dag(env: dict[str, str], plan: Path | str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the DAG once; a plan file is installed among the env's plans first and named."""
    if isinstance(plan, Path):
        shutil.copy(plan, Path(env["BAKEOFF_PLANS"]) / plan.name)
        plan = plan.stem
    conf = json.dumps({"plan": plan})
    return subprocess.run(
        [AIRFLOW, "dags", "test", "bakeoff", "--conf", conf],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def dag_run_state(env: dict[str, str], run_id: str) -> str:
    """The state Airflow itself recorded for one run of the bakeoff DAG."""
    db = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with closing(sqlite3.connect(db)) as con:
        (state,) = con.execute(
            "SELECT state FROM dag_run WHERE dag_id = 'bakeoff' AND run_id = ?", (run_id,)
        ).fetchone()
    return state
