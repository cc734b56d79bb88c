"""The deployment scripts' own logic: secret generation, stray-process detection, run checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
from trigger_and_verify import check, overlapping_pairs, published_report  # noqa: E402


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
    ],
)
def test_run_check_reports_a_run_that_was_not_distributed(tis, problem):
    assert any(problem in p for p in check(tis, ["worker-a", "worker-b"]))


def test_the_report_check_finds_only_the_files_published_for_that_run(tmp_path):
    from bakeoff.publish import MANIFEST

    run = tmp_path / "local-demo" / "run_id=r1"
    run.mkdir(parents=True)
    (run / "r1.html").write_text("<h1>report</h1>")
    (run / MANIFEST).write_text(json.dumps({"run_id": "r1", "files": {"html": "r1.html", "pdf": "missing.pdf"}}))
    assert published_report(tmp_path, "r1") == [run / "r1.html"]
    assert published_report(tmp_path, "r2") == []


@pytest.mark.parametrize("script", ["distributed_run.sh", "load_settings.sh", "init_secrets.sh"])
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(SCRIPTS / script)], check=True)
