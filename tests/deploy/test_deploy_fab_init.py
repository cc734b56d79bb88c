"""airflow-init's admin creation, run as compose runs it, against a real FAB auth manager database.

The init script's secret and user steps are taken from docker-compose.yml itself (only the image
paths are mapped to this checkout), so a change there that breaks the admin login fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from compose_interpolation import interpolate, read_env_file

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Both begin with "-", as a generated password does 1 time in 64 (secrets.token_urlsafe) and a chosen
# BAKEOFF_ADMIN_PASSWORD may: argparse must not take either for an option.
ADMIN_PASSWORD = "-init-test-admin-password"
REAPER_PASSWORD = "-init-test-reaper-password"

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def _init_service() -> dict:
    return interpolate(
        yaml.safe_load((ROOT / "docker-compose.yml").read_text()), read_env_file((ROOT / ".env.example").read_text())
    )["services"]["airflow-init"]


def _init_steps() -> str:
    """The init command up to the admin and reaper users (what follows loads settings from config/)."""
    script = _init_service()["command"][1]
    steps = script.split("/opt/bakeoff/scripts/load_settings.sh")[0]
    return steps.replace("/entrypoint airflow", "airflow").replace("/opt/bakeoff/scripts/", f"{ROOT}/scripts/")


def _env(tmp: Path) -> dict:
    init_env = _init_service()["environment"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BAKEOFF"))}
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env['PATH']}",
            "AIRFLOW_HOME": str(tmp / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(tmp / "no-dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": init_env["AIRFLOW__CORE__AUTH_MANAGER"],
            "BAKEOFF_ADMIN_USER": init_env["BAKEOFF_ADMIN_USER"],
            "BAKEOFF_ADMIN_EMAIL": init_env["BAKEOFF_ADMIN_EMAIL"],
            "BAKEOFF_ADMIN_PASSWORD": ADMIN_PASSWORD,
        }
    )
    for var in ("FERNET_KEY_FILE", "JWT_SECRET_FILE", "API_SECRET_KEY_FILE", "PASSWORDS_FILE", "REAPER_PASSWORD_FILE"):
        env[var] = str(tmp / init_env[var].removeprefix("/opt/airflow/secrets/"))
    env["AIRFLOW__CORE__FERNET_KEY_CMD"] = f"cat {env['FERNET_KEY_FILE']}"
    env["AIRFLOW__API_AUTH__JWT_SECRET_CMD"] = f"cat {env['JWT_SECRET_FILE']}"
    env["AIRFLOW__API__SECRET_KEY_CMD"] = f"cat {env['API_SECRET_KEY_FILE']}"
    return env


LOGIN = """
import json, sys
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
client = TestClient(create_app())
print(json.dumps([client.post("/auth/token", json={"username": u, "password": p}).status_code
                  for u, p in json.loads(sys.argv[1])]))
"""


def test_init_creates_a_fab_admin_and_the_reaper_who_can_log_in_and_a_rerun_keeps_them(tmp_path):
    env = _env(tmp_path)
    reaper_file = Path(env["REAPER_PASSWORD_FILE"])
    reaper_file.parent.mkdir(parents=True)
    reaper_file.write_text(REAPER_PASSWORD + "\n")  # as if generated: init keeps an existing one
    steps = _init_steps()
    first = subprocess.run(["bash", "-c", steps], env=env, capture_output=True, text=True, timeout=400)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for password in (ADMIN_PASSWORD, REAPER_PASSWORD):
        assert password not in first.stdout + first.stderr  # the passwords are in no log

    again = subprocess.run(
        ["bash", "-c", steps],
        env={**env, "BAKEOFF_ADMIN_PASSWORD": "changed-later"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert again.returncode == 0 and "already exists" in again.stdout, again.stdout[-3000:] + again.stderr[-3000:]

    attempts = [
        ["admin", ADMIN_PASSWORD],
        ["admin", "changed-later"],
        ["admin", "wrong"],
        ["bakeoff-reaper", REAPER_PASSWORD],
        ["bakeoff-reaper", REAPER_PASSWORD.lstrip("-")],
    ]
    out = subprocess.run(
        [sys.executable, "-c", LOGIN, json.dumps(attempts)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [201, 401, 401, 201, 401]
