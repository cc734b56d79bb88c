"""Shared test set-up: an isolated Airflow home and bakeoff data root per test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Airflow reads its configuration at import: point it at a throwaway home before any test imports it.
_SESSION_HOME = Path(os.environ.get("BAKEOFF_TEST_HOME") or (ROOT / "var" / "test-session")).resolve()
os.environ.setdefault("AIRFLOW_HOME", str(_SESSION_HOME / "airflow"))
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_SESSION_HOME / 'airflow' / 'airflow.db'}")
os.environ.setdefault("BAKEOFF_DATA", str(_SESSION_HOME / "data"))
# The suite's static endpoints are emulators and fakes on loopback: this installation allows a plan's
# base_url there (tests/security/test_second_pass.py unsets it to check the refusal).
os.environ.setdefault("BAKEOFF_ALLOW_PRIVATE_ENDPOINTS", "true")
(_SESSION_HOME / "airflow").mkdir(parents=True, exist_ok=True)
for p in (ROOT / "plugins",):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

# A folder's tests get its marker (declared in pyproject.toml) without repeating it, so `-m "not e2e"`
# and `make test-unit` select by kind; an explicit marker on a test elsewhere works as well.
FOLDER_MARKERS = {
    "e2e": "e2e",
    "ui_browser": "browser",
    "sandbox": "sandbox",
    "distributed": "distributed",
    "ui": "slow",  # a live Airflow API server per module
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).resolve().parent
    for item in items:
        path = Path(item.path).resolve()
        if path.is_relative_to(tests) and len(path.relative_to(tests).parts) > 1:
            marker = FOLDER_MARKERS.get(path.relative_to(tests).parts[0])
            if marker and item.get_closest_marker(marker) is None:
                item.add_marker(marker)


@pytest.fixture
def data_root(tmp_path, monkeypatch) -> Path:
    """A private BAKEOFF_DATA for one test."""
    root = tmp_path / "bakeoff-data"
    monkeypatch.setenv("BAKEOFF_DATA", str(root))
    monkeypatch.delenv("BAKEOFF_RESULTS", raising=False)
    monkeypatch.delenv("BAKEOFF_REPORTS", raising=False)
    return root


@pytest.fixture(scope="session")
def moto_server():
    """One moto server (EC2, SSM, S3) per session, with the Deep Learning AMI parameter published."""
    import boto3

    from bakeoff_sandbox.ec2 import AWS_REGIONS, MotoServer, publish_dlami

    server = MotoServer(None).start()
    ec2 = boto3.client(
        "ec2",
        region_name="us-east-1",
        endpoint_url=server.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    publish_dlami(AWS_REGIONS, ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])
    yield server
    server.stop()


@pytest.fixture
def moto_s3(moto_server):
    """A boto3 S3 client on the moto server."""
    import boto3

    return boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=moto_server.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def s3_store(moto_server, moto_s3, data_root, monkeypatch) -> str:
    """Results and reports in S3 (the moto server) through an Airflow connection, as on workers that
    share no disk: BAKEOFF_RESULTS / BAKEOFF_REPORTS are s3://<conn_id>@<bucket>/... URLs. Returns the bucket."""
    import json
    import uuid

    bucket = f"bakeoff-{uuid.uuid4().hex[:12]}"
    moto_s3.create_bucket(Bucket=bucket)
    conn = {"endpoint_url": moto_server.url, "region_name": "us-east-1"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_BAKEOFF_STORE_TEST",
        json.dumps({"conn_type": "aws", "login": "testing", "password": "testing", "extra": conn}),
    )
    monkeypatch.setenv("BAKEOFF_RESULTS", f"s3://bakeoff_store_test@{bucket}/results")
    monkeypatch.setenv("BAKEOFF_REPORTS", f"s3://bakeoff_store_test@{bucket}/reports")
    return bucket


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory) -> Path:
    """An Airflow metadata database migrated once per session (Airflow's and FAB's tables): tests copy
    the file instead of each running `airflow db migrate`."""
    from tests.airflow_db import migrate

    return migrate(tmp_path_factory.mktemp("airflow-db"))


# --- a client fleet on real Celery client workers (tests/fleet_fixtures.py) -----------------------
FLEET_SECRET = "fleet-test-installation-secret-" + "0" * 32  # the installation secret workers and tests share


@pytest.fixture(scope="session")
def fleet_broker(tmp_path_factory):
    """A real redis-server on a free loopback port (skipped when none is installed)."""
    from tests.fleet_fixtures import redis_server

    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def fleet_workers(fleet_broker, tmp_path_factory):
    """Two real Celery client workers (one member slot each) on ``fleet_broker``."""
    from tests.fleet_fixtures import client_workers

    env = {"BAKEOFF_SECRET_KEY": FLEET_SECRET}
    with client_workers(fleet_broker, ["clients-a", "clients-b"], tmp_path_factory.mktemp("workers"), env) as w:
        yield w


@pytest.fixture
def celery_fleet(fleet_workers, fleet_broker, monkeypatch):
    """This process as a coordinator of a Celery fleet on the workers above (same installation secret)."""
    monkeypatch.setenv("BAKEOFF_FLEET_BROKER", fleet_broker)
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", FLEET_SECRET)
    for var in ("BAKEOFF_FLEET_BIND", "BAKEOFF_FLEET_ADVERTISE"):
        monkeypatch.delenv(var, raising=False)
    return fleet_workers
