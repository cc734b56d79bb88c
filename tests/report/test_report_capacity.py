"""The Capacity section: each tier's capacity per GPU, per kW and per USD/hour and the cost there, checked by
hand from a stored search record, in Markdown, HTML and its own CSV, EMULATED stamped."""

from __future__ import annotations

import copy
import math
import shutil
import subprocess

import pytest
import synthetic
from brief_spy import BriefSpy

from bakeoff import store
from bakeoff.cost import ESTIMATED, cost_run
from bakeoff.plan import plan_from_dict
from bakeoff.report import build_report, capacity, html, markdown, pdf
from bakeoff.report.gather import gather

TIERS = {"interactive": {"ttft_p99_ms": 200}, "standard": {"ttft_p99_ms": 1000}, "batch": {"ttft_p99_ms": 10000}}


def _search(best_std, stopped):
    fig = {"gpus": 8, "duration_s": 10.0, "completed": 400, "output_tps_per_gpu": 250.0, "emulated": True}
    return {
        "over": "concurrency",
        "budget": 12,
        "points_measured": 9,
        "max": 256,
        "tiers": {
            "interactive": {
                "best": None,
                "first_failing": 1,
                "stopped_short": False,
                "steps": [{"load": 1, "meets": False}],
                "figures": {},
            },
            "standard": {
                "best": best_std,
                "first_failing": best_std + 1,
                "stopped_short": False,
                "steps": [
                    {"load": 1, "meets": True},
                    {"load": 2, "meets": True},
                    {"load": 4, "meets": False},
                    {"load": 3, "meets": True},
                ],
                "figures": fig | {"power_w_per_gpu": 800.0, "energy_method": "measured, energy counters, GPU only"},
            },
            "batch": {"best": 64, "first_failing": None, "stopped_short": stopped, "steps": [], "figures": fig},
        },
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    raw = synthetic.plan_dict(names=("mi355x-vllm", "b200-vllm"), concurrency=(1, 4))
    raw["slo_tiers"] = TIERS
    plan = plan_from_dict(raw)
    root = tmp_path_factory.mktemp("res")
    rdir = synthetic.make_run(root, plan)
    # only the MI355X target searched (the B200 one stands for a co-located client, which does not yet)
    tdir = store.at(rdir) / "target=mi355x-vllm"
    store.write_json(tdir / f"capacity-{plan.workloads[0].name}.json", _search(3, stopped=True))
    cost_run(plan, rdir)
    return plan, rdir, gather(plan, rdir), root


def test_capacity_rows_by_hand(report):
    _, _, d, _ = report
    rows = {r.tier: r for r in d.capacity}
    assert list(rows) == ["interactive", "standard", "batch"]  # the plan's order
    assert math.isnan(rows["interactive"].best) and capacity.capacity_text(rows["interactive"], str) == "none met"
    std = rows["standard"]
    # 400 requests in 10 s on 8 GPUs: 5 requests/s per GPU; 800 W measured: 6.25 per kW;
    # 8.6 USD per GPU-hour (MI355X list price, utilisation 1): 5 / 8.6 per USD/h
    assert std.per_gpu == pytest.approx(5.0) and std.per_kw == pytest.approx(6.25)
    assert std.per_usd_hour == pytest.approx(5.0 / 8.6)
    assert std.usd_per_m_output == pytest.approx(8.6 / (250.0 * 3600 / 1e6))
    assert std.energy_source == "measured, energy counters, GPU only"
    assert std.steps == "c1 ok, c2 ok, c4 miss, c3 ok" and capacity.capacity_text(std, str) == "≥ 3.0, < 4.0 requests"
    batch = rows["batch"]
    assert batch.energy_source == ESTIMATED and batch.per_kw == pytest.approx(5.0 / 2.65)  # nameplate all-in kW
    text = capacity.capacity_text(batch, str)
    assert text == "≥ 64.0 requests (met at the search's max) — stopped short (budget)"
    assert rows["interactive"].energy_source == ""  # nothing met: no figure to name


@pytest.mark.slow
def test_capacity_in_every_format_and_its_csv(report):
    plan, rdir, d, root = report
    md = markdown.render(d)
    assert "## Capacity at SLO tiers" in md and "mi355x-vllm **EMULATED**" in md
    assert "stopped short" in md and "ran out of its budget of 12 points" in md  # the caveat
    assert "No capacity search was stored for b200-vllm" in md
    page = html.render(d)
    assert 'id="capacity"' in page and "c1 ok, c2 ok, c4 miss, c3 ok" in page
    paths = build_report(plan, rdir, root / "out")
    csv = open(paths["csv_capacity"]).read()
    assert csv.splitlines()[0].startswith("workload,tier,target,figures,over,capacity")
    assert ",standard,mi355x-vllm,EMULATED,concurrency,3.0," in csv


def test_no_tiers_no_section(tmp_path):
    plan = synthetic.make_plan()
    rdir = synthetic.make_run(tmp_path, plan)
    cost_run(plan, rdir)
    d = gather(plan, rdir)
    assert d.capacity == [] and "Capacity at SLO tiers" not in markdown.render(d)


def test_the_brief_has_the_capacity_per_tier_and_target_with_the_cost_there(report):
    _, _, d, _ = report
    brief = BriefSpy(d)
    pdf._capacity(brief, d)
    assert brief.seen[0].startswith("Capacity at SLO tiers")
    head, rows = brief.seen[1]
    assert head == ["workload", "tier", "target", "in flight", "per GPU", "per kW", "per USD/h", "USD there"]
    by_tier = {r[1]: r for r in rows}
    assert list(by_tier) == ["interactive", "standard", "batch"] and all(len(r) == len(head) for r in rows)
    # the same figures as the report's section, by hand above: 5 req/s per GPU, 6.25 per kW, 8.6 USD/GPU-h
    std = by_tier["standard"]
    assert std[:4] == [d.capacity[0].workload, "standard", "mi355x-vllm [EMULATED]", "≥ 3 (< 4)"]
    assert std[4:7] == ["5", "6.25", "0.5814"] and std[7] == f"{8.6 / (250.0 * 3600 / 1e6):.4g} /M out"
    assert by_tier["interactive"][3] == "none met" and by_tier["interactive"][7] == "–"
    assert by_tier["batch"][3] == "≥ 64 (max) *"  # met at the search's max, and the budget ran out first
    assert "measured GPU power" in brief.seen[2] and "a lower bound" in brief.seen[2]
    d_none = copy.copy(d)
    d_none.capacity = []
    empty = BriefSpy(d_none)
    pdf._capacity(empty, d_none)
    assert empty.seen == []  # no tiers searched: no section


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="needs poppler (pdftotext, pdfinfo)")
@pytest.mark.slow
def test_a_capacity_table_too_long_for_the_brief_is_left_to_the_report(report, tmp_path):
    _, _, d, _ = report
    fits, long = copy.copy(d), copy.copy(d)
    long.capacity = d.capacity * 40  # far more rows than two pages hold
    for data, shown in ((fits, True), (long, False)):
        out = pdf.render(data, tmp_path / f"{shown}.pdf")
        info = subprocess.run(["pdfinfo", str(out)], capture_output=True, text=True, check=True, timeout=60).stdout
        assert int(next(ln.split()[-1] for ln in info.splitlines() if ln.startswith("Pages:"))) <= pdf.MAX_PAGES
        text = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True, check=True).stdout
        assert ("Capacity at SLO tiers (the search" in text) is shown
        assert ("left out here to keep the brief to two pages" in text) is not shown
