"""What a node's user-data opens (L9): the presigned URL in the boot script fetches the client bundle and
nothing else, and the bundle holds only what the node runs (the package's Python modules and
``bundle.NODE_DATA``): the twin's predicted spend and a run record planted beside the code stay behind.
The URL is tried against moto's S3 in server mode (a plain GET, as the node sends it), with other keys
in the same bucket: rewriting its key or asking for a listing is refused."""

from __future__ import annotations

import hashlib
import io
import shutil
import socket
import time
import zipfile
from collections.abc import Iterator
from urllib.parse import urlsplit

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from bakeoff.plan import load_plan
from bakeoff.run import provisioning
from bakeoff.serving import bundle

BUCKET = "bakeoff-client"
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture
def s3() -> Iterator[tuple[object, str]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=url, **CREDS)
    client.create_bucket(Bucket=BUCKET)
    yield client, url
    server.stop()


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A copy of the package with the twin's spend index and a run record beside the code."""
    root = tmp_path / "bakeoff"
    shutil.copytree(bundle.package_root(), root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert (root / "prediction" / "predicted_spend.json").is_file()
    (root / "runs" / "plan" / "r1").mkdir(parents=True)
    (root / "runs" / "plan" / "r1" / "start.json").write_text('{"run_id": "r1", "approved_by": "ops"}')
    (root / "twin" / "spend_history.csv").write_text("plan,usd\nsecret-plan,990\n")
    (root / "catalog" / "notes.txt").write_text("not for the node")
    monkeypatch.setattr(bundle, "package_root", lambda: root)
    return root


def _names(data: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(data)).namelist()


def test_the_bundle_holds_only_what_the_node_runs(planted):
    data, _ = bundle.build()
    names = _names(data)
    outside = [n for n in names if not bundle.on_node(n.removeprefix("bakeoff/"))]
    assert not outside, outside
    assert "bakeoff/prediction/predicted_spend.json" not in names
    assert not [n for n in names if "runs/" in n or n.endswith((".csv", ".txt")) and "requirements" not in n]
    # what the boot script and the agent need is all there
    for rel in bundle.NODE_DATA:
        assert f"bakeoff/{rel}" in names
    assert {"bakeoff/__main__.py", "bakeoff/cli.py", "bakeoff/agent/server.py", "bakeoff/bench/run.py"} <= set(names)


def test_the_node_gets_that_bundle_and_its_url_opens_nothing_else(planted, s3):
    client, _ = s3
    client.put_object(Bucket=BUCKET, Key="bakeoff/prediction/predicted_spend.json", Body=b'{"secret-plan": 990}')
    staged = bundle.stage({"bucket": BUCKET, "s3_client": client}, 3600)
    assert staged is not None
    got = httpx.get(staged.url, timeout=10)
    assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == staged.sha256
    assert not [n for n in _names(got.content) if not bundle.on_node(n.removeprefix("bakeoff/"))]
    assert b"secret-plan" not in got.content

    # one object: the URL's signed path is the bundle's key and nothing else (moto does not check presigned
    # signatures, so what a rewritten path gets is S3's to refuse; the path it signs is ours to show)
    parts = urlsplit(staged.url)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert parts.path == f"/{BUCKET}/{next(k for k in keys if k.endswith('.zip'))}"
    assert "list-type" not in parts.query and "prefix" not in parts.query.lower()


def test_the_url_lives_until_the_boot_deadline_not_the_whole_run():
    target = load_plan("mi355x-vs-b200-sandbox").targets[0]
    valid = provisioning.bundle_url_s(target, time.time() + 24 * 3600)
    boot = float(target.provider_options.get("ready_timeout_s", 1800))
    assert valid <= boot + provisioning.CREATE_ALLOWANCE_S
    assert provisioning.bundle_url_s(target, time.time() + 600) <= 600
