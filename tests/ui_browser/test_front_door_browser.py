"""The front door in headless Chromium, signed in: the reports page, a report, the dashboard's Compare, Trend
and Explore pages and the trigger form, as a new user meets them.

An api-server with a login (simple auth manager) over two published runs of one plan (report, brief,
CSV and evidence bundle each) and the repository's DAGs; no approval runners (test_ui_browser.py has
those). Set BAKEOFF_SCREENSHOTS to a folder to keep each page's first screen as a PNG.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
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

pytestmark = [
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver"),
    pytest.mark.timeout(900),
]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402

RUNS = ("manual__2026-10-01T00:00:00+00:00", "manual__2026-11-01T00:00:00+00:00")


def _publish_two_runs(data: Path, build: Path) -> None:
    """Two runs of one plan (the synthetic plan's MI355X and B200), each reported, bundled and published;
    the later one at a contract price, so Compare has a field that differs."""
    sys.path.insert(0, str(ROOT / "tests" / "report"))
    import synthetic

    from bakeoff.cost import cost_run
    from bakeoff.plan import plan_from_dict
    from bakeoff.publishing import evidence
    from bakeoff.publishing.publish import publish
    from bakeoff.report import build_report

    mp = pytest.MonkeyPatch()
    mp.setenv("BAKEOFF_DATA", str(data))
    mp.setenv("BAKEOFF_SECRET_KEY", SECRET_KEY)
    mp.delenv("BAKEOFF_REPORTS", raising=False)
    try:
        raw = synthetic.plan_dict(concurrency=(1, 4), repeats=2)
        for i, run_id in enumerate(RUNS):
            if i:
                raw["targets"][0]["price"] = {"usd_per_hour": 20.0}
            plan = plan_from_dict(raw)
            rdir = synthetic.make_run(data / "results", plan, run_id=run_id, started_at=1790812800 + i * 86400, seed=i)
            cost_run(plan, rdir)
            out = build / str(i)
            paths = build_report(plan, rdir, out)
            publish(plan, rdir, {**paths, "evidence": str(evidence.build(plan, rdir, paths, out))})
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def site(tmp_path_factory, airflow_db):
    home = tmp_path_factory.mktemp("front-door")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BAKEOFF"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__WORKERS": "1",
            "BAKEOFF_DATA": str(home / "data"),
            "BAKEOFF_SECRET_KEY": SECRET_KEY,
        }
    )
    (home / "airflow").mkdir()
    _publish_two_runs(home / "data", home / "build")
    shutil.copyfile(airflow_db, home / "airflow.db")
    proc, base, log = start_api_server(env, home, port, wait_s=180)
    try:
        yield base
    finally:
        stop(proc, signal.SIGTERM)
        log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory, site):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(site + "/")
        wait(driver).until(EC.url_contains("/auth/login"))
        wait(driver).until(EC.presence_of_element_located((By.NAME, "username"))).send_keys(USER)
        driver.find_element(By.NAME, "password").send_keys(PASSWORD)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait(driver).until(EC.url_to_be(site + "/"))
        yield driver
    finally:
        driver.quit()


def _shot(browser, name: str) -> None:
    if os.environ.get("BAKEOFF_SCREENSHOTS"):
        browser.save_screenshot(str(Path(os.environ["BAKEOFF_SCREENSHOTS"]) / f"{name}.png"))


def _charts_drawn(browser) -> int:
    return browser.execute_script(
        "return typeof Chart === 'undefined' ? 0 : "
        "[...document.querySelectorAll('canvas')].filter(c => Chart.getChart(c)).length;"
    )


def _chart_colours(browser) -> dict[str, str]:
    return browser.execute_script(
        "const out = {}; document.querySelectorAll('canvas').forEach(c => Chart.getChart(c).data.datasets"
        ".forEach(d => { out[d.label] = d.borderColor; })); return out;"
    )


def test_the_reports_page_links_every_file_and_has_the_dashboards_tabs(browser, site):
    browser.get(site + "/bakeoff/")
    wait(browser).until(EC.visibility_of_element_located(by_text("h1", "Bake-off reports")))
    tabs = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav.tabs a")]
    assert tabs == ["Runs", "Trend", "Compare", "Explore", "Reports"]
    runs = httpx.get(site + "/bakeoff/api/runs", cookies=browser_cookies(browser)).json()
    rows = browser.find_elements(By.CSS_SELECTOR, "td.files")
    assert len(rows) == len(runs) == 2
    for row, run in zip(rows, runs, strict=True):
        texts = [a.text for a in row.find_elements(By.TAG_NAME, "a")]
        assert len(texts) == len(run["files"]) and "evidence bundle" in texts and "brief (PDF)" in texts
        assert not [t for t in texts if "_" in t]
    _shot(browser, "reports-page")
    browser.find_element(By.XPATH, "//nav[@class='tabs']/a[.='Compare']").click()
    wait(browser).until(EC.visibility_of_element_located(by_text("h1", "Compare")))


def browser_cookies(browser) -> dict[str, str]:
    return {c["name"]: c["value"] for c in browser.get_cookies()}


def test_the_reports_first_screen_fits_1400px_and_labels_its_columns(browser, site):
    browser.set_window_size(1400, 1000)
    browser.get(site + "/bakeoff/")
    browser.find_element(By.XPATH, "(//td[@class='files'])[1]/a[.='report']").click()
    wait(browser).until(EC.visibility_of_element_located((By.ID, "headline")))
    _shot(browser, "report-first-screen")
    overflow = browser.execute_script(
        "return [...document.querySelectorAll('table')].filter(t => {"
        "  const box = t.parentElement; const scrolls = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX)"
        "    || ['auto', 'scroll'].includes(getComputedStyle(t).overflowX);"
        "  return !scrolls && t.getBoundingClientRect().right > document.documentElement.clientWidth + 1;"
        "}).length;"
    )
    assert overflow == 0  # every table fits the page or scrolls inside its own box
    page_width = browser.execute_script("return document.documentElement.scrollWidth;")
    assert page_width <= 1400
    headers = [h.text for h in browser.find_elements(By.TAG_NAME, "th") if h.text]
    assert not [h for h in headers if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h)], headers
    tco = browser.find_element(By.XPATH, "//h3[contains(., 'TCO tiers')]/following::table[1]").text
    assert "@" not in tco and "USD/GPU-h" in tco


def test_compare_opens_on_the_two_latest_runs_differences_first(browser, site):
    browser.get(site + "/bakeoff/compare")
    wait(browser).until(lambda b: _charts_drawn(b) == 1)
    chosen = [
        s.get_attribute("value") for s in browser.find_elements(By.CSS_SELECTOR, "select[name=a], select[name=b]")
    ]
    assert "2026-10-01" in chosen[0] and "2026-11-01" in chosen[1]  # A the earlier, B the latest run of the plan
    differing = browser.find_elements(By.CSS_SELECTOR, "table.diff tr.differs")
    assert differing and all(r.is_displayed() for r in differing)
    folded = browser.find_element(By.CSS_SELECTOR, "details.same")
    assert folded.get_attribute("open") is None and "identical field(s)" in folded.text
    costs = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "td.n b")]
    assert costs and all(re.fullmatch(r"[\d,]+(\.\d{1,3})?", c) for c in costs), costs
    caption = browser.find_element(By.CSS_SELECTOR, "figure.chart figcaption").text
    assert "EMULATED" in caption
    colours = _chart_colours(browser)
    assert colours["A: mi355x-vllm"] == colours["B: mi355x-vllm"] != colours["B: b200-vllm"]
    _shot(browser, "compare")


def test_trend_and_explore_mark_emulated_charts_and_keep_one_colour_per_gpu(browser, site):
    from bakeoff.report.colours import GPU_COLOURS

    for page, label in (("trend", "mi355x-vllm"), ("explore", "mi355x · vllm · fp8")):
        browser.get(f"{site}/bakeoff/{page}")
        # Trend has a third chart (output tokens per joule), Explore two: every chart drawn, each marked
        charts = len(browser.find_elements(By.CSS_SELECTOR, "figure.chart"))
        wait(browser).until(lambda b, n=charts: _charts_drawn(b) == n)
        captions = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "figure.chart figcaption")]
        assert charts >= 2 and len(captions) == charts and all("EMULATED" in c for c in captions), page
        assert _chart_colours(browser)[label] == GPU_COLOURS["mi355x"], page
        legend = browser.execute_script(
            "const c = Chart.getChart(document.querySelector('canvas'));return c.legend.legendItems.map(i => i.text);"
        )
        assert len(legend) == len(set(legend)), legend  # each group once


def test_the_trigger_form_says_what_blank_means_and_what_a_free_plan_costs(browser, site):
    browser.get(site + "/dags/bakeoff")
    wait(browser).until(EC.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))).click()
    wait(browser).until(EC.visibility_of_element_located(by_text("p", "Run Parameters")))
    dialog = browser.find_element(By.CSS_SELECTOR, "[role=dialog][data-state=open]")
    wait(browser).until(lambda b: "p99 TTFT" in dialog.text)
    text = dialog.text
    assert text.count("Blank: the plan's value.") >= 4  # the SLO boxes, utilisation
    assert "one name a line" in text and '["mi355x-vllm"]' not in text
    plan = dialog.find_element(By.ID, "element_plan")
    plan.find_element(By.CSS_SELECTOR, "input[role=combobox]").send_keys("local-demo")
    option = wait(browser).until(
        EC.visibility_of_element_located(
            (By.XPATH, "//*[@role='option' and starts-with(normalize-space(), 'local-demo')]")
        )
    )
    assert option.text.startswith("local-demo (predicted spend 0 USD: nothing billed")
