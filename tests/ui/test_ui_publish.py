"""Publishing: local reports folder with an index of runs, and S3 through a real boto3 client on moto."""

import json
from pathlib import Path

import boto3
import pytest
import synthetic
from moto import mock_aws

from bakeoff.cost import cost_run
from bakeoff.publish import asset_uri, publish
from bakeoff.report import build_report


@pytest.fixture(scope="module")
def built_runs(tmp_path_factory):
    """Two runs of one plan, reported once for the module (publishing never changes them)."""
    base = tmp_path_factory.mktemp("publish")
    plan = synthetic.make_plan(concurrency=(1, 4))
    out = []
    for i, rid in enumerate(("scheduled__2026-10-01", "scheduled__2026-11-01")):
        rdir = synthetic.make_run(base / "results", plan, run_id=rid, started_at=1.79e9 + i * 1e6, seed=i)
        cost_run(plan, rdir)
        out.append((rdir, build_report(plan, rdir, base / f"build{i}")))
    return plan, out


@pytest.fixture
def two_runs(built_runs, tmp_path, monkeypatch):
    """The built runs and an empty reports folder of this test's own."""
    monkeypatch.setenv("BAKEOFF_REPORTS", str(tmp_path / "reports"))
    return (*built_runs, tmp_path / "reports")


def test_local_publish_and_index(two_runs):
    plan, runs, root = two_runs
    for rdir, paths in runs:
        res = publish(plan, rdir, paths)
    assert res["asset_uri"] == asset_uri("synthetic") == "bakeoff://reports/synthetic"
    assert Path(res["local_dir"]) == root / "synthetic" / "run_id=scheduled__2026-11-01"
    for f in res["files"].values():
        assert Path(f).is_file()
    index = json.loads((root / "synthetic" / "index.json").read_text())
    assert [r["run_id"] for r in index] == ["scheduled__2026-11-01", "scheduled__2026-10-01"]  # newest first
    assert "is cheapest at the SLO" in index[0]["summary"]
    html = (root / "index.html").read_text()
    assert html.count("scheduled__2026-1") >= 2
    # publishing the same run again does not duplicate it
    publish(plan, *runs[1])
    assert len(json.loads((root / "synthetic" / "index.json").read_text())) == 2


def test_missing_report_file_is_a_clear_error(two_runs):
    plan, runs, _ = two_runs
    rdir, paths = runs[0]
    with pytest.raises(FileNotFoundError, match="'pdf'.*rerun the report step"):
        publish(plan, rdir, {**paths, "pdf": str(Path(paths["pdf"]).with_name("gone.pdf"))})


def test_s3_client_without_bucket_is_refused(two_runs):
    plan, runs, _ = two_runs
    with pytest.raises(ValueError, match="without a bucket"):
        publish(plan, *runs[0], s3_client=object())


def test_publish_to_s3_on_moto(two_runs):
    plan, runs, _ = two_runs
    rdir, paths = runs[0]
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="reports-bucket")
        res = publish(plan, rdir, paths, s3_client=s3, bucket="reports-bucket", prefix="/bakeoff/monthly/")
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="reports-bucket")["Contents"]}
        base = "bakeoff/monthly/synthetic/run_id=scheduled__2026-10-01/"
        for kind, local in res["files"].items():
            assert base + Path(local).name in keys, kind
            assert res["s3"][kind] == f"s3://reports-bucket/{base}{Path(local).name}"
        assert base + "manifest.json" in keys and "bakeoff/monthly/synthetic/index.json" in keys
        obj = s3.get_object(Bucket="reports-bucket", Key=base + Path(res["files"]["html"]).name)
        assert obj["ContentType"].startswith("text/html")
        assert obj["Body"].read() == Path(res["files"]["html"]).read_bytes()
