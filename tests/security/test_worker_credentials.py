"""Celery workers run task code, so they must not hold the metadata database's credentials.

In Airflow 3 a task reaches Airflow through the api-server (Task SDK) with a per-task token; the
only reason a worker held the database URL was Celery's result backend. It is Redis now, in
docker-compose.yml and in the native distributed run (scripts/distributed_run.sh), whose green run
shows the workers need no database.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # anchors merged by YAML


def _text(command: str | list[str] | None) -> str:
    return " ".join(command) if isinstance(command, list) else str(command or "")


def _workers(compose: dict) -> dict[str, dict]:
    """Every service that runs a Celery worker, however its command is written."""
    return {
        name: s
        for name, s in compose["services"].items()
        if re.search(r"\bcelery\b.*\bworker\b", _text(s.get("command")))
    }


def db_credential_leaks(compose: dict) -> list[str]:
    """``service: VAR`` for each worker variable that is the database URL or carries its password."""
    leaks = []
    for name, service in _workers(compose).items():
        env = service.get("environment") or {}
        items = env.items() if isinstance(env, dict) else (e.partition("=")[::2] for e in env)
        for key, value in items:
            value = str(value or "")
            if "SQL_ALCHEMY_CONN" in key or "POSTGRES_PASSWORD" in value or "POSTGRES_PASSWORD" in key:
                leaks.append(f"{name}: {key}")
            elif re.search(r"(^|db\+)postgres(ql)?(\+\w+)?://", value):
                leaks.append(f"{name}: {key}")
    return leaks


def test_compose_has_a_worker_to_check():
    assert "airflow-worker" in _workers(COMPOSE)


def test_no_compose_worker_holds_the_database_url_or_password():
    assert db_credential_leaks(COMPOSE) == []


def test_the_celery_results_are_in_redis_for_workers_and_scheduler():
    for name in ("airflow-worker", "airflow-scheduler"):
        assert COMPOSE["services"][name]["environment"]["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("redis://:")


def test_the_services_that_use_the_database_still_have_it():
    users = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-init")
    for name in users:
        env = COMPOSE["services"][name]["environment"]
        assert "POSTGRES_PASSWORD" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], name


@pytest.mark.parametrize(
    "env",
    [
        {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://airflow:${POSTGRES_PASSWORD}@postgres/airflow"},
        {"AIRFLOW__CELERY__RESULT_BACKEND": "db+postgresql+psycopg2://airflow:${POSTGRES_PASSWORD}@postgres/airflow"},
        ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD=cat /run/db"],
        {"METADATA_URL": "postgresql://airflow:hunter2@postgres/airflow"},
    ],
)
def test_the_check_catches_a_worker_given_the_database(env):
    """The layout before the change (and other spellings) is caught, so the check can fail."""
    broken = {"services": {"w": {"command": ["celery", "worker"], "environment": env}}}
    assert db_credential_leaks(broken)


def test_the_native_distributed_run_gives_its_workers_no_database():
    script = (ROOT / "scripts" / "distributed_run.sh").read_text()
    backend = re.search(r'^export AIRFLOW__CELERY__RESULT_BACKEND="([^"]*)"', script, re.M)
    assert backend and backend.group(1).startswith("redis://")
    starts = [line for line in script.splitlines() if re.match(r'\s*start "\$w"', line)]
    assert starts and all("env -u AIRFLOW__DATABASE__SQL_ALCHEMY_CONN " in line for line in starts)


def test_client_workers_get_the_installation_secret_read_only_and_no_runs_records():
    """A fleet member needs the installation secret (state/secret.key) and nothing else of the data
    volume: not every run's records, and nothing it could write."""
    clients = COMPOSE["services"]["bakeoff-clients"]
    data = [
        v for v in clients["volumes"] if (v["source"] if isinstance(v, dict) else v.split(":")[0]) == "bakeoff-data"
    ]
    assert data == [
        {
            "type": "volume",
            "source": "bakeoff-data",
            "target": "/opt/bakeoff-data/state",
            "read_only": True,
            "volume": {"subpath": "state"},
        }
    ], data
    assert clients["environment"]["BAKEOFF_DATA"] == "/opt/bakeoff-data"  # so state/secret.key is where it mounts
