"""The dashboard pages (Runs, Trend, Compare, Explore) over published synthetic runs: figures as the
cost step stored them, filters validated against what is stored, escaping, and the page CSP."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
import synthetic
from fastapi.testclient import TestClient
from synthetic import XSS

from bakeoff import cost, store
from bakeoff.cost import cost_run
from bakeoff.dashboard import pages
from bakeoff.plan import plan_from_dict
from bakeoff.publishing.publish import publish

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "bakeoff_ui.py"
DAY = 86_400
T0 = 1_788_345_600  # 2026-09-02


def _publish(base: Path, plan, run_id: str, started_at: float, seed: int) -> Path:
    rdir = synthetic.make_run(base / "results", plan, run_id=run_id, jitter=0.05, seed=seed, started_at=started_at)
    cost_run(plan, rdir)
    report = base / "build" / f"{seed}.md"  # the dashboard needs a published run, not any particular report
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("report")
    publish(plan, rdir, {"markdown": str(report)})
    return rdir


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    base = tmp_path_factory.mktemp("dash")
    mp = pytest.MonkeyPatch()
    mp.setenv("BAKEOFF_REPORTS", str(base / "reports"))
    d = synthetic.plan_dict(names=("mi355x-vllm", XSS), repeats=2)
    plan = plan_from_dict(d)
    d["targets"][0]["price"] = {"usd_per_hour": 20.0}  # a contract price in the latest run
    d["targets"][0]["engine_args"] = ["--max-num-seqs", "256"]
    contract = plan_from_dict(d)
    rdirs = [
        _publish(base, plan, "manual__2026-09-01", T0, 1),
        _publish(base, plan, "manual__2026-10-01", T0 + 31 * DAY, 2),
        _publish(base, contract, "manual__2026-11-01", T0 + 62 * DAY, 3),
    ]
    spec = importlib.util.spec_from_file_location("bakeoff_ui_dash", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.app.dependency_overrides[mod.require_run_read] = lambda: None  # who may read: test_ui_plugin, security
    yield {"client": TestClient(mod.app), "rdirs": rdirs, "reports": base / "reports"}
    mp.undo()


def _chart_data(html: str) -> list[dict]:
    m = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', html, re.S)
    assert m, "no chart data block"
    return json.loads(m.group(1))


def _keys(dash) -> list[str]:
    return [r.key for r in pages.load_runs(dash["reports"])]


def test_every_page_renders_escaped_under_a_script_self_csp(dash):
    for page in ("runs", "trend", "compare", "explore"):
        r = dash["client"].get(f"/{page}")
        assert r.status_code == 200, (page, r.text)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
        assert XSS not in r.text  # the target named <script>... is text everywhere, in the JSON block too
        scripts = re.findall(r"<script([^>]*)>", r.text)
        assert scripts and all("src=" in s or 'type="application/json"' in s for s in scripts), (page, scripts)


def test_runs_page_lists_and_filters(dash):
    c = dash["client"]
    html = c.get("/runs").text
    assert html.count('title="the run in Airflow"') == 3
    assert 'href="../dags/bakeoff/runs/manual__2026-11-01"' in html
    assert "mi355x-vllm cheaper" in html or "no clear winner" in html
    oct_only = c.get("/runs", params={"month": "2026-10"}).text
    assert oct_only.count('title="the run in Airflow"') == 1 and "manual__2026-10-01" in oct_only
    assert "No published run matches." in c.get("/runs", params={"emulated": "no"}).text


@pytest.mark.parametrize(
    ("page", "params", "named"),
    [
        ("runs", {"plan": "nope"}, "unknown plan: 'nope'"),
        ("runs", {"month": "../../etc"}, "unknown month (YYYY-MM): '../../etc'"),
        ("runs", {"month": "2020-01"}, "unknown month: '2020-01'"),
        ("runs", {"emulated": "maybe"}, "unknown emulated"),
        ("trend", {"target": "b300"}, "unknown target: 'b300'"),
        ("compare", {"a": "synthetic/../../etc"}, "unknown run a"),
        ("explore", {"gpu": "h100"}, "unknown gpu: 'h100'"),
        ("explore", {"tco": "free"}, "unknown tco: 'free'"),
    ],
)
def test_unknown_filters_and_runs_are_404_naming_them(dash, page, params, named):
    r = dash["client"].get(f"/{page}", params=params)
    assert r.status_code == 404 and named in r.json()["detail"]


def test_trend_shows_the_stored_cost_at_the_slo_and_the_change(dash):
    """Each run's figure is the cost step's own (cost_at_slo.parquet), in run order, with the change."""
    r = dash["client"].get("/trend", params={"target": "mi355x-vllm"})
    assert r.status_code == 200
    expected = []
    for rdir in dash["rdirs"]:
        at = cost.load_tables(rdir).at_slo
        expected.append(float(at[at["name"] == "mi355x-vllm"]["usd_per_m_output"].iloc[0]))
    series = _chart_data(r.text)[0]["datasets"][0]
    assert series["label"] == "mi355x-vllm"
    assert [p["y"] for p in series["data"]] == pytest.approx(expected, rel=1e-5)
    change = f"{(expected[2] / expected[1] - 1) * 100:+.1f}%"
    assert change in r.text  # the contract price cut it
    assert "significant" in r.text


def test_trend_charts_tokens_per_joule_and_names_the_energy_kind(dash):
    """The per-watt series is the cost step's own output tokens per joule at the SLO, run by run, and the
    table says the figure is estimated from the nameplate (the synthetic runs measured no power)."""
    r = dash["client"].get("/trend", params={"target": "mi355x-vllm"})
    expected = []
    for rdir in dash["rdirs"]:
        at = cost.load_tables(rdir).at_slo
        expected.append(float(at[at["name"] == "mi355x-vllm"]["output_tokens_per_joule"].iloc[0]))
    chart = next(c for c in _chart_data(r.text) if c["y"].startswith("output tokens per joule"))
    assert [p["y"] for p in chart["datasets"][0]["data"]] == pytest.approx(expected, rel=1e-5)
    assert chart["datasets"][1]["label"] == "mi355x-vllm 95% low" and chart["datasets"][1]["data"]
    assert "estimated, nameplate" in r.text


def test_compare_diffs_the_configuration_and_overlays_pareto_curves(dash):
    keys = _keys(dash)  # newest first
    r = dash["client"].get("/compare", params={"a": keys[1], "b": keys[0]})
    assert r.status_code == 200
    diff = re.findall(r'<tr class="differs"><td>([^<]*)</td><td>([^<]*)</td>', r.text)
    fields = {f for t, f in diff if t == "mi355x-vllm"}
    assert {"usd_per_node_hour", "engine_args", "price_source"} <= fields
    assert not {f for t, f in diff if t != "mi355x-vllm"}  # the other target did not change
    charts = _chart_data(r.text)
    labels = [d["label"] for d in charts[0]["datasets"]]
    assert labels == ["A: mi355x-vllm", f"A: {XSS}", "B: mi355x-vllm", f"B: {XSS}"]
    assert all(len(d["data"]) == 3 for d in charts[0]["datasets"])  # three load levels each
    one = dash["client"].get(
        "/compare", params={"a": keys[2], "a_target": XSS, "b": keys[0], "b_target": "mi355x-vllm"}
    )
    assert one.status_code == 200 and [d["label"] for d in _chart_data(one.text)[0]["datasets"]] == [
        f"A: {XSS}",
        "B: mi355x-vllm",
    ]


def test_explore_filters_by_gpu_and_switches_the_tco_basis(dash):
    c = dash["client"]
    charts = _chart_data(c.get("/explore", params={"gpu": "mi355x"}).text)
    assert {d["label"] for d in charts[0]["datasets"]} == {"mi355x · vllm · fp8", "mi355x · vllm · fp8 (Pareto)"}
    assert len(charts[0]["datasets"][0]["data"]) == 9  # 3 runs x 3 load levels
    tier = "hyperscaler"
    in_force = _chart_data(c.get("/explore", params={"gpu": "mi355x"}).text)[1]["datasets"][0]["data"]
    tiered = _chart_data(c.get("/explore", params={"gpu": "mi355x", "tco": tier}).text)[1]["datasets"][0]["data"]
    # each run's points scale by its tier price over its price in force (from the cost step's table)
    ratios = []
    for rdir in reversed(dash["rdirs"]):  # the page lists runs newest first
        at = cost.load_tables(rdir).at_slo
        row = at[at["name"] == "mi355x-vllm"].iloc[0]
        ratios += [row[f"tco_{tier}_usd_per_gpu_hour"] / row["usd_per_gpu_hour"]] * 3
    assert [t["y"] / f["y"] for f, t in zip(in_force, tiered, strict=True)] == pytest.approx(ratios, rel=1e-4)


def test_pareto_frontier_keeps_only_undominated_points():
    pts = [{"x": 10, "y": 100}, {"x": 20, "y": 80}, {"x": 15, "y": 70}, {"x": 30, "y": 10}, {"x": 5, "y": 90}]
    assert pages._pareto(pts) == [{"x": 10, "y": 100}, {"x": 20, "y": 80}, {"x": 30, "y": 10}]


def test_static_files_are_a_fixed_list(dash):
    c = dash["client"]
    js = c.get("/static/chart.umd.min.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert b"Chart.js v4" in js.content[:200]
    assert "MIT License" in c.get("/static/LICENSE-chart.js.txt").text
    for bad in ("/static/summary.py", "/static/..%2F__init__.py", "/static/%2E%2E/pages.py"):
        assert c.get(bad).status_code == 404


def test_a_plan_without_its_index_is_read_from_its_manifests(dash, tmp_path):
    import shutil

    copy = tmp_path / "reports"
    shutil.copytree(dash["reports"], copy)
    (copy / "synthetic" / "index.json").unlink()
    assert [r.key for r in pages.load_runs(copy)] == _keys(dash)
    assert store.read_json(copy / "synthetic" / "index.json") is None


def test_runs_page_pages_through_many_runs(dash, monkeypatch):
    monkeypatch.setattr(pages, "PAGE_ROWS", 2)
    c = dash["client"]
    first, second = c.get("/runs").text, c.get("/runs", params={"page": "2"}).text
    assert first.count('title="the run in Airflow"') == 2 and 'rel="next"' in first
    assert second.count('title="the run in Airflow"') == 1 and 'rel="prev"' in second
    for bad in ("3", "0", "-1", "x"):
        r = c.get("/runs", params={"page": bad})
        assert r.status_code == 404 and "unknown page" in r.json()["detail"]


def test_a_changed_index_is_read_again(dash, tmp_path):
    """The pages keep a parsed index while it is unchanged, and read it again once publish rewrites it."""
    import shutil

    copy = tmp_path / "reports"
    shutil.copytree(dash["reports"], copy)
    assert len(pages.load_runs(copy)) == 3
    index = copy / "synthetic" / "index.json"
    index.write_text(json.dumps(json.loads(index.read_text())[:1]))
    assert len(pages.load_runs(copy)) == 1


def test_trend_shows_the_latest_runs_it_is_asked_for(dash, monkeypatch):
    monkeypatch.setattr(pages, "TREND_LAST", ("2", "all"))
    monkeypatch.setattr(pages, "TREND_DEFAULT", "2")
    c = dash["client"]
    short = _chart_data(c.get("/trend", params={"target": "mi355x-vllm"}).text)[0]
    assert len(short["labels"]) == 2 and len(short["datasets"][0]["data"]) == 2
    full = _chart_data(c.get("/trend", params={"target": "mi355x-vllm", "last": "all"}).text)[0]
    assert len(full["labels"]) == 3 and full["labels"][1:] == short["labels"]
    assert c.get("/trend", params={"last": "5"}).status_code == 404


def test_explore_draws_the_newest_points_and_a_frontier_over_all(dash, monkeypatch):
    monkeypatch.setattr(pages, "EXPLORE_POINTS", 4)
    r = dash["client"].get("/explore", params={"gpu": "mi355x"})
    scatter, frontier = _chart_data(r.text)[0]["datasets"]
    assert len(scatter["data"]) == 4 and "newest 4 of 9 points" in r.text
    every = [p for run in pages.load_runs(dash["reports"]) for p in _frontier_points(run, "mi355x-vllm")]
    assert frontier["data"] == pages._pareto(every)


def _frontier_points(run, name):
    t = next(t for t in run.targets.values() if t["name"] == name)
    return [
        {"x": p["interactivity"], "y": p["output_tps_per_gpu"]} for w in t["workloads"].values() for p in w["frontier"]
    ]


def test_the_runs_page_states_an_approval_in_the_reports_words():
    from bakeoff.dashboard import pages
    from bakeoff.spend.approval import approval_line

    record = {"decision": "approved", "by": {"id": "7", "name": "alex"}, "at": 1764590400, "spend_usd": 812.5}
    assert pages._approval_text(record) == approval_line(record)
    assert "by alex at 2025-12-01 12:00 UTC" in pages._approval_text(record)
    assert pages._approval_text(None) == "" and pages._approval_text({}) == ""


def test_the_runs_page_links_the_evidence_bundle_publish_lists(tmp_path, monkeypatch):
    """pipeline.publish lists the signed bundle as files.evidence; the Runs page links it beside the reports."""
    monkeypatch.setenv("BAKEOFF_REPORTS", str(tmp_path / "reports"))
    plan = plan_from_dict(synthetic.plan_dict(names=("mi355x-vllm", "b200-vllm"), repeats=1))
    rdir = synthetic.make_run(tmp_path / "results", plan, run_id="manual__bundle", seed=7, started_at=T0)
    cost_run(plan, rdir)
    (tmp_path / "r.md").write_text("report")
    (tmp_path / "bundle.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    publish(plan, rdir, {"markdown": str(tmp_path / "r.md"), "evidence": str(tmp_path / "bundle.zip")})
    spec = importlib.util.spec_from_file_location("bakeoff_ui_dash_bundle", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.app.dependency_overrides[mod.require_run_read] = lambda: None
    html = TestClient(mod.app).get("/runs").text
    assert re.search(r'<a href="[^"]*bundle\.zip">evidence</a>', html), html


def test_compare_opens_on_the_two_latest_runs_of_one_plan_differences_first(dash):
    keys = _keys(dash)  # newest first, all of one plan
    r = dash["client"].get("/compare")
    assert r.status_code == 200 and "shown against itself" not in r.text
    chosen = re.findall(r'<option value="([^"]*)" selected>', r.text)
    assert chosen[:1] == [keys[1]] and keys[0] in chosen  # A: the run before the newest; B: the newest
    config = r.text[r.text.index("<h2>Configuration</h2>") :]
    folded = config.index('<details class="same">')
    assert config.rfind('class="differs"') < folded  # every differing row before the identical ones
    assert 'class="differs"' not in config[folded:] and "identical field(s)</summary>" in config
    cost_cells = re.findall(r'<td class="n"><b>([^<]*)</b></td>', r.text)
    assert cost_cells and all(re.fullmatch(r"[\d,]+(\.\d{1,3})?", c) for c in cost_cells)


def test_a_plan_with_one_run_says_it_is_compared_with_itself(dash):
    keys = _keys(dash)
    r = dash["client"].get("/compare", params={"a": keys[0], "b": keys[0]})
    assert "shown against itself" in r.text


@pytest.mark.parametrize(
    ("value", "shown"),
    [(850000000000.0, "850,000,000,000"), (18.271003917392964, "18.27"), ("18.271003917392964", "18.27"),
     ("v0.25.0", "v0.25.0"), (None, "–"), (8, "8"), (True, "yes")],
)  # fmt: skip
def test_compare_formats_numbers_for_people(value, shown):
    assert pages.human(value) == shown


def test_each_target_kind_has_one_colour_on_every_page_and_in_the_report(dash):
    from bakeoff.report.colours import GPU_COLOURS

    c = dash["client"]
    want = GPU_COLOURS["mi355x"]
    keys = _keys(dash)
    for page, params, label in (
        ("trend", {}, "mi355x-vllm"),
        ("compare", {"a": keys[1], "b": keys[0]}, "A: mi355x-vllm"),
        ("explore", {"gpu": "mi355x"}, "mi355x · vllm · fp8"),
    ):
        charts = _chart_data(c.get(f"/{page}", params=params).text)
        colours = {d["colour"] for d in charts[0]["datasets"] if d["label"] == label}
        assert colours == {want}, page


def test_every_chart_of_an_emulated_run_is_marked_emulated(dash):
    keys = _keys(dash)  # the synthetic runs are emulated
    for page, params in (("trend", {}), ("compare", {"a": keys[1], "b": keys[0]}), ("explore", {})):
        html = dash["client"].get(f"/{page}", params=params).text
        charts = _chart_data(html)
        assert charts and all(ch["emulated"] for ch in charts), page
        assert html.count('<figure class="chart"><figcaption>') == len(charts)
        assert len(re.findall(r"<figcaption>[^<]*<span class=\"emu\"[^>]*>EMULATED</span>", html)) == len(charts)
