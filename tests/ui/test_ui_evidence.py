"""The evidence bundle through the UI plugin: listed with the run's reports, downloaded (never shown)
as the same bytes that verify."""

import importlib.util
import zipfile
from pathlib import Path

import pytest
import synthetic
from fastapi.testclient import TestClient

from bakeoff.cost import cost_run
from bakeoff.publishing import evidence
from bakeoff.publishing.publish import publish
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


class _FakeAirflowApi:
    """Airflow's POST /api/v2/dags/<dag>/dagRuns as far as run again uses it: records each call."""

    def __init__(self, status: int = 200):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        calls, api = [], self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                calls.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                out = {"dag_run_id": "manual__again", "state": "queued"} if api.status == 200 else {"detail": "no"}
                data = json.dumps(out).encode()
                self.send_response(api.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.status, self.calls = status, calls
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def test_run_again_triggers_the_same_plan_with_the_same_conf(served, tmp_path, monkeypatch):
    from bakeoff import store
    from bakeoff.run import pipeline
    from tests.conftest import ROOT

    monkeypatch.setenv("BAKEOFF_RESULTS", str(tmp_path / "results"))
    conf = {"plan": "local-demo", "targets": ["mi355x-vllm"], "budget_usd": 50, "prices": ["mi355x-vllm = 40.0"]}
    run = pipeline.start_run(str(ROOT / "include" / "plans" / "local-demo.yaml"), "manual__first", conf=conf)
    api = _FakeAirflowApi()
    monkeypatch.setenv("BAKEOFF_AIRFLOW_API_URL", api.url)
    folder = store.at(run["run_dir"]).name  # run_id=<readable prefix>.<hash of the raw id>
    client, url = served["client"], f"/api/runs/local-demo/{folder}/again"
    headers = {"Authorization": "Bearer user-token", "X-Bakeoff-Action": "run-again"}
    resp = client.post(url, headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.json()["dag_run_id"] == "manual__again" and resp.json()["again_of"] == "manual__first"
    assert resp.json()["url"] == "/dags/bakeoff/runs/manual__again"
    (call,) = api.calls
    assert call["path"] == "/api/v2/dags/bakeoff/dagRuns" and call["auth"] == "Bearer user-token"
    assert call["body"]["conf"] == conf and call["body"]["logical_date"] is None
    from bakeoff.airflow_api import again_conf  # a run stored when prices were a mapping: the form's lines now

    old = again_conf({"conf": {**conf, "prices": {"mi355x-vllm": 40.0}}})
    assert old["prices"] == ["mi355x-vllm = 40.0"] and again_conf({"conf": {**conf, "prices": {}}})["prices"] is None
    # a cross-site form cannot send the header; unknown or path-like runs are 404, never a path
    assert client.post(url, headers={"Authorization": "Bearer user-token"}).status_code == 403
    assert client.post("/api/runs/local-demo/run_id=nope/again", headers=headers).status_code == 404
    assert client.post("/api/runs/local-demo/..%2Fx/again", headers=headers).status_code == 404
    api.status = 403  # Airflow refuses the caller the trigger: so does run again
    assert client.post(url, headers=headers).status_code == 403
    api.server.shutdown()
