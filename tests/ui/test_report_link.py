"""The DAG run's "Report" extra link points at the plugin's route for the run's published HTML report."""

from __future__ import annotations

from types import SimpleNamespace

from bakeoff_links import ReportLink, report_url

PUBLISHED = {
    "files": {
        "html": "/data/reports/local-demo/run_id=manual__2026-12-05T03_06_20.1.abc/bakeoff-local-demo.html",
        "pdf": "/data/reports/local-demo/run_id=manual__2026-12-05T03_06_20.1.abc/bakeoff-local-demo-brief.pdf",
    }
}


def test_the_link_is_the_plugins_route_for_the_html_report():
    url = report_url(PUBLISHED, "http://localhost:8080/")
    assert url == (
        "http://localhost:8080/bakeoff/reports/local-demo/run_id%3Dmanual__2026-12-05T03_06_20.1.abc/bakeoff-local-demo.html"
    )
    s3 = {"files": {"html": "s3://bucket/reports/p/run_id=r.1/x.html"}}
    assert report_url(s3) == "/bakeoff/reports/p/run_id%3Dr.1/x.html"


def test_no_published_report_is_no_link():
    assert report_url(None) == "" and report_url({"files": {}}) == "" and report_url("garbage") == ""


def test_the_link_reads_publishs_own_return_value():
    asked = []

    def xcom_pull(task_ids):
        asked.append(task_ids)
        return PUBLISHED

    ti = SimpleNamespace(task_id="publish", xcom_pull=xcom_pull)
    url = ReportLink().get_link(None, ti_key=ti)
    assert asked == ["publish"] and url.endswith(
        "/bakeoff/reports/local-demo/run_id%3Dmanual__2026-12-05T03_06_20.1.abc/bakeoff-local-demo.html"
    )
