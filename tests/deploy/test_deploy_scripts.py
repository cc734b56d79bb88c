"""The deployment scripts' own logic: secret generation, stray-process detection, run checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
from run_timeline import (  # noqa: E402
    FAIL_PCT,
    GOAL_PCT,
    Step,
    TargetTimeline,
    common_overlap,
    timelines,
    verdict,
    waited,
)
from trigger_and_verify import (  # noqa: E402
    check,
    fleet_hosts,
    fleet_problems,
    overlapping_pairs,
    poke_spans,
    published_report,
    results_left_on,
)


def _init_secrets(target: Path, *users: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPTS / "init_secrets.sh"), str(target), *users],
        env={"PATH": os.environ["PATH"], "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        check=True,
    )


def test_init_secrets_creates_private_valid_keys_once(tmp_path):
    from cryptography.fernet import Fernet

    d = tmp_path / "secrets"
    _init_secrets(d, "admin", "viewer")
    files = {p.name: p.read_text() for p in d.iterdir()}
    assert set(files) == {"fernet_key", "api_secret_key", "jwt_secret", "passwords.json"}
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in d.iterdir())
    Fernet(files["fernet_key"].encode())  # raises on a malformed key
    assert len(files["jwt_secret"]) == 64 and files["jwt_secret"] != files["api_secret_key"]
    passwords = json.loads(files["passwords.json"])
    assert set(passwords) == {"admin", "viewer"} and all(len(p) >= 16 for p in passwords.values())

    second = _init_secrets(d, "admin", "viewer", BAKEOFF_ADMIN_PASSWORD="ignored-now")
    assert {p.name: p.read_text() for p in d.iterdir()} == files  # restarts keep every key
    assert second.stdout == ""


def test_init_secrets_takes_values_from_the_environment_and_never_prints_them(tmp_path):
    key = "ZmDfcTF7_60GrrY167zsiPd67pEvs0aGOv2oasOM1Pg="
    out = _init_secrets(tmp_path / "s", "ops", FERNET_KEY=key, BAKEOFF_ADMIN_PASSWORD="pw-from-env-123")
    assert (tmp_path / "s" / "fernet_key").read_text() == key
    assert json.loads((tmp_path / "s" / "passwords.json").read_text()) == {"ops": "pw-from-env-123"}
    assert key not in out.stdout + out.stderr and "pw-from-env-123" not in out.stdout + out.stderr


def test_init_secrets_writes_each_secret_where_its_services_mount_it(tmp_path):
    """One directory per secret (compose mounts each only into the services that use it)."""
    paths = {
        "FERNET_KEY_FILE": tmp_path / "fernet" / "fernet_key",
        "JWT_SECRET_FILE": tmp_path / "jwt" / "jwt_secret",
        "API_SECRET_KEY_FILE": tmp_path / "api" / "api_secret_key",
        "PASSWORDS_FILE": tmp_path / "admin" / "passwords.json",
    }
    _init_secrets(tmp_path / "admin", "admin", **{k: str(v) for k, v in paths.items()})
    for path in paths.values():
        assert [p.name for p in path.parent.iterdir()] == [path.name], path.parent
        assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert set(json.loads(paths["PASSWORDS_FILE"].read_text())) == {"admin"}
    assert paths["JWT_SECRET_FILE"].read_text() != paths["API_SECRET_KEY_FILE"].read_text()


@pytest.mark.slow
def test_stray_processes_finds_and_stops_what_carries_the_marker(tmp_path):
    marker = f"BAKEOFF_DATA={tmp_path}/{uuid.uuid4().hex}"
    name, value = marker.split("=", 1)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, name: value}, start_new_session=True
    )
    try:
        time.sleep(0.3)
        found = subprocess.run(
            [sys.executable, str(SCRIPTS / "stray_processes.py"), "--kill", marker], capture_output=True, text=True
        )
        assert found.returncode == 1 and f"stray process {proc.pid}" in found.stderr
        assert proc.wait(timeout=5) == -9
        clean = subprocess.run(
            [sys.executable, str(SCRIPTS / "stray_processes.py"), marker], capture_output=True, text=True
        )
        assert clean.returncode == 0 and clean.stderr == ""
    finally:
        if proc.poll() is None:
            proc.kill()


def _ti(task: str, idx: int, host: str, start: int, end: int, state: str = "success") -> dict:
    iso = lambda s: f"2026-11-29T21:00:{s:02d}+00:00"  # noqa: E731
    return {
        "task_id": f"target.{task}",
        "map_index": idx,
        "hostname": host,
        "state": state,
        "start_date": iso(start),
        "end_date": iso(end),
        "rendered_map_index": f"t{idx}",
        "duration": end - start,
    }


def test_run_check_passes_when_targets_ran_on_both_workers_at_once():
    tis = [
        _ti("benchmark", 0, "worker-a", 0, 20),
        _ti("benchmark", 1, "worker-b", 5, 25),
        {**_ti("start_run", -1, "worker-a", 0, 1)},
    ]
    assert check(tis, ["worker-a", "worker-b"]) == []
    assert len(overlapping_pairs([t for t in tis if t["map_index"] >= 0])) == 1


@pytest.mark.parametrize(
    "tis, problem",
    [
        (
            [_ti("benchmark", 0, "worker-a", 0, 20), _ti("benchmark", 1, "worker-a", 5, 25)],
            "no mapped task ran on worker-b",
        ),
        ([_ti("benchmark", 0, "worker-a", 0, 10), _ti("benchmark", 1, "worker-b", 11, 25)], "overlapped"),
        ([_ti("benchmark", 0, "worker-a", 0, 10, "failed")], "no mapped task instance succeeded"),
        (
            [_ti("benchmark", 0, "worker-a", 0, 20), {**_ti("benchmark", 1, "worker-b", 5, 25), "task_id": "aws.x"}],
            "ran in 2 task groups (aws, target), not one",
        ),
        (
            [
                _ti("benchmark", 0, "worker-a", 0, 20),
                {**_ti("benchmark", 1, "worker-b", 5, 25), "rendered_map_index": "1"},
            ],
            "not each labelled",
        ),
    ],
)
def test_run_check_reports_a_run_that_was_not_distributed(tis, problem):
    assert any(problem in p for p in check(tis, ["worker-a", "worker-b"]))


def test_the_report_check_finds_only_the_files_published_for_that_run(tmp_path):
    from bakeoff.publishing.publish import MANIFEST

    run = tmp_path / "local-demo" / "run_id=r1"
    run.mkdir(parents=True)
    (run / "r1.html").write_text("<h1>report</h1>")
    (run / MANIFEST).write_text(json.dumps({"run_id": "r1", "files": {"html": "r1.html", "pdf": "missing.pdf"}}))
    assert published_report(tmp_path, "r1") == [run / "r1.html"]
    assert published_report(tmp_path, "r2") == []


T0 = 1_800_000_000.0  # the DAG run's start, epoch seconds


def _step(task: str, idx: int, start: float, end: float, operator: str = "_PythonDecoratedOperator") -> dict:
    iso = lambda s: datetime.fromtimestamp(T0 + s, UTC).isoformat()  # noqa: E731
    return {
        "task_id": f"target.{task}",
        "map_index": idx,
        "rendered_map_index": f"t{idx}",
        "start_date": iso(start),
        "end_date": iso(end),
        "operator": operator,
    }


def test_the_timeline_counts_each_poke_as_held_and_the_sensor_span_as_waiting():
    """A rescheduled sensor's task instance shows its last poke only: its span starts at the first
    recorded poke, and only the pokes count as held, each with the task's own cost measured on the
    last one (its task instance's runtime minus its check's)."""
    tis = [
        _step("deploy", 0, 0, 10),
        _step("wait_benchmark", 0, 98, 100, operator="DecoratedSensorOperator"),  # the last poke
        _step("terminate", 0, 101, 105),
        _step("start_run", -1, -5, 0),  # not a target's step
    ]
    checks = [(T0 + 12.5, T0 + 13.5), (T0 + 55.5, T0 + 56.5), (T0 + 98.5, T0 + 99.5)]  # 1 s each
    [t] = timelines(tis, {("wait_benchmark", "t0"): checks})
    assert t.target == "t0" and [s.name for s in t.steps] == ["deploy", "wait_benchmark", "terminate"]
    sensor = t.steps[1]  # the last poke's task ran 2 s around its 1 s check: 1 s more per poke
    assert (sensor.start, sensor.end, sensor.held, sensor.pokes) == (T0 + 11.5, T0 + 100, 6.0, 3)
    assert (t.wall, t.wait, t.held, t.held_in_waits) == (105.0, 88.5, 20.0, 6.0)
    assert t.waits_held_pct == pytest.approx(100 * 6 / 88.5)
    assert t.window("wait_benchmark") == (T0 + 11.5, T0 + 100)
    # without its poke records a sensor is seen through its last poke only, all of it held
    [blind] = timelines(tis, {})
    assert blind.steps[1].start == T0 + 98 and blind.waits_held_pct == 100.0


def test_pokes_are_read_from_the_worker_time_the_library_records_in_the_results_store(tmp_path):
    from bakeoff.run import worker_time
    from bakeoff.store import run_dir

    rdir = str(run_dir("three", "manual__2026-11-30T14:00:00+00:00", root=str(tmp_path)))
    look = worker_time.holds_slot("benchmark_done")(lambda run_dir, slug: None)
    for _ in range(2):
        look(rdir, "b200-vllm")
        time.sleep(0.01)  # a record is named by its millisecond
    worker_time.holds_slot("provision")(lambda run_dir, slug: None)(rdir, "b200-vllm")  # a task, not a poke
    spans = poke_spans(str(tmp_path), "manual__2026-11-30T14:00:00+00:00")
    assert list(spans) == [("wait_benchmark", "b200-vllm")] and len(spans["wait_benchmark", "b200-vllm"]) == 2
    assert all(0 <= end - start < 5 for start, end in spans["wait_benchmark", "b200-vllm"])
    assert poke_spans(str(tmp_path), "another-run") == {}


def test_benchmarks_overlap_only_when_all_windows_share_an_instant():
    assert common_overlap({"a": (0, 80), "b": (30, 110), "c": (60, 140)}) == 20
    assert common_overlap({"a": (0, 80), "b": (30, 110), "c": (90, 170)}) == 0  # a ends before c starts
    assert common_overlap({"a": (0, 80), "b": None}) == 0  # a target without a benchmark
    assert common_overlap({}) == 0


def test_the_held_share_is_judged_against_the_goal_and_fails_only_well_above_it():
    assert verdict(GOAL_PCT) == "PASS" and verdict(None).startswith("n/a")
    assert verdict(GOAL_PCT + 1).startswith("over the goal") and verdict(FAIL_PCT + 1) == "FAIL"
    assert verdict(FAIL_PCT + 1, judged=False).startswith("not judged")


def test_results_in_a_workers_own_data_folder_are_found(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "secret.key").write_text("x")  # not a result
    assert results_left_on([tmp_path]) == []
    leaked = tmp_path / "results" / "plan" / "run_id=r1" / "target=t" / "points" / "w-c1-r0.parquet"
    leaked.parent.mkdir(parents=True)
    leaked.write_bytes(b"PAR1")
    assert results_left_on([tmp_path]) == [leaked]


def test_only_a_target_that_waited_is_judged_on_the_share_its_waits_held():
    remote = TargetTimeline("h100", [Step("wait_node", 0, 10, True, 9.5, 1), Step("benchmark", 10, 100, False, 90)])
    colocated = TargetTimeline("b200", [Step("wait_benchmark", 10, 100, True, 6, 4)])
    assert not waited(remote) and waited(colocated)


def test_the_fleet_check_reads_where_the_members_ran_from_the_points(tmp_path):
    import pandas as pd

    from bakeoff.store import run_dir, target_dir, write_frame

    rid = "manual__2026-11-30T14:00:00+00:00"
    rdir = run_dir("three", rid, root=str(tmp_path))
    for slug, hosts in [("h100", "clients-a@clients-a+clients-b@clients-b"), ("b200", "")]:
        tdir = target_dir("three", rid, slug, root=str(tmp_path))
        write_frame(tdir / "points" / "w-c2-r0.parquet", pd.DataFrame([{"client_hosts": hosts}]))
    assert rdir.exists()
    hosts = fleet_hosts(str(tmp_path), rid)
    assert hosts == {"h100": {"clients-a@clients-a", "clients-b@clients-b"}}
    assert fleet_problems(hosts, ["clients-a", "clients-b"]) == []
    assert "clients-c" in fleet_problems(hosts, ["clients-a", "clients-c"])[0]
    assert "no fleet points" in fleet_problems({}, ["clients-a"])[0]


@pytest.mark.parametrize("script", ["distributed_run.sh", "load_settings.sh", "init_secrets.sh"])
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(SCRIPTS / script)], check=True)


@pytest.mark.slow
def test_a_node_that_outlived_its_teardown_fails_the_check_naming_it(tmp_path, monkeypatch):
    """The check `make distributed` runs after the sweep: a real local node planted to survive is found,
    by its registry record and its process, and once terminated the check passes."""
    from bakeoff.plan import load_plan
    from bakeoff.providers.local import LocalProvider

    data, state = tmp_path / "worker-a", tmp_path / "local-cloud"
    monkeypatch.setenv("BAKEOFF_DATA", str(data))  # the emulator inherits it, as a worker's nodes do
    monkeypatch.setenv("BAKEOFF_LOCAL_STATE", str(state))
    check = [sys.executable, str(SCRIPTS / "surviving_nodes.py"), "--local-state", str(state), "--data", str(data)]
    provider = LocalProvider(grace_s=3.0)
    node = provider.wait_ready(provider.create(load_plan("local-demo").targets[0], "planted", tags={}, spec={}), 30)
    try:
        out = subprocess.run(check, capture_output=True, text=True, timeout=60)
        assert out.returncode == 1
        assert f"local node {node.id} of run planted" in out.stderr
        assert f"node process {node.pid} still runs" in out.stderr
    finally:
        assert provider.terminate(node.id) is True
    out = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "no node outlived its teardown"), out.stderr
