"""The report's Provisioning section and the dashboard's stockout trend, from the step records as
the pipeline writes them (REST clouds' provisioning dict; EC2/OCI with only the pipeline's create_s)."""

from __future__ import annotations

import pytest

from bakeoff import store
from bakeoff.core import facts
from bakeoff.dashboard.pages import trend_page
from bakeoff.dashboard.render import render
from bakeoff.dashboard.runs import Run
from bakeoff.dashboard.stockouts import stockout_trend
from bakeoff.plan import load_plan
from bakeoff.report import markdown
from bakeoff.report.data import ReportData
from bakeoff.report.provisioning import rows, summary, target_row

PLAN = "mi355x-vs-b200-sandbox"  # a Vultr and an EC2 target


def _run(rdir, plan, *, vultr_refused: bool = False) -> facts.RunFacts:
    slugs = {t.provider: t.slug for t in plan.targets}
    start = facts.Start(plan=plan.name, run_id="r", targets={s: facts.TargetStart(name=s) for s in slugs.values()})
    store.record(rdir, start.STEP, start.to_json())
    # EC2: the record as written today (no attempts from the provider, only the pipeline's create_s)
    aws = facts.Provision(
        instance_id="i-1", launched_at=1000.0, requested_at=998.0, provisioning={"create_s": 2.0}, tries=()
    )
    store.record(rdir, aws.STEP, aws.to_json(), slug=slugs["aws"])
    store.record(rdir, "node_ready", facts.NodeReady(instance_id="i-1", running_at=1058.0).to_json(), slug=slugs["aws"])
    store.record(rdir, "deploy", facts.Deploy(ready=True, ready_at=1298.0).to_json(), slug=slugs["aws"])
    store.record(
        rdir, "terminate", facts.Terminate(instances=("i-1",), terminated_at=4600.0).to_json(), slug=slugs["aws"]
    )
    if vultr_refused:
        refused = facts.ProvisionRefused(
            at=1010.0, requested_at=1000.0, offers=("vbm in ewr", "vbm in ord"), error="vultr: no capacity"
        )
        store.record(rdir, refused.STEP, refused.to_json(), slug=slugs["vultr"])
    else:  # Vultr: the REST record, one region refused before the second took it
        vultr = facts.Provision(
            instance_id="v-1",
            launched_at=1000.0,
            requested_at=990.0,
            provisioning={"attempts": 2, "refusals": {"capacity": 1}, "region": "ord", "create_s": 4.0},
        )
        store.record(rdir, vultr.STEP, vultr.to_json(), slug=slugs["vultr"])
        store.record(
            rdir, "node_ready", facts.NodeReady(instance_id="v-1", running_at=1110.0).to_json(), slug=slugs["vultr"]
        )
    return store.run_facts(rdir)


def test_each_cloud_target_gets_its_attempts_refusals_and_times(data_root):
    plan = load_plan(PLAN)
    run = _run(store.run_dir(plan.name, "r1"), plan)
    got = {r.provider: r for r in rows(plan, run, now=5000.0)}
    aws, vultr = got["aws"], got["vultr"]
    assert aws.to_running_s == pytest.approx(60.0) and aws.to_serving_s == pytest.approx(300.0)
    assert aws.billed_hours == pytest.approx(1.0) and not aws.still_billing
    assert aws.attempts is None and aws.refusals == {}  # EC2 does not say (yet): shown as a dash, not as 1
    assert vultr.outcome == "running in ord" and vultr.attempts == 2 and vultr.refusals == {"capacity": 1}
    assert vultr.to_running_s == pytest.approx(120.0) and vultr.to_serving_s is None  # never served
    assert vultr.still_billing and vultr.billed_hours == pytest.approx(4000.0 / 3600)


def test_a_target_refused_everywhere_says_where_it_asked(data_root):
    plan = load_plan(PLAN)
    run = _run(store.run_dir(plan.name, "r2"), plan, vultr_refused=True)
    vultr = next(r for r in rows(plan, run, now=5000.0) if r.provider == "vultr")
    assert vultr.outcome == "refused everywhere (capacity)" and vultr.offers == ("vbm in ewr", "vbm in ord")
    assert vultr.refusals == {"capacity": 2} and vultr.billed_hours is None and vultr.to_running_s is None
    assert summary(vultr)["refused_everywhere"] is True


def test_a_malformed_provisioning_dict_is_read_leniently():
    t = facts.TargetFacts(
        slug="a",
        provision=facts.Provision(
            instance_id="x", launched_at=1.0, provisioning={"attempts": "two", "refusals": {"capacity": -1, "quota": 2}}
        ),
    )
    r = target_row(t, "A", "oci", "BM.GPU.MI300X.8", now=2.0)
    assert r.attempts is None and r.refusals == {"quota": 2} and r.to_running_s is None


def test_the_markdown_report_has_the_section(data_root):
    plan = load_plan(PLAN)
    run = _run(store.run_dir(plan.name, "r3"), plan)
    d = ReportData.__new__(ReportData)  # only the field the section reads
    d.provisioning = rows(plan, run, now=5000.0)
    lines = markdown._provisioning(d)
    assert lines[0] == "## Provisioning"
    vultr = next(line for line in lines if "| vultr |" in line)
    assert "1 capacity" in vultr and "| 120 |" in vultr and "(still billing)" in vultr
    d.provisioning = []
    assert markdown._provisioning(d) == []


def _dash_run(i: int, provs: list[dict]) -> Run:
    targets = {f"t{j}": {"name": f"t{j}", "workloads": {}, "provisioning": p} for j, p in enumerate(provs)}
    doc = {"plan": "p", "run_id": f"r{i}", "started_at": 1.8e9 + i * 86400, "dashboard": {"targets": targets}}
    return Run(f"p/r{i}", doc)


def test_the_trend_counts_stockouts_per_cloud_and_instance_type():
    ok = {"provider": "aws", "instance_type": "p6", "refusals": {}, "refused_everywhere": False}
    tight = {"provider": "vultr", "instance_type": "mi355x", "refusals": {"capacity": 1}, "refused_everywhere": False}
    none = {"provider": "vultr", "instance_type": "mi355x", "refusals": {"capacity": 3}, "refused_everywhere": True}
    runs = [_dash_run(0, [ok, tight]), _dash_run(1, [ok, none]), _dash_run(2, [ok]), _dash_run(3, [])]
    out = stockout_trend(runs)
    table = {(r["cloud"], r["instance_type"]): r for r in out["rows"]}
    assert table["vultr", "mi355x"] | {"last_no_node": None} == {
        "cloud": "vultr",
        "instance_type": "mi355x",
        "runs": 2,
        "refused_runs": 2,
        "no_node_runs": 1,
        "refusals": 4,
        "last_no_node": None,
    }
    assert table["aws", "p6"]["refusals"] == 0 and table["aws", "p6"]["runs"] == 3
    series = {s["label"]: s["data"] for s in out["chart"]["datasets"]}
    assert series["vultr"] == [{"x": 0, "y": 1}, {"x": 1, "y": 3}]  # runs without a record are no zero
    assert stockout_trend([_dash_run(0, [])]) == {"chart": None, "rows": []}  # older runs: no section


def test_the_trend_page_shows_the_stockout_table():
    none = {"provider": "vultr", "instance_type": "vbm-mi355x", "refusals": {"capacity": 2}, "refused_everywhere": True}
    runs = [_dash_run(0, [none])]
    page = trend_page(runs, {})
    assert page["stockouts"][0]["no_node_runs"] == 1
    assert any(c["id"] == "trend-stockouts" for c in page["charts"])
    html = render("trend", page)
    assert "<h2>Stockouts</h2>" in html and "vbm-mi355x" in html


def test_the_clouds_refusal_text_never_reaches_the_report_or_the_dashboard(data_root):
    plan = load_plan(PLAN)
    rdir = store.run_dir(plan.name, "r4")
    _run(rdir, plan)
    slug = next(t.slug for t in plan.targets if t.provider == "vultr")
    planted = "<script>alert(1)</script> echoed api_key=sk-planted"
    refused = facts.ProvisionRefused(at=9999.0, offers=("vbm in ewr",), error=planted)
    store.record(rdir, refused.STEP, refused.to_json(), slug=slug)
    got = rows(plan, store.run_facts(rdir), now=10000.0)
    d = ReportData.__new__(ReportData)
    d.provisioning = got
    shown = "\n".join(markdown._provisioning(d)) + repr([summary(r) for r in got])
    assert "refused everywhere (capacity)" in shown and "sk-planted" not in shown and "<script>" not in shown
