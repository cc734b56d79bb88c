"""docker-compose.yml against the Compose specification's JSON schema, and its safe defaults.

No Docker engine is needed: the file is validated as written and after interpolation with the
values from .env.example, which is what `docker compose config` would check first.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from compose_interpolation import InterpolationError, interpolate, read_env_file, variables_used

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
ENV_EXAMPLE = read_env_file((ROOT / ".env.example").read_text())
AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                    "airflow-worker", "airflow-init"}
ONE_SHOT = {"airflow-init", "minio-init", "airflow-cli"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads((HERE / "compose-spec.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(COMPOSE_TEXT)


@pytest.fixture(scope="module")
def compose(raw) -> dict:
    """The file as Compose sees it with .env.example's values (anchors already merged by YAML)."""
    return interpolate(raw, ENV_EXAMPLE)


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_matches_the_compose_specification(validator, raw, compose):
    assert _errors(validator, raw) == []
    assert _errors(validator, compose) == []


@pytest.mark.parametrize("breakage", [
    lambda c: c["services"]["airflow-worker"].__setitem__("healthcheck", {"test": ["CMD"], "intervall": "5s"}),
    lambda c: c["services"]["redis"].__setitem__("ports", {"6379": 6379}),
    lambda c: c.__setitem__("servics", {}),
    lambda c: c["services"]["postgres"].__setitem__("depends_on", {"redis": {"condition": "healthy"}}),
])
def test_the_schema_check_catches_a_broken_file(validator, compose, breakage):
    broken = copy.deepcopy(compose)
    breakage(broken)
    assert _errors(validator, broken)


def test_the_services_of_airflows_celery_layout_are_all_there(compose):
    services = set(compose["services"])
    assert {"postgres", "redis", "minio", "minio-init", *AIRFLOW_SERVICES} <= services
    common = compose["x-airflow-common"]["environment"]
    assert common["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert common["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:")
    assert common["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://:")
    assert common["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql")
    assert compose["services"]["airflow-worker"]["command"] == "celery worker"


def test_only_the_api_server_publishes_a_port_and_on_loopback_by_default(compose):
    published = {name: s["ports"] for name, s in compose["services"].items() if s.get("ports")}
    assert list(published) == ["airflow-apiserver"]
    assert published["airflow-apiserver"] == ["127.0.0.1:8080:8080"]


def test_the_worker_can_be_scaled(compose):
    worker = compose["services"]["airflow-worker"]
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker


def test_every_long_running_service_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        if name not in ONE_SHOT:
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_airflow_services_mount_dags_plugins_and_include_and_wait_for_init(compose):
    for name in AIRFLOW_SERVICES:
        service = compose["services"][name]
        targets = {v.split(":")[1] for v in service["volumes"]}
        assert {"/opt/airflow/dags", "/opt/airflow/plugins", "/opt/airflow/include"} <= targets, name
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name
        if name != "airflow-init":
            assert service["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_authentication_is_on_and_secrets_come_from_the_generated_files(compose):
    env = compose["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CORE__AUTH_MANAGER"].endswith("SimpleAuthManager")
    assert "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS" not in env
    for key in ("AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET"):
        assert key not in env, f"{key} must not be set in the compose file"
        assert env[key + "_CMD"].startswith("cat /opt/airflow/secrets/")
    assert "init_secrets.sh /opt/airflow/secrets" in compose["services"]["airflow-init"]["command"][1]


def test_required_passwords_have_no_default():
    with pytest.raises(InterpolationError, match="POSTGRES_PASSWORD"):
        interpolate(yaml.safe_load(COMPOSE_TEXT), {k: v for k, v in ENV_EXAMPLE.items() if k != "POSTGRES_PASSWORD"})


def test_every_variable_the_compose_file_reads_is_documented_in_env_example():
    undocumented = variables_used(COMPOSE_TEXT) - set(ENV_EXAMPLE) - {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"}
    assert undocumented == set()


def test_env_example_holds_placeholders_only():
    text = (ROOT / ".env.example").read_text()
    assert re.search(r"placeholder", text, re.I)
    for key, value in ENV_EXAMPLE.items():
        if re.search(r"PASSWORD|SECRET|TOKEN|API_KEY|ACCESS_KEY", key):
            assert value == "" or value.startswith("change-me"), f"{key} looks like a real secret"


def test_dockerfile_builds_on_the_pinned_airflow_and_installs_the_library():
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM (\S+)", dockerfile, re.M).group(1)
    pinned = re.search(r"^apache-airflow==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert base == f"apache/airflow:{pinned}-python3.11"
    assert "-r /opt/bakeoff/requirements.txt -c /opt/bakeoff/requirements.lock" in dockerfile
    assert re.search(r"pip install .*/opt/bakeoff$", dockerfile, re.M)
    for src in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", dockerfile, re.M):
        for path in src.split():
            assert (ROOT / path).exists(), f"Dockerfile copies missing {path}"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".env", ".venv", ".git"} <= set(ignored)
