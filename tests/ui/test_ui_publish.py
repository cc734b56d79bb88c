"""Publishing: the reports store (a local folder, or S3 on moto through an Airflow connection) with an
index of runs."""

import json
from pathlib import Path

import pytest
import synthetic

from bakeoff.cost import cost_run
from bakeoff.paths import run_folder
from bakeoff.publishing.publish import asset_uri, publish
from bakeoff.report import build_report


@pytest.fixture(scope="module")
def built_runs(tmp_path_factory):
    """Two runs of one plan, reported once for the module (publishing never changes them)."""
    base = tmp_path_factory.mktemp("publish")
    plan = synthetic.make_plan(concurrency=(1, 4), repeats=2)  # repeats: the headline may name a winner
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
    assert Path(res["location"]) == root / "synthetic" / f"run_id={run_folder('scheduled__2026-11-01')}"
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


def test_the_manifest_states_the_outcome_from_the_failed_steps(two_runs):
    plan, runs, root = two_runs
    assert publish(plan, *runs[0])["status"] == "success"
    res = publish(plan, *runs[1], failed_steps=["local.benchmark_0"])
    manifest = json.loads((Path(res["location"]) / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failed_steps"] == ["local.benchmark_0"]


def test_publish_to_an_s3_reports_store(built_runs, s3_store, moto_s3):
    plan, runs = built_runs
    rdir, paths = runs[0]
    res = publish(plan, rdir, paths)
    s3 = moto_s3
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_store, Prefix="reports/")["Contents"]}
    base = f"reports/synthetic/run_id={run_folder('scheduled__2026-10-01')}/"
    for kind, local in paths.items():
        assert base + Path(local).name in keys, kind
        assert res["files"][kind] == f"s3://bakeoff_store_test@{s3_store}/{base}{Path(local).name}"
    assert {base + "manifest.json", "reports/synthetic/index.json", "reports/index.html"} <= keys
    body = s3.get_object(Bucket=s3_store, Key=base + Path(paths["html"]).name)["Body"].read()
    assert body == Path(paths["html"]).read_bytes()
