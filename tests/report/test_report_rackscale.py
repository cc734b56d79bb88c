"""The rack-scale section: a multi-node target's price per GPU- and rack-hour, throughput per GPU and per
rack at the SLO, break-even against the run's 8-GPU node, energy per token, in Markdown, HTML, the PDF
brief and its own CSV, EMULATED stamped in each."""

from __future__ import annotations

import copy
import dataclasses
import io
import math

import pandas as pd
import pytest
import synthetic
from brief_spy import BriefSpy

from bakeoff import cost
from bakeoff.cost import cost_run
from bakeoff.plan import plan_from_dict
from bakeoff.report import build_report, csvsafe, html, markdown, pdf, rackscale
from bakeoff.report.gather import gather

NAMES = ("mi355x-vllm", "b200-pair")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    raw = synthetic.plan_dict(names=NAMES, concurrency=(1, 4))
    raw["targets"][1]["cluster"] = {"nodes": 2, "prefill": {"tp": 8}, "decode": {"tp": 8}}
    plan = plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path_factory.mktemp("res"), plan)
    cost_run(plan, rdir)
    d = gather(plan, rdir)
    d.run_dir = rdir  # type: ignore[attr-defined]  # for the one test that builds the files
    return d


def test_a_cluster_gets_its_rack_figures_and_its_break_even_against_the_8_gpu_node(report):
    (r,) = report.rack_scale
    at = report.tables.at_slo.set_index("target")
    mine, base = at.loc["b200-pair"], at.loc["mi355x-vllm"]
    assert (r.name, r.nodes, r.gpus, r.baseline) == ("b200-pair", 2, 16, "mi355x-vllm")
    assert r.shape == "2 nodes of 8 GPUs, KV nixl (over the NICs)" and r.emulated
    # the B200 node's list price (OCI, 112 USD/h) per GPU, per 72-GPU rack and for both nodes
    assert (r.usd_per_gpu_hour, r.usd_per_rack_hour, r.usd_per_target_hour) == (14.0, 14.0 * 72, 224.0)
    assert r.output_tps_per_gpu == pytest.approx(mine["output_tps_per_gpu"])
    assert r.output_tps_per_rack == pytest.approx(mine["output_tps_per_gpu"] * cost.RACK_GPUS)
    col = f"usd_per_m_{report.basis}"
    assert r.usd_per_m == pytest.approx(mine[col]) and r.baseline_usd_per_m == pytest.approx(base[col])
    # the GPU-hour price at which the pair costs what the MI355X node does per million tokens
    assert r.break_even_usd_per_gpu_hour == pytest.approx(14.0 * base[col] / mine[col])
    assert r.joules_per_output_token == pytest.approx(mine["kw_per_gpu"] * 1000 / mine["output_tps_per_gpu"])
    assert r.energy_source.startswith("estimated")


def test_markdown_and_html_show_the_section_stamped_emulated(report):
    md = markdown.render(report)
    part = md[md.index("## Rack scale") :]
    row = next(line for line in part.splitlines() if line.startswith("| chat-1k-128 | b200-pair"))
    assert "**EMULATED**" in row and "| 16 | 14 | 1,008 | 224 |" in row and "mi355x-vllm" in row
    page = html.render(report)
    sec = page[page.index('<h2 id="rack-scale">') :]
    assert 'b200-pair <span class="emu">EMULATED</span>' in sec[: sec.index("</table>")]
    assert any(c.startswith("Rack scale: a rack is 72 GPUs") for c in report.caveats)


def test_no_cluster_no_section_and_a_cluster_without_an_slo_point_has_no_figures(report, tmp_path):
    plan = synthetic.make_plan(names=NAMES, concurrency=(1,))
    rdir = synthetic.make_run(tmp_path, plan)
    cost_run(plan, rdir)
    d = gather(plan, rdir)
    assert d.rack_scale == [] and "## Rack scale" not in markdown.render(d) and 'id="rack-scale"' not in html.render(d)
    from bakeoff.report.rackscale import rows

    at = report.tables.at_slo.copy()
    at.loc[at["target"] == "b200-pair", "slo_met"] = False
    (r,) = rows(report.plan, at, report.basis)
    assert math.isnan(r.output_tps_per_gpu) and math.isnan(r.break_even_usd_per_gpu_hour) and r.energy_source == ""
    assert r.usd_per_rack_hour == 14.0 * 72  # the price stands; nothing was served at the SLO


def test_the_brief_has_the_rack_scale_table_stamped_emulated_where_the_target_is(report):
    (r,) = report.rack_scale
    brief = BriefSpy(report)
    pdf._rack_scale(brief, report)
    assert brief.seen[0] == "Rack scale"
    head, (row,) = brief.seen[1]
    assert head[:4] == ["workload", "target", "shape", "GPUs billed"] and len(row) == len(head)
    assert row[:5] == ["chat-1k-128", "b200-pair [EMULATED]", r.shape, "16", "14 / 1,008"]
    assert row[7].startswith("mi355x-vllm ") and row[9].endswith("estimated")
    assert brief.seen[2].startswith("A rack is 72 GPUs")
    real = copy.copy(report)
    real.rack_scale = [dataclasses.replace(r, emulated=False)]
    brief = BriefSpy(real)
    pdf._rack_scale(brief, real)
    assert brief.seen[1][1][0][1] == "b200-pair"  # a real target's row carries no stamp
    real.rack_scale, brief.seen = [], []
    pdf._rack_scale(brief, real)
    assert brief.seen == []  # no cluster target: no section


def test_the_report_writes_a_rack_scale_csv_whose_figures_are_the_sections(report, tmp_path):
    (r,) = report.rack_scale
    paths = build_report(report.plan, report.run_dir, tmp_path / "out")
    back = pd.read_csv(paths["csv_rack_scale"])
    assert list(back["target"]) == ["b200-pair"] and list(back["figures"]) == ["EMULATED"]
    assert back["usd_per_rack_hour"][0] == 14.0 * 72 and back["gpus_billed"][0] == 16
    assert back["output_tps_per_gpu"][0] == pytest.approx(r.output_tps_per_gpu)
    assert back["break_even_usd_per_gpu_hour"][0] == pytest.approx(r.break_even_usd_per_gpu_hour)
    assert back["baseline_8gpu_node"][0] == "mi355x-vllm"
    # a name a spreadsheet would run is quoted; a measured row says so
    planted = dataclasses.replace(r, name='=HYPERLINK("http://x")', emulated=False)
    again = pd.read_csv(io.StringIO(csvsafe.to_csv(pd.DataFrame(rackscale.table([planted])))))
    assert again["target"][0].startswith("'=HYPERLINK") and again["figures"][0] == "measured"


def test_the_shape_says_whether_the_recipe_arms_mtp_is_served():
    from bakeoff.report.rackscale import _shape

    def target(**extra):
        raw = synthetic.plan_dict(names=NAMES, concurrency=(1,))
        raw["targets"][1] = {"name": "gb200", "provider": "local", "recipe": "dsr1-fp4-gb200-dynamo-trt", **extra}
        return plan_from_dict(raw).targets[1]

    assert _shape(target(recipe_arm=0)).endswith("(in the NVLink domain), MTP k=3")
    assert _shape(target(recipe_arm=0, speculative=None)).endswith(", MTP in the recipe, not served")
    assert "MTP" not in _shape(target(recipe_arm=5))  # an stp arm
