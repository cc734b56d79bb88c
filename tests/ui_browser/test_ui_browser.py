"""The Airflow UI as a user meets it, in headless Chromium (Debian's chromium + chromium-driver).

An api-server is started on a free loopback port with a login required (simple auth manager),
the repository's DAGs serialised into a fresh SQLite database and one published run on disk.
The browser logs in, opens the `bakeoff` trigger form, finds every Param the API reports for the
DAG, triggers a run with a plan, and opens the plugin's reports page from the navigation (the
plugin requires Airflow's login: the page and the report it links to load with the UI's cookie).
The Airflow 3 UI is a React app: every step waits for the element it needs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.ui_browser.browser_site import (
    CHROMEDRIVER,
    CHROMIUM,
    CHROMIUM_FLAGS,
    PASSWORD,
    ROOT,
    SECRET_KEY,
    SIMPLE_AUTH_MANAGER,
    USER,
    by_text,
    free_port,
    start_api_server,
    stop,
    wait,
)

OUTSIDER = "outsider"  # an admin too, but not in the approving role (Variable bakeoff_approvers)
BUNDLE_PLAN, BUNDLE_RUN = "synthetic", "manual__2026-10-01T00:00:00+00:00"
RUN_DIR = "manual__2026-11-01T00_00_00_00_00"
REPORT_TEXT = "EMULATED demo report for the browser test"

pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
    ),
    pytest.mark.timeout(900),  # the first test waits for the module's api-server (minutes on a loaded machine)
]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402


def _publish_one_run(reports: Path) -> None:
    """A published run as the publish step leaves it: report files plus the manifest the UI lists."""
    from bakeoff.publishing.publish import MANIFEST

    run = reports / "local-demo" / RUN_DIR
    run.mkdir(parents=True)
    (run / "report.html").write_text(f"<!doctype html><title>report</title><h1>{REPORT_TEXT}</h1>")
    (run / MANIFEST).write_text(
        json.dumps(
            {
                "plan": "local-demo",
                "run_id": "manual__2026-11-01T00:00:00+00:00",
                "started_at": 1793491200,
                "status": "published",
                "emulated": True,
                "summary": "EMULATED",
                "published_at": 1793491300,
                "files": {"html": "report.html"},
                "dashboard": _dashboard_doc(),
            }
        )
    )


def _dashboard_doc() -> dict:
    """The dashboard document publish writes (bakeoff.report.summary), for two targets."""

    def target(name: str, gpu: str, tps: float) -> dict:
        frontier = [
            {
                "concurrency": c,
                "interactivity": 100 / (1 + 0.05 * c),
                "output_tps_per_gpu": tps * c / (1 + 0.05 * c),
                "total_tps_per_gpu": 9 * tps * c / (1 + 0.05 * c),
                "usd_per_m_output": 1000 / (tps * c),
                "usd_per_m_total": 111 / (tps * c),
                "meets_slo": c < 16,
            }
            for c in (1, 4, 16)
        ]
        return {
            "name": name,
            "emulated": True,
            "config": {
                "gpu": gpu,
                "engine": "vllm",
                "model": "llama-3.1-70b",
                "precision": "fp8",
                "speculative": "none",
            },
            "status": "passed",
            "accuracy": "not run",
            "provisioned": True,
            "workloads": {
                "chat-1k-128": {
                    "slo_met": True,
                    "usd_per_m": 250 / tps,
                    "ci": [240 / tps, 260 / tps],
                    "tps_per_gpu": tps * 4 / 1.15,
                    "interactivity": 87.0,
                    "concurrency": 4,
                    "repeats": 2,
                    "tco": {"hyperscaler": 100 / tps},
                    "frontier": frontier,
                }
            },
        }

    return {
        "version": 1,
        "basis": "output",
        "workload": "chat-1k-128",
        "verdict": {"cheaper": "mi355x-vllm", "clear": True, "tied_with": []},
        "spend_usd": 0.0,
        "tco_tiers": ["hyperscaler"],
        "targets": {
            "mi355x-vllm": target("mi355x-vllm", "mi355x", 12.0),
            "b200-vllm": target("b200-vllm", "b200", 10.0),
        },
    }


def _publish_a_run_with_its_bundle(data: Path, build: Path) -> None:
    """A run of its own plan costed, reported, bundled and published as the DAG's publish step leaves it
    (older than the other run, so it is the Runs page's second row)."""
    sys.path.insert(0, str(ROOT / "tests" / "report"))  # the synthetic-run builder the report tests share
    import synthetic

    from bakeoff.cost import cost_run
    from bakeoff.publishing import evidence
    from bakeoff.publishing.publish import publish
    from bakeoff.report import build_report

    mp = pytest.MonkeyPatch()
    mp.setenv("BAKEOFF_DATA", str(data))
    mp.setenv("BAKEOFF_SECRET_KEY", SECRET_KEY)
    mp.delenv("BAKEOFF_REPORTS", raising=False)
    try:
        plan = synthetic.make_plan(concurrency=(1, 4))
        assert plan.name == BUNDLE_PLAN
        rdir = synthetic.make_run(data / "results", plan, run_id=BUNDLE_RUN, started_at=1790812800)
        cost_run(plan, rdir)
        paths = build_report(plan, rdir, build)
        publish(plan, rdir, {**paths, "evidence": str(evidence.build(plan, rdir, paths, build))})
    finally:
        mp.undo()


APPROVAL_DAG, TIMEOUT_DAG = "bakeoff_approval_check", "bakeoff_approval_timeout"
APPROVAL_CASES = ("approve", "reject", "outsider")


def _start_approval_runners(env: dict, home: Path) -> dict[str, subprocess.Popen]:
    """The approval DAGs run by Airflow's dag.test() against this api-server's database (see
    approval_runner.py): the role is {admin}; the timeout DAG waits the shortest timeout the Variable
    allows (0.01 h) with the scheduler's timeout sweep on."""
    runner = str(Path(__file__).with_name("approval_runner.py"))
    env = {**env, "AIRFLOW_VAR_BAKEOFF_APPROVERS": json.dumps([USER]), "PYTHONPATH": str(ROOT / "include")}
    started = {}
    for dag_id, args, extra in (
        (APPROVAL_DAG, list(APPROVAL_CASES), {}),
        (TIMEOUT_DAG, ["timeout", "--sweep"], {"AIRFLOW_VAR_BAKEOFF_APPROVAL_TIMEOUT_H": "0.01"}),
    ):
        out = open(home / f"{dag_id}.log", "w")
        started[dag_id] = subprocess.Popen(
            [sys.executable, runner, dag_id, *args],
            env={**env, **extra},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return started


@pytest.fixture(scope="module")
def airflow_site(tmp_path_factory, airflow_db):
    """An api-server with auth on, the repo's DAGs and plugins and two published runs (one with its
    evidence bundle), and the approval DAG runs waiting for an answer: its URL, environment and home."""
    home = tmp_path_factory.mktemp("ui-browser")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD, OUTSIDER: PASSWORD}))
    dags = home / "dags"  # the repository's DAGs and the approval tests' own (tests/ui_browser/dags)
    dags.mkdir()
    for f in [*(ROOT / "dags").glob("*.py"), *(Path(__file__).parent / "dags").glob("*.py")]:
        (dags / f.name).symlink_to(f)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BAKEOFF"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin,{OUTSIDER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__WORKERS": "1",
            "BAKEOFF_DATA": str(home / "data"),
            "BAKEOFF_SECRET_KEY": SECRET_KEY,
        }
    )
    (home / "airflow").mkdir()
    _publish_one_run(home / "data" / "reports")
    _publish_a_run_with_its_bundle(home / "data", home / "build")
    shutil.copyfile(airflow_db, home / "airflow.db")  # the session's migrated database (tests/conftest.py)
    proc, base, log = start_api_server(env, home, port)
    try:
        runners = _start_approval_runners(env, home)
        yield {"base": base, "env": env, "home": home, "runners": runners}
    finally:
        for p in locals().get("runners", {}).values():  # test harness on a throwaway database: nothing to save
            stop(p, signal.SIGKILL)
        stop(proc, signal.SIGTERM)
        log.close()


@pytest.fixture(scope="module")
def api_server(airflow_site) -> str:
    return airflow_site["base"]


@pytest.fixture(scope="module")
def api(api_server):
    token = httpx.post(f"{api_server}/auth/token", json={"username": USER, "password": PASSWORD}).json()
    with httpx.Client(
        base_url=f"{api_server}/api/v2", headers={"Authorization": f"Bearer {token['access_token']}"}, timeout=30
    ) as client:
        yield client


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # CSP violations are logged here
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def logged_in(browser, api_server):
    browser.get(api_server + "/")
    wait(browser).until(EC.url_contains("/auth/login"))  # the UI is not open without a login
    wait(browser).until(EC.presence_of_element_located((By.NAME, "username"))).send_keys(USER)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser).until(EC.url_to_be(api_server + "/"))
    return browser


def test_a_wrong_password_does_not_log_in(api_server):
    r = httpx.post(f"{api_server}/auth/token", json={"username": USER, "password": "wrong"})
    assert r.status_code in (401, 403)
    assert httpx.get(f"{api_server}/api/v2/dags").status_code == 401
    assert httpx.get(f"{api_server}/bakeoff/api/runs").status_code == 401  # the reports plugin too
    assert httpx.get(f"{api_server}/bakeoff/reports/local-demo/{RUN_DIR}/report.html").status_code == 401


def test_trigger_form_shows_the_plans_params_and_triggers_a_run(logged_in, api_server, api):
    browser = logged_in
    params = api.get("/dags/bakeoff/details").raise_for_status().json()["params"]
    titles = {name: (p.get("schema") or {}).get("title") or name for name, p in params.items()}
    assert "plan" in titles

    browser.get(api_server + "/dags/bakeoff")
    wait(browser).until(EC.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))).click()
    dialog = wait(browser).until(
        EC.visibility_of_element_located((By.CSS_SELECTOR, "[role=dialog][data-state=open][aria-modal=true]"))
    )
    wait(browser).until(EC.visibility_of_element_located(by_text("p", "Run Parameters")))
    for name, title in titles.items():
        # each Param is one labelled field group; its input is named element_<param>
        field = f"[@id='element_{name}' or @name='element_{name}']"
        group = wait(browser).until(
            EC.presence_of_element_located(
                (By.XPATH, f"//*[@role='dialog' and @data-state='open']//*[@role='group'][.//label][.//*{field}]")
            ),
            f"param {name} is not in the trigger form",
        )
        label = group.find_element(By.TAG_NAME, "label").text
        assert label.startswith(title), f"param {name}: label {label!r}, expected {title!r}"

    plan = dialog.find_element(By.ID, "element_plan")
    if plan.tag_name in ("input", "textarea"):
        plan.send_keys("local-demo")
    else:  # a Param with an enum: a react-select combobox; type to filter, then pick the exact option
        plan.find_element(By.CSS_SELECTOR, "input[role=combobox]").send_keys("local-demo")
        # the option reads as the DAG labels it (with the plan's predicted spend where the index has it)
        shown = ((params["plan"].get("schema") or {}).get("values_display") or {}).get("local-demo", "local-demo")
        wait(browser).until(
            EC.element_to_be_clickable((By.XPATH, f'//*[@role="option" and normalize-space()="{shown}"]')),
            f"no option {shown!r} in the plan list",
        ).click()
    trigger = wait(browser).until(
        EC.element_to_be_clickable(
            (By.XPATH, "//*[@role='dialog' and @data-state='open']//button[normalize-space()='Trigger']")
        )
    )
    trigger.click()

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        runs = api.get("/dags/bakeoff/dagRuns").raise_for_status().json()["dag_runs"]
        if runs:
            break
        time.sleep(1)
    assert runs, "the trigger form did not create a run"
    assert runs[0]["conf"].get("plan") == "local-demo"


def test_the_grid_shows_one_target_group_and_no_provider_groups(logged_in, api_server, api):
    """The DAG's grid as a user meets it: one group of the run's targets (each target a map index, labelled
    by name once the run expands it) and one targets task, whatever clouds the installed plans name."""
    browser = logged_in
    tasks = {t["task_id"] for t in api.get("/dags/bakeoff/tasks").raise_for_status().json()["tasks"]}
    assert {"targets_of", "target.wait_slot", "target.provision", "target.terminate"} <= tasks
    assert not [t for t in tasks if t.endswith("_targets") or t.split(".")[0] in ("aws", "local", "oci", "vultr")]
    browser.get(api_server + "/dags/bakeoff")
    group = wait(browser).until(EC.visibility_of_element_located((By.CSS_SELECTOR, "[data-testid='task-target']")))
    assert group.text.startswith("target [")  # a mapped group: its map indexes in the brackets once expanded
    # the task list's rows (the run columns' cells carry data-task-id too, with a data-run-id)
    rows = [
        e.get_attribute("data-task-id") for e in browser.find_elements(By.CSS_SELECTOR, "[data-node-id][data-task-id]")
    ]
    assert "targets_of" in rows and rows.count("target") == 1, rows
    assert not [r for r in rows if r.endswith("_targets") or r in ("aws", "local", "oci", "vultr")], rows
    browser.find_element(By.CSS_SELECTOR, "[aria-label='Toggle group'][data-group-id='target']").click()
    wait(browser).until(
        EC.visibility_of_element_located((By.CSS_SELECTOR, "[data-node-id][data-task-id='target.wait_slot']"))
    )
    inside = browser.find_elements(By.CSS_SELECTOR, "[data-node-id][data-task-id^='target.']")
    steps = [e.get_attribute("data-task-id") for e in inside]
    assert steps[:3] == ["target.wait_slot", "target.provision", "target.wait_node"], steps
    if os.environ.get("BAKEOFF_SCREENSHOTS"):  # a person looking: the grid with the group open
        browser.save_screenshot(str(Path(os.environ["BAKEOFF_SCREENSHOTS"]) / "grid.png"))


def test_reports_page_is_reachable_from_the_navigation_and_serves_a_report(logged_in, api_server):
    browser = logged_in
    browser.get(api_server + "/")
    wait(browser).until(EC.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Browse']"))).click()
    wait(browser).until(
        EC.element_to_be_clickable((By.CSS_SELECTOR, "[role=menuitem][data-value='Bake-off reports']"))
    ).click()
    frame = wait(browser).until(EC.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='bakeoff']")))
    browser.switch_to.frame(frame)
    try:
        wait(browser).until(EC.visibility_of_element_located(by_text("h1", "Bake-off reports")))
        link = wait(browser).until(EC.element_to_be_clickable((By.CSS_SELECTOR, f"a[href*='{RUN_DIR}']")))
        link.click()
        wait(browser).until(EC.visibility_of_element_located(by_text("h1", REPORT_TEXT)))
    finally:
        browser.switch_to.default_content()


@pytest.fixture(scope="module")
def dashboard(logged_in, api_server):
    """The dashboard, opened from the navigation: its Runs page inside the Airflow UI's frame."""
    browser = logged_in
    browser.get(api_server + "/")
    wait(browser).until(EC.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Browse']"))).click()
    wait(browser).until(
        EC.element_to_be_clickable((By.CSS_SELECTOR, "[role=menuitem][data-value='Bake-off dashboard']"))
    ).click()
    frame = wait(browser).until(EC.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='bakeoff']")))
    browser.switch_to.frame(frame)
    browser.get_log("browser")  # start each page's check with an empty console
    yield browser
    browser.switch_to.default_content()


def _open_tab(browser, name: str) -> None:
    wait(browser).until(EC.element_to_be_clickable((By.XPATH, f"//nav[@class='tabs']/a[normalize-space()='{name}']")))
    browser.find_element(By.XPATH, f"//nav[@class='tabs']/a[normalize-space()='{name}']").click()
    wait(browser).until(EC.visibility_of_element_located(by_text("h1", name)))


def _charts_drawn(browser) -> int:
    """How many of the page's canvases Chart.js drew (a script the CSP blocked draws none)."""
    return browser.execute_script(
        "return typeof Chart === 'undefined' ? 0 : "
        "[...document.querySelectorAll('canvas')].filter(c => Chart.getChart(c)).length;"
    )


def _no_csp_violations(browser) -> None:
    logs = [e["message"] for e in browser.get_log("browser")]
    assert not [m for m in logs if "Content Security Policy" in m], logs


def test_dashboard_runs_page(dashboard):
    wait(dashboard).until(EC.visibility_of_element_located(by_text("h1", "Runs")))
    row = wait(dashboard).until(EC.visibility_of_element_located((By.XPATH, "//table[@class='runs']//tr[2]")))
    assert "mi355x-vllm cheaper" in row.text and "EMULATED" in row.text
    link = row.find_element(By.CSS_SELECTOR, "a[title='the run in Airflow']")
    assert link.get_attribute("href").endswith("/dags/bakeoff/runs/manual__2026-11-01T00%3A00%3A00%2B00%3A00")
    _no_csp_violations(dashboard)


def test_dashboard_trend_page(dashboard):
    _open_tab(dashboard, "Trend")
    wait(dashboard).until(lambda b: _charts_drawn(b) == 2)
    assert "mi355x-vllm" in dashboard.find_element(By.XPATH, "//h2[.='Table']/following::table[1]").text
    _no_csp_violations(dashboard)


def test_dashboard_compare_page(dashboard):
    _open_tab(dashboard, "Compare")
    wait(dashboard).until(lambda b: _charts_drawn(b) == 1)
    assert "A: mi355x-vllm" in dashboard.execute_script(
        "return Chart.getChart(document.querySelector('canvas')).data.datasets.map(d => d.label).join(',');"
    )
    _no_csp_violations(dashboard)


def test_dashboard_explore_page_filters(dashboard):
    _open_tab(dashboard, "Explore")
    wait(dashboard).until(lambda b: _charts_drawn(b) == 2)
    dashboard.find_element(By.CSS_SELECTOR, "select[name=gpu] option[value=b200]").click()  # submits the form
    wait(dashboard).until(EC.url_contains("gpu=b200"))
    wait(dashboard).until(lambda b: _charts_drawn(b) == 2)
    labels = dashboard.execute_script(
        "return Chart.getChart(document.querySelector('canvas')).data.datasets.map(d => d.label);"
    )
    assert labels == ["b200 · vllm · fp8", "b200 · vllm · fp8 (Pareto)"]
    _no_csp_violations(dashboard)


def _asked(airflow_site, api, dag_id: str, case: str, seconds: float = 600) -> dict:
    """One approval case once its step waits for an answer: its run folder and Airflow DAG run id."""
    log = airflow_site["home"] / f"{dag_id}.log"
    deadline = time.monotonic() + seconds
    while True:
        lines = [ln for ln in log.read_text().splitlines() if ln.startswith('{"conf"')]
        runs = api.get(f"/dags/{dag_id}/dagRuns").raise_for_status().json()["dag_runs"] if lines else []
        if runs:
            run_id = runs[0]["dag_run_id"]
            ti = api.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/approve_{case}")
            if ti.status_code == 200 and ti.json()["state"] not in (None, "scheduled", "queued", "running"):
                return {"run_dir": json.loads(lines[0])["conf"][case], "run_id": run_id, "dag_id": dag_id}
        if airflow_site["runners"][dag_id].poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"approve_{case} never waited for an answer:\n" + log.read_text()[-3000:])
        time.sleep(1)


def _states(api, case: dict, name: str, until=lambda s: True, seconds: float = 30) -> dict[str, str]:
    """The states of approve_<name> and provision_<name>, once ``until`` holds for them."""
    deadline = time.monotonic() + seconds
    while True:
        got = {
            t: api.get(f"/dags/{case['dag_id']}/dagRuns/{case['run_id']}/taskInstances/{t}_{name}").json()["state"]
            for t in ("approve", "provision")
        }
        if until(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def _approval(case: dict) -> dict:
    from bakeoff import store
    from bakeoff.spend import approval

    return store.read_record(case["run_dir"], approval.RECORD) or {}


def _respond(browser, api_server, case: dict, name: str, option: str) -> None:
    """Answer in Airflow's own Required Actions view of the task, as an approver would."""
    browser.get(f"{api_server}/dags/{case['dag_id']}/runs/{case['run_id']}/tasks/approve_{name}/required_actions")
    wait(browser).until(
        EC.visibility_of_element_located((By.XPATH, "//*[contains(., 'Approve') and contains(., 'USD for bake-off')]"))
    )
    wait(browser).until(EC.element_to_be_clickable((By.CSS_SELECTOR, f"[data-testid='hitl-option-{option}']"))).click()


def _sign_in(browser, api_server, user: str) -> None:
    browser.delete_all_cookies()
    browser.get(api_server + "/")
    wait(browser).until(EC.url_contains("/auth/login"))
    wait(browser).until(EC.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser).until(EC.url_to_be(api_server + "/"))


def test_an_approver_approves_the_spend_in_required_actions(airflow_site, logged_in, api_server, api):
    case = _asked(airflow_site, api, APPROVAL_DAG, "approve")
    asked = _approval(case)
    assert asked["decision"] == "pending" and asked["spend_usd"] > 100  # what the approver is shown
    _respond(logged_in, api_server, case, "approve", "Approve")
    assert _states(api, case, "approve", lambda s: s["provision"] == "success") == {
        "approve": "success",
        "provision": "success",  # provision's own check passes only once the run is approved
    }
    record = _approval(case)
    assert record["decision"] == "approved" and record["by"]["id"] == USER
    assert record["shown"] == asked["shown"] and "mi355x-vllm" in record["shown"]["body"]


def test_a_rejected_spend_provisions_nothing(airflow_site, logged_in, api_server, api):
    case = _asked(airflow_site, api, APPROVAL_DAG, "reject")
    _respond(logged_in, api_server, case, "reject", "Reject")
    assert _states(api, case, "reject", lambda s: s["provision"] not in (None, "scheduled", "queued", "running")) == {
        "approve": "failed",
        "provision": "upstream_failed",
    }
    record = _approval(case)
    assert record["decision"] == "rejected" and record["by"]["id"] == USER


def test_the_evidence_bundle_downloads_from_the_runs_page_and_verifies(
    airflow_site, logged_in, api_server, tmp_path, monkeypatch, capsys
):
    import zipfile

    from bakeoff import cli
    from bakeoff.publishing import evidence

    browser = logged_in
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    browser.get(f"{api_server}/bakeoff/runs?plan={BUNDLE_PLAN}")
    link = (By.XPATH, "//table[@class='runs']//a[normalize-space()='evidence']")
    wait(browser).until(EC.element_to_be_clickable(link)).click()
    deadline = time.monotonic() + 20
    while not (got := list(tmp_path.glob("*.zip"))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got and got[0].name == evidence.bundle_name(BUNDLE_PLAN, BUNDLE_RUN)
    bundle = got[0]
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", SECRET_KEY)  # this installation's key: the signer is trusted
    assert cli.main(["verify", str(bundle)]) == 0, capsys.readouterr().out  # `bakeoff verify BUNDLE`
    # one byte of one stored file changed (the archive's own CRCs redone, as a forger would)
    with zipfile.ZipFile(bundle) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    name = next(n for n in members if n.endswith("plan.json"))
    data = bytearray(members[name])
    data[data.index(b"synthetic")] = ord("S")
    members[name] = bytes(data)
    forged = tmp_path / "forged.zip"
    with zipfile.ZipFile(forged, "w") as z:
        for n, d in members.items():
            z.writestr(n, d)
    capsys.readouterr()
    assert cli.main(["verify", str(forged)]) == 1
    assert name in capsys.readouterr().out


def test_an_answer_from_outside_the_approvers_is_refused(airflow_site, logged_in, api_server, api):
    case = _asked(airflow_site, api, APPROVAL_DAG, "outsider")
    admin = logged_in.get_cookies()  # admin's session, put back afterwards (a second sign-in costs seconds)
    try:
        _sign_in(logged_in, api_server, OUTSIDER)  # an admin, but not in bakeoff_approvers
        _respond(logged_in, api_server, case, "outsider", "Approve")
        token = httpx.post(f"{api_server}/auth/token", json={"username": OUTSIDER, "password": PASSWORD}).json()
        url = f"/dags/{case['dag_id']}/dagRuns/{case['run_id']}/taskInstances/approve_outsider/-1/hitlDetails"
        r = api.patch(
            url, json={"chosen_options": ["Approve"]}, headers={"Authorization": f"Bearer {token['access_token']}"}
        )
        assert r.status_code == 403 and "not a respondent" in r.text  # what the UI's click got too
        time.sleep(2)  # had Airflow taken the answer, the step would have resumed by now
        assert _states(api, case, "outsider") == {"approve": "awaiting_input", "provision": None}
        assert _approval(case)["decision"] == "pending"
    finally:
        logged_in.delete_all_cookies()
        for cookie in admin:
            logged_in.add_cookie(cookie)
        logged_in.get(api_server + "/")
        wait(logged_in).until(EC.url_to_be(api_server + "/"))  # signed in again: no login page


def test_no_answer_before_the_timeout_rejects(airflow_site, logged_in, api_server, api):
    """Last in the module, on purpose: its step has been waiting since the fixture started the runners,
    so the 36 s timeout (the Variable's 0.01 h minimum) has mostly run out while the other tests ran."""
    case = _asked(airflow_site, api, TIMEOUT_DAG, "timeout")
    got = _states(api, case, "timeout", lambda s: s["provision"] == "upstream_failed", seconds=90)
    assert got == {"approve": "failed", "provision": "upstream_failed"}
    assert _approval(case)["decision"] == "timed out"
    logged_in.get(f"{api_server}/dags/{case['dag_id']}/runs/{case['run_id']}/tasks/approve_timeout")
    wait(logged_in).until(
        EC.visibility_of_element_located((By.XPATH, "//*[normalize-space()='failed' or normalize-space()='Failed']"))
    )
