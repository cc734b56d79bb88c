"""End-to-end fixtures: a private Airflow home on SQLite, small plans derived from the demo, and one
shared `bakeoff run` of the installed multi-node plans' cluster targets."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
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


def mapped_task_instances(env: dict[str, str], run_id: str) -> list[tuple[str, int, str | None]]:
    """(task id, map index, label) of a bakeoff run's mapped task instances, as Airflow recorded them:
    the label is what the grid and the REST API's rendered_map_index show."""
    db = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with closing(sqlite3.connect(db)) as con:
        return con.execute(
            "SELECT task_id, map_index, rendered_map_index FROM task_instance "
            "WHERE dag_id = 'bakeoff' AND run_id = ? AND map_index >= 0 ORDER BY task_id, map_index",
            (run_id,),
        ).fetchall()


def live_emulators(marker: str) -> list[str]:
    """Emulator processes (nodes, routers) whose command line names marker (a test's data root) and
    that are still alive."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "bakeoff.serving.emulator" in cmd and marker in cmd:
            out.append(cmd)
    return out


@dataclass(frozen=True)
class MultinodeRun:
    """What one `bakeoff run` left: its process result, its run directory, its data root, and the
    processes of its nodes still alive once it returned."""

    res: subprocess.CompletedProcess
    rdir: Path
    data: Path
    alive_after: list[str]


@pytest.fixture(scope="session")
def multinode_run(tmp_path_factory) -> MultinodeRun:
    """The cluster targets of local-multinode (disaggregated B200 pair, GB200 NVL72 trays) and of
    local-multinode-recipes (the GB300 Dynamo + SGLang recipe, beside the 8-GPU MI355X node it is weighed
    against) in one `bakeoff run` without Airflow, shrunk to a few requests: the two plans' tests read
    this one run (one process start, one validate, cost and report instead of two). The MI355X SGLang
    PD recipe is left out, as its test always left it out; b200-single is the demo's single node."""
    plans = ROOT / "include" / "plans"
    base = yaml.safe_load((plans / "local-multinode.yaml").read_text())
    recipes = yaml.safe_load((plans / "local-multinode-recipes.yaml").read_text())
    for key in ("workloads", "slo", "quality", "pricing"):  # one run can stand for both plans only if so
        assert base[key] == recipes[key], f"local-multinode and local-multinode-recipes differ in {key}"
    raw = dict(base, name="e2e-multinode")
    raw["targets"] = [t for t in base["targets"] if t.get("cluster")] + [
        t for t in recipes["targets"] if t["name"] in ("mi355x-single", "gb300-dynamo-sglang")
    ]
    raw["workloads"][0].update(requests_per_point=8, warmup_requests=2)
    raw["quality"]["accuracy"] = {"enabled": False}
    root = tmp_path_factory.mktemp("multinode")
    plan = root / "plan.yaml"
    plan.write_text(yaml.safe_dump(raw))
    data = root / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAKEOFF")}
    env |= {"BAKEOFF_DATA": str(data), "BAKEOFF_LOCAL_STATE": str(root / "local"), "PYTHONPATH": str(ROOT / "include")}
    res = subprocess.run(
        [sys.executable, "-m", "bakeoff", "run", "--plan", str(plan)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (rdir,) = (data / "results" / "e2e-multinode").glob("run_id=*")
    return MultinodeRun(res, rdir, data, live_emulators(str(root)))
