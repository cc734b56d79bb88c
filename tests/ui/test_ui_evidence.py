"""The evidence bundle through the UI plugin: listed with the run's reports, downloaded (never shown)
as the same bytes that verify."""

import importlib.util
import zipfile
from pathlib import Path

import pytest
import synthetic
from fastapi.testclient import TestClient

from bakeoff import evidence
from bakeoff.cost import cost_run
from bakeoff.publish import publish
from bakeoff.report import build_report

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "bakeoff_ui.py"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ui-evidence")
    mp = pytest.MonkeyPatch()
    mp.setenv("BAKEOFF_REPORTS", str(base / "reports"))
    mp.setenv("BAKEOFF_SECRET_KEY", "e" * 64)
    plan = synthetic.make_plan(names=("mi355x-vllm", "b200-vllm"), concurrency=(1, 4))
    rdir = synthetic.make_run(base / "results", plan, run_id="manual__2026-11-03T10:00:00+00:00")
    cost_run(plan, rdir)
    paths = build_report(plan, rdir, base / "build")
    bundle = evidence.build(plan, rdir, paths, base / "build")
    publish(plan, rdir, {**paths, "evidence": str(bundle)})
    spec = importlib.util.spec_from_file_location("bakeoff_ui_evidence_under_test", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.app.dependency_overrides[mod.require_run_read] = lambda: None  # who may read: tests/security
    yield {"client": TestClient(mod.app), "tmp": base}
    mp.undo()


def test_bundle_is_listed_and_downloads_as_it_was_signed(served):
    client = served["client"]
    url = client.get("/api/runs").json()[0]["files"]["evidence"]
    assert url.endswith("-evidence.zip")
    resp = client.get(url.removeprefix("/bakeoff"))
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/zip"
    assert resp.headers["content-disposition"].startswith("attachment;")
    local = served["tmp"] / "downloaded.zip"
    local.write_bytes(resp.content)
    assert evidence.verify(local).ok
    assert "results/plan.json" in zipfile.ZipFile(local).namelist()
    assert client.get(url.removeprefix("/bakeoff").replace("-evidence.zip", "-other.zip")).status_code == 404
