"""The Airflow UI plugin: run list, report serving, escaping, and no path tricks."""

import importlib.util
import re
from pathlib import Path

import pytest
import synthetic
from fastapi.testclient import TestClient
from synthetic import XSS

from bakeoff.cost import cost_run
from bakeoff.paths import run_folder
from bakeoff.publishing.publish import publish
from bakeoff.report import build_report

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "bakeoff_ui.py"


def load_plugin():
    spec = importlib.util.spec_from_file_location("bakeoff_ui_under_test", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    base = tmp_path_factory.mktemp("ui")
    mp = pytest.MonkeyPatch()
    mp.setenv("BAKEOFF_REPORTS", str(base / "reports"))
    plan = synthetic.make_plan(names=("mi355x-vllm", XSS))
    rdir = synthetic.make_run(base / "results", plan, run_id="manual__2026-11-02T10:00:00+00:00")
    cost_run(plan, rdir)
    paths = build_report(plan, rdir, base / "build")
    result = publish(plan, rdir, paths)
    mod = load_plugin()
    # content only: who may read is answered by Airflow's create_app() below and in tests/security
    mod.app.dependency_overrides[mod.require_run_read] = lambda: None
    yield {"client": TestClient(mod.app), "result": result, "mod": mod}
    mp.undo()


def test_plugin_registers_app_and_nav_link():
    mod = load_plugin()
    p = mod.BakeoffUiPlugin
    assert p.fastapi_apps[0]["url_prefix"] == "/bakeoff" and p.fastapi_apps[0]["app"] is mod.app
    view = p.external_views[0]
    assert view["destination"] == "nav" and not view["href"].startswith("/")


def test_run_list_json(published):
    runs = published["client"].get("/api/runs").json()
    assert len(runs) == 1
    r = runs[0]
    assert r["plan"] == "synthetic" and r["run_id"] == "manual__2026-11-02T10:00:00+00:00" and r["emulated"] is True
    assert set(r["files"]) >= {"html", "pdf", "markdown", "csv_points"}
    assert all(u.startswith("/bakeoff/reports/synthetic/") for u in r["files"].values())


def test_index_page_escapes_and_links(published):
    resp = published["client"].get("/")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in resp.headers["content-security-policy"]
    html = resp.text
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the target name in the headline, as text
    folder = run_folder("manual__2026-11-02T10:00:00+00:00")
    assert "EMULATED" in html and f'href="reports/synthetic/run_id%3D{folder}/' in html


def test_the_reports_page_links_every_file_and_has_the_dashboards_tabs(published):
    html = published["client"].get("/").text
    runs = published["client"].get("/api/runs").json()
    files = runs[0]["files"]
    links = re.findall(r'<a href="reports/[^"]+/([^"/]+)">([^<]+)</a>', html)
    assert {name for name, _ in links} == {u.rsplit("/", 1)[1] for u in files.values()}  # every file, linked
    assert "files</span>" not in html and all("_" not in text for _, text in links)  # labels, not keys
    assert "report" in dict((t, n) for n, t in links) and "brief (PDF)" in {t for _, t in links}
    tabs = re.search(r'<nav class="tabs">(.*?)</nav>', html, re.S)
    assert tabs and re.findall(r'href="([^"]+)"', tabs.group(1)) == ["runs", "trend", "compare", "explore", "./"]


def test_the_evidence_bundle_is_listed_as_such(tmp_path):
    from bakeoff.publishing.publish import render_index

    run = {
        "plan": "p",
        "plan_dir": "p",
        "run_id": "r",
        "run_dir": "run_id=r.1",
        "started_at": 0,
        "files": {"evidence": "b.zip"},
    }
    html = render_index("reports", [run], link_base="reports/")
    assert '<a href="reports/p/run_id%3Dr.1/b.zip">evidence bundle</a>' in html
    assert '<nav class="tabs">' not in html  # the static index in the store has no dashboard beside it


def test_serves_a_report(published):
    client = published["client"]
    runs = client.get("/api/runs").json()
    html_url = runs[0]["files"]["html"].removeprefix("/bakeoff")
    resp = client.get(html_url)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in resp.text and XSS not in resp.text
    pdf = client.get(runs[0]["files"]["pdf"].removeprefix("/bakeoff"))
    assert (
        pdf.status_code == 200 and pdf.content.startswith(b"%PDF") and pdf.headers["content-type"] == "application/pdf"
    )


@pytest.mark.parametrize(
    "url",
    [
        "/reports/synthetic/run_id=nope/x.html",
        "/reports/synthetic/run_id=manual__2026-11-02T10_00_00_00_00/manifest.json",  # not a listed report file
        "/reports/synthetic/..%2F..%2Fetc/passwd",
        "/reports/../../etc/passwd",
        "/reports/%2E%2E/synthetic/index.json",
    ],
)
def test_unknown_or_escaping_paths_are_404(published, url):
    assert published["client"].get(url).status_code == 404


def test_airflow_mounts_the_app_behind_its_own_auth(published, tmp_path, airflow_db):
    """Airflow's create_app (in a fresh process, as the api-server builds it) mounts the app under
    its prefix, behind Airflow's auth: a viewer reads the run list, an anonymous caller gets 401."""
    import json

    from airflow_auth import SIMPLE, ask, migrated_home

    env = migrated_home(tmp_path, Path(str(published["mod"]._root())), airflow_db)
    reqs = [{"path": "/bakeoff/api/runs", "as": "viewer"}, {"path": "/bakeoff/api/runs"}, {"path": "/api/v2/dags"}]
    viewer, anonymous, api = ask(env, SIMPLE, {"viewer": "viewer"}, reqs, tmp_path)
    assert viewer["status"] == 200
    assert [r["run_id"] for r in json.loads(viewer["body"])] == ["manual__2026-11-02T10:00:00+00:00"]
    assert anonymous["status"] == api["status"] == 401


def test_loading_the_plugin_leaves_airflows_api_modules_unloaded():
    """Every task loads plugins (for their macros): the auth check imports Airflow's API on first request only."""
    import subprocess
    import sys

    code = (
        "import sys, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('bakeoff_ui', {str(PLUGIN)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(sorted(m for m in sys.modules if m.startswith('airflow.api_fastapi.core_api')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_serves_reports_from_an_s3_reports_store(s3_store, tmp_path):
    """Reports published to object storage are served the same way, by plan, run and listed name only."""
    plan = synthetic.make_plan()
    rdir = synthetic.make_run(tmp_path / "results", plan, run_id="manual__s3-ui")
    cost_run(plan, rdir)
    publish(plan, rdir, build_report(plan, rdir, tmp_path / "build"))
    mod = load_plugin()
    mod.app.dependency_overrides[mod.require_run_read] = lambda: None
    client = TestClient(mod.app)
    assert str(mod._root()).startswith(f"s3://bakeoff_store_test@{s3_store}/")
    runs = client.get("/api/runs").json()
    assert [r["run_id"] for r in runs] == ["manual__s3-ui"]
    pdf = client.get(runs[0]["files"]["pdf"].removeprefix("/bakeoff"))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    assert client.get("/reports/synthetic/run_id=manual__s3-ui/manifest.json").status_code == 404
