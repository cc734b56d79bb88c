"""HTML for the dashboard pages (jinja2, autoescaped) and the static files they load.

Chart series travel as JSON in a non-executable ``<script type="application/json">`` block (jinja's
``tojson`` escapes ``<``, ``>``, ``&`` and quotes), drawn by ``static/dashboard.js`` with the
vendored Chart.js; the pages carry no inline script, so a CSP of ``script-src 'self'`` holds.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from bakeoff.dashboard.pages import _fmt, human

if TYPE_CHECKING:
    from jinja2 import Environment

PAGES = ("runs", "trend", "compare", "explore")
# what /static/<name> may serve: a fixed list, never a path from the URL
STATIC = {
    "chart.umd.min.js": "text/javascript; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "LICENSE-chart.js.txt": "text/plain; charset=utf-8",
}
DAG_ID = "bakeoff"


@cache
def _env() -> Environment:
    from jinja2 import Environment, PackageLoader, select_autoescape  # noqa: PLC0415 - jinja2 only when a page renders

    env = Environment(
        loader=PackageLoader("bakeoff.dashboard", "templates"), autoescape=select_autoescape(default=True)
    )
    env.globals.update(f=_fmt, human=human, pages=PAGES, query=_query, airflow_run=airflow_run_url, pct=_pct)
    env.filters["q"] = lambda s: quote(str(s), safe="")
    return env


def _pct(x: object) -> str:
    return "–" if x is None else f"{x:.1f}%"


def _query(**kw: Any) -> str:
    return "?" + urlencode({k: v for k, v in kw.items() if v not in (None, "")})


def airflow_run_url(run_id: str) -> str:
    """The run's page in the Airflow UI, relative to the plugin's mount (/bakeoff/<page>)."""
    return f"../dags/{DAG_ID}/runs/{quote(str(run_id), safe='')}"


def render(page: str, data: dict[str, Any]) -> str:
    charts = data.get("charts") or []
    return _env().get_template(f"{page}.html.j2").render(page=page, d=data, charts=charts)


def static_file(name: str) -> tuple[bytes, str] | None:
    media = STATIC.get(name)
    if media is None:
        return None
    return resources.files("bakeoff.dashboard").joinpath("static", name).read_bytes(), media
