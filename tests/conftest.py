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
(_SESSION_HOME / "airflow").mkdir(parents=True, exist_ok=True)
for p in (ROOT / "plugins",):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


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

    from bakeoff.sandbox import AWS_REGIONS
    from bakeoff.sandbox.ec2 import MotoServer, publish_dlami

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
