"""Attacks on the reports plugin (/bakeoff), answered through Airflow's own create_app().

Airflow does not authenticate plugin apps by itself; each case here was a 200 before the plugin
app depended on Airflow's security check. Each answer is compared with what Airflow's REST API
answers for the same credential, so the reports are exactly as closed as /api/v2.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jwt
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ui"))
from airflow_auth import FAB, SIMPLE, ask, migrated_home

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

RUN_DIR = "manual__2026-11-01T00_00_00_00_00"
REPORT_TEXT = "confidential bake-off figures"
PAGES = [
    "/bakeoff/",
    "/bakeoff/api/runs",
    f"/bakeoff/reports/local-demo/{RUN_DIR}/report.html",
    f"/bakeoff/reports/local-demo/{RUN_DIR}/report.pdf",
    "/bakeoff/runs",
    "/bakeoff/trend",
    "/bakeoff/compare",
    "/bakeoff/explore",
    "/bakeoff/static/dashboard.js",
]


def _b64(doc: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


def _claims() -> dict:
    now = int(time.time())
    return {"sub": "admin", "role": "admin", "aud": "apache-airflow", "iat": now, "nbf": now, "exp": now + 600}


# tokens an attacker can make without the server's JWT secret
FORGED = {
    "garbage": "not-a-jwt",
    "other key": jwt.encode(_claims(), "not-the-servers-secret-" * 4, algorithm="HS512"),
    "alg none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(_claims())}.",
}


def _publish_one_run(reports: Path) -> None:
    from bakeoff.publishing.publish import MANIFEST

    run = reports / "local-demo" / RUN_DIR
    run.mkdir(parents=True)
    (run / "report.html").write_text(f"<!doctype html><h1>{REPORT_TEXT}</h1>")
    (run / "report.pdf").write_bytes(b"%PDF-1.4\n% " + REPORT_TEXT.encode() + b"\n%%EOF\n")
    (run / MANIFEST).write_text(
        json.dumps(
            {
                "plan": "local-demo",
                "run_id": "manual__2026-11-01T00:00:00+00:00",
                "started_at": 1793491200,
                "status": "published",
                "emulated": True,
                "summary": REPORT_TEXT,
                "files": {"html": "report.html", "pdf": "report.pdf"},
            }
        )
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory, airflow_db):
    base = tmp_path_factory.mktemp("reports-auth")
    _publish_one_run(base / "reports")
    return migrated_home(base, base / "reports", airflow_db)


def _simple_spec() -> tuple[dict, list[str], list[tuple[str, dict]]]:
    """Simple auth manager (make ui): one viewer; every credential case on every page."""
    cases = [
        ("anonymous", {}),
        ("viewer expired", {"as": "viewer:expired"}),
        ("viewer expired cookie", {"as": "viewer:expired", "via": "cookie"}),
        *[(f"forged {k}", {"token": t}) for k, t in FORGED.items()],
        *[(f"forged {k} cookie", {"token": t, "via": "cookie"}) for k, t in FORGED.items()],
        ("viewer", {"as": "viewer"}),
        ("viewer cookie", {"as": "viewer", "via": "cookie"}),
    ]
    return {"viewer": "viewer"}, ["/api/v2/dags", *PAGES], cases


def _fab_spec() -> tuple[dict, list[str], list[tuple[str, dict]]]:
    """FAB auth manager (compose): a Viewer, and a user who may read another DAG's runs only."""
    users = {"viewer": "Viewer", "other": [["can_read", "DAG:bakeoff_reaper"], ["can_read", "DAG Runs"]]}
    paths = [
        "/api/v2/dags/bakeoff/dagRuns",
        *PAGES,
        "/bakeoff/api/runs?dag_id=bakeoff_reaper",
        "/bakeoff/?dag_id=bakeoff_reaper",
    ]
    cases = [
        ("other", {"as": "other"}),
        ("other cookie", {"as": "other", "via": "cookie"}),
        ("viewer", {"as": "viewer"}),
        ("viewer cookie", {"as": "viewer", "via": "cookie"}),
        ("anonymous", {}),
        ("forged other key", {"token": FORGED["other key"]}),
    ]
    return users, paths, cases


@pytest.fixture(scope="module")
def asked(env, tmp_path_factory) -> dict[str, dict]:
    """Both auth managers' answers, keyed (path, case), asked at once: each create_app process keeps one
    core busy for a minute or more, and the serial suite leaves the other core idle meanwhile."""
    specs = {SIMPLE: ("simple", _simple_spec()), FAB: ("fab", _fab_spec())}
    with ThreadPoolExecutor(len(specs)) as pool:
        futures = {
            manager: pool.submit(
                ask,
                env,
                manager,
                users,
                [{"path": p, **c} for p in paths for _, c in cases],
                tmp_path_factory.mktemp(name),
            )
            for manager, (name, (users, paths, cases)) in specs.items()
        }
    answers = {}
    for manager, (_, (_, paths, cases)) in specs.items():
        it = iter(futures[manager].result())
        answers[manager] = {(p, name): next(it) for p in paths for name, _ in cases}
    return answers


@pytest.fixture(scope="module")
def simple(asked):
    return asked[SIMPLE]


@pytest.fixture(scope="module")
def fab(asked):
    return asked[FAB]


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize(
    "case",
    [
        "anonymous",
        "viewer expired",
        "viewer expired cookie",
        *[f"forged {k}" for k in FORGED],
        *[f"forged {k} cookie" for k in FORGED],
    ],
)
def test_no_valid_token_no_report(simple, page, case):
    """No token, an expired one or a forged one: refused as Airflow's REST API refuses it (401/403)."""
    got, api = simple[(page, case)], simple[("/api/v2/dags", case)]
    assert api["status"] in (401, 403)
    assert got["status"] == api["status"], (page, case, got)
    assert REPORT_TEXT not in got["body"] and "local-demo" not in got["body"]


def test_anonymous_is_401_and_a_bad_token_403_like_the_rest_api(simple):
    assert simple[("/bakeoff/api/runs", "anonymous")]["status"] == 401
    assert simple[("/bakeoff/api/runs", "forged other key")]["status"] == 403


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("case", ["other", "other cookie"])
def test_a_user_who_may_not_read_bakeoff_runs_gets_403(fab, page, case):
    """Read access to another DAG's runs does not open the bake-off's reports, as it does not open its runs."""
    assert fab[("/api/v2/dags/bakeoff/dagRuns", case)]["status"] == 403
    got = fab[(page, case)]
    assert got["status"] == 403, (page, case, got)
    assert REPORT_TEXT not in got["body"]


@pytest.mark.parametrize("page", ["/bakeoff/api/runs?dag_id=bakeoff_reaper", "/bakeoff/?dag_id=bakeoff_reaper"])
def test_a_dag_id_parameter_does_not_choose_the_dag_checked(fab, page):
    """The check is on the bakeoff DAG whatever the query says (a readable dag_id opens nothing)."""
    assert fab[(page, "other")]["status"] == 403 and fab[(page, "other cookie")]["status"] == 403
    assert fab[(page, "viewer")]["status"] == 200


@pytest.mark.parametrize("page", PAGES)
def test_fab_anonymous_and_forged_are_refused(fab, page):
    assert fab[(page, "anonymous")]["status"] == 401
    assert fab[(page, "forged other key")]["status"] == 403


@pytest.mark.parametrize("answers", ["simple", "fab"])
@pytest.mark.parametrize("case", ["viewer", "viewer cookie"])
def test_a_viewer_reads_the_reports_with_a_token_or_the_ui_cookie(request, answers, case):
    got = request.getfixturevalue(answers)
    runs = got[("/bakeoff/api/runs", case)]
    assert runs["status"] == 200 and [r["run_id"] for r in json.loads(runs["body"])] == [
        "manual__2026-11-01T00:00:00+00:00"
    ]
    assert got[("/bakeoff/", case)]["status"] == 200 and RUN_DIR in got[("/bakeoff/", case)]["body"]
    html = got[(f"/bakeoff/reports/local-demo/{RUN_DIR}/report.html", case)]
    assert html["status"] == 200 and REPORT_TEXT in html["body"]
    pdf = got[(f"/bakeoff/reports/local-demo/{RUN_DIR}/report.pdf", case)]
    assert pdf["status"] == 200 and pdf["type"] == "application/pdf" and pdf["body"].startswith("%PDF")
    dash = got[("/bakeoff/runs", case)]
    assert dash["status"] == 200 and "manual__2026-11-01T00:00:00+00:00" in dash["body"]
    assert got[("/bakeoff/static/dashboard.js", case)]["status"] == 200
