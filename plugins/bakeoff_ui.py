"""Airflow UI plugin: the bake-off dashboard (Runs, Trend, Compare, Explore) and the published reports.

A FastAPI app mounted by the Airflow API server under /bakeoff, and a navigation entry (external
view) that shows it inside the Airflow UI. Files are served only from reports_root() (a local folder
or object storage, through ObjectStoragePath), by plan, run and file name, never by a client-supplied
path. Every string shown is escaped (jinja2 autoescape). The dashboard pages are shaped by
``bakeoff.dashboard`` (this module only routes); their filters and run keys are checked against what
is stored (unknown: 404 naming it), and their CSP runs only this app's own scripts (/static/, a fixed
list of files: the vendored Chart.js and the page script).

Airflow does not authenticate plugin apps, so every route of this app depends on Airflow's own
check: the caller's JWT (Authorization: Bearer, or the UI's `_token` cookie, which is what the
iframe and its links send) must belong to a user the auth manager lets read runs of the `bakeoff`
DAG. No credential or an expired one: 401; an invalid token or a user without that right: 403,
exactly as Airflow's REST API answers.

Parse-time imports stay light (every task loads plugins for their macros; fastapi is already
loaded): Airflow's security module and the report library load on first request.
"""

from __future__ import annotations

import os

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

URL_PREFIX = "/bakeoff"
# reports are static: no scripts, inline styles and data: images only; framing by the Airflow UI only
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"
HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
HTML_HEADERS = {**HEADERS, "Content-Security-Policy": CSP}  # not on PDFs: it would stop the browser's viewer
# dashboard pages: this app's own scripts and stylesheet only (no inline script, no other origin)
DASH_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'self'"
)
DASH_HEADERS = {**HEADERS, "Content-Security-Policy": DASH_CSP}
SERVED = {
    ".html": "text/html; charset=utf-8",
    ".pdf": "application/pdf",
    ".md": "text/markdown; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".json": "application/json",
    ".parquet": "application/octet-stream",
    ".zip": "application/zip",  # the run's evidence bundle (bakeoff.publishing.evidence)
}
DOWNLOADS = {".parquet", ".zip"}  # saved, never shown: Content-Disposition attachment

# the DAG whose runs the reports describe: who may read its runs may read their reports
DAG_ID = "bakeoff"


async def require_run_read(request: Request) -> None:
    """Airflow's own authentication and authorization, as its REST API applies them to GET dagRuns.

    The same two dependencies Airflow's routes declare (get_user, then requires_access_dag for
    DagAccessEntity.RUN with a fixed dag id, so no client parameter picks the DAG checked), called
    here so Airflow's API modules load only when the API server serves a request.
    """
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity  # noqa: PLC0415
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, requires_access_dag  # noqa: PLC0415
    from starlette.concurrency import run_in_threadpool  # noqa: PLC0415

    user = await get_user(request, _oauth_token=None, bearer_credentials=await bearer_scheme(request))
    check = requires_access_dag("GET", DagAccessEntity.RUN, param_dag_id=DAG_ID)
    await run_in_threadpool(check, request, user)  # it queries the DAG's team in the metadata database


app = FastAPI(
    title="bakeoff reports", docs_url=None, redoc_url=None, openapi_url=None, dependencies=[Depends(require_run_read)]
)


def _root():
    """The reports store's root (an ObjectStoragePath)."""
    from bakeoff.paths import at, reports_root  # noqa: PLC0415

    return at(reports_root())


def _runs(plan: str | None = None) -> list[dict]:
    from bakeoff.publishing.publish import list_published  # noqa: PLC0415

    return list_published(_root(), plan)


@app.get("/", response_class=HTMLResponse)
def index() -> HTMLResponse:
    """Every published run, newest first, with links to its reports."""
    from bakeoff.dashboard.render import PAGES  # noqa: PLC0415
    from bakeoff.publishing.publish import render_index  # noqa: PLC0415

    page = render_index("Bake-off reports", _runs(), link_base="reports/", tabs=PAGES)
    return HTMLResponse(page, headers=HTML_HEADERS)


@app.get("/api/runs")
def runs(plan: str | None = None) -> list[dict]:
    """The run list as JSON: plan, run, status, headline and the URL of each report file."""
    out = []
    for r in _runs(plan):
        base = f"{URL_PREFIX}/reports/{r['plan_dir']}/{r['run_dir']}/"
        out.append(
            {
                "plan": r.get("plan"),
                "run_id": r.get("run_id"),
                "status": r.get("status"),
                "started_at": r.get("started_at"),
                "emulated": r.get("emulated"),
                "summary": r.get("summary"),
                "files": {k: base + v for k, v in (r.get("files") or {}).items()},
            }
        )
    return out


def _page(name: str, request: Request) -> HTMLResponse:
    from bakeoff.dashboard import pages, render  # noqa: PLC0415

    build = {
        "runs": pages.runs_page,
        "trend": pages.trend_page,
        "compare": pages.compare_page,
        "explore": pages.explore_page,
    }[name]
    query = {k: v for k, v in request.query_params.items()}
    try:
        data = build(pages.load_runs(_root()), query)
    except pages.NotFound as e:
        raise HTTPException(404, str(e)) from None
    return HTMLResponse(render.render(name, data), headers=DASH_HEADERS)


@app.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request) -> HTMLResponse:
    """Published runs: filter by plan, month, status, emulated; verdict, spend, failed steps, links."""
    return _page("runs", request)


@app.get("/trend", response_class=HTMLResponse)
def trend_page(request: Request) -> HTMLResponse:
    """Per plan and target: cost and throughput per GPU at the SLO across runs."""
    return _page("trend", request)


@app.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request) -> HTMLResponse:
    """Two runs (or two targets of two runs) side by side."""
    return _page("compare", request)


@app.get("/explore", response_class=HTMLResponse)
def explore_page(request: Request) -> HTMLResponse:
    """Throughput per GPU against interactivity across stored runs, filtered, on a chosen TCO basis."""
    return _page("explore", request)


@app.get("/static/{name}")
def static(name: str) -> Response:
    """One of the dashboard's own static files, by name from a fixed list."""
    from bakeoff.dashboard.render import static_file  # noqa: PLC0415

    found = static_file(name)
    if found is None:
        raise HTTPException(404, "no such file")
    return Response(found[0], media_type=found[1], headers=HEADERS)


@app.get("/reports/{plan}/{run}/{name}")
def report_file(plan: str, run: str, name: str) -> Response:
    """One report file of a published run; only names the run's manifest lists are served, and each
    part must be one plain path component, so nothing outside the reports store can be named."""
    from bakeoff.paths import safe_name  # noqa: PLC0415

    if any(safe_name(part) != part for part in (plan, run, name)):
        raise HTTPException(404, "no such report")
    manifest = next((r for r in _runs() if r["plan_dir"] == plan and r["run_dir"] == run), None)
    if manifest is None or name not in (manifest.get("files") or {}).values():
        raise HTTPException(404, "no such report")
    suffix = "." + name.rpartition(".")[2] if "." in name else ""
    media = SERVED.get(suffix)
    path = _root() / plan / run / name
    if media is None or not path.is_file():
        raise HTTPException(404, "no such report")
    headers = HTML_HEADERS if suffix == ".html" else dict(HEADERS)
    if suffix in DOWNLOADS:
        headers["Content-Disposition"] = f'attachment; filename="{name}"'  # name is one safe_name component
    return Response(path.read_bytes(), media_type=media, headers=headers)


AGAIN_HEADER = "X-Bakeoff-Action"  # a custom header: a cross-site form or link cannot send it (CSRF)


@app.post("/api/runs/{plan}/{run}/again")
def run_again(plan: str, run: str, request: Request) -> dict:
    """Trigger the same plan with the configuration this run was started with (its start record),
    through Airflow's REST API as the caller (their token is forwarded), so Airflow decides whether
    they may trigger the DAG; every trigger-time check (budget guard, approval) runs as usual."""
    from bakeoff import store  # noqa: PLC0415
    from bakeoff.airflow_api import URL_ENV, AirflowApiError, trigger_again  # noqa: PLC0415
    from bakeoff.paths import at, results_root, safe_name  # noqa: PLC0415

    if request.headers.get(AGAIN_HEADER) != "run-again":
        raise HTTPException(403, f"run again needs the header {AGAIN_HEADER}: run-again (sent by the Runs page)")
    if any(safe_name(part) != part for part in (plan, run)) or not run.startswith("run_id="):
        raise HTTPException(404, "no such run")
    start = store.run_facts(at(results_root()) / plan / run).start
    if not start.run_id:
        raise HTTPException(404, f"no such run: {run} of plan {plan}")
    auth = request.headers.get("authorization", "")
    token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else request.cookies.get("_token", "")
    base = os.environ.get(URL_ENV, "").strip()  # configuration only: never the request's Host header
    if not base:
        raise HTTPException(
            503,
            f"run again is not configured: set {URL_ENV} on the api-server to Airflow's own API URL "
            "(http://localhost:8080 in compose)",
        )
    try:
        new = trigger_again(base, token, start.to_json())
    except AirflowApiError as e:
        raise HTTPException(e.status if e.status in (400, 401, 403, 404, 409) else 502, str(e)) from None
    return {**new, "again_of": start.run_id, "url": f"/dags/{DAG_ID}/runs/{new['dag_run_id']}"}


class BakeoffUiPlugin(AirflowPlugin):
    name = "bakeoff_ui"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "bakeoff reports"}]
    external_views = [
        {
            "name": "Bake-off dashboard",
            "href": "bakeoff/runs",
            "url_route": "bakeoff-dashboard",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "Bake-off reports",
            "href": "bakeoff/",
            "url_route": "bakeoff",
            "destination": "nav",
            "category": "browse",
        },
    ]
