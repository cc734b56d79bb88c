"""The rack-scale section: a multi-node target's price per GPU- and rack-hour, throughput per GPU and per
rack at the SLO, break-even against the run's 8-GPU node, energy per token, in Markdown and HTML."""

from __future__ import annotations

import math

import pytest
import synthetic

from bakeoff import cost
from bakeoff.cost import cost_run
from bakeoff.plan import plan_from_dict
from bakeoff.report import html, markdown
from bakeoff.report.data import gather

NAMES = ("mi355x-vllm", "b200-pair")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    raw = synthetic.plan_dict(names=NAMES, concurrency=(1, 4))
    raw["targets"][1]["cluster"] = {"nodes": 2, "prefill": {"tp": 8}, "decode": {"tp": 8}}
    plan = plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path_factory.mktemp("res"), plan)
    cost_run(plan, rdir)
    return gather(plan, rdir)


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
