"""Report files: contents, escaping, quarantine, failed targets, trend, CSV."""

import re
from pathlib import Path

import pandas as pd
import pytest
import synthetic
from synthetic import XSS

from bakeoff.cost import cost_run
from bakeoff.plan import plan_from_dict
from bakeoff.report import build_report


def _section(html: str, start_id: str, end_id: str) -> str:
    return html[html.index(f'id="{start_id}"') : html.index(f'id="{end_id}"')]


def test_every_output_written(built):
    p = built["paths"]
    for kind in ("html", "markdown", "pdf", "csv_points", "csv_cost_at_slo", "csv_sensitivity", "parquet"):
        assert Path(p[kind]).stat().st_size > 0, kind
    assert Path(p["pdf"]).read_bytes().startswith(b"%PDF")


def test_plan_strings_are_escaped_in_html(built):
    html = Path(built["paths"]["html"]).read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()  # no script element at all, ours or injected
    assert "onerror=alert(2)>" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<b>bold</b>" not in html


def test_plan_strings_are_escaped_in_markdown(built):
    md = Path(built["paths"]["markdown"]).read_text()
    assert XSS not in md and r"\<script\>alert(1)\</script\>" in md


def test_html_is_self_contained(built):
    html = Path(built["paths"]["html"]).read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "<link" not in html


def test_charts_and_emulated_stamps(built):
    html = Path(built["paths"]["html"]).read_text()
    charts = re.findall(r'<figure class="chart" data-chart="([a-z-]+)"><svg', html)
    assert {"throughput", "cost", "cost-at-slo", "latency", "trend"} <= set(charts)
    assert 'id="emulated-banner"' in html
    # every ranked row and every point row carries the stamp
    ranking = _section(html, "headline", "charts")
    assert ranking.count('class="emu">EMULATED') >= 2
    points = _section(html, "targets", "sensitivity")
    assert points.count('class="emu">EMULATED') == 2 * 5 * 2  # 2 ranked targets x 5 levels x 2 repeats


def test_quarantined_target_only_in_did_not_pass(built):
    html = Path(built["paths"]["html"]).read_text()
    esc = "&lt;script&gt;alert(1)&lt;/script&gt;"
    for start, end in (
        ("headline", "charts"),
        ("charts", "targets"),
        ("targets", "sensitivity"),
        ("sensitivity", "support"),
    ):
        assert esc not in _section(html, start, end), start
    dnp = _section(html, "did-not-pass", "evaluation")
    assert esc in dnp and "did not pass validation" in dnp and "ttft &lt;= e2e" in dnp
    # its measured points are still shown, inside the marked section
    assert dnp.count('<tr><td class="l nw">chat-1k-128</td>') == 5 * 2
    cost_slo = pd.read_csv(built["paths"]["csv_cost_at_slo"])
    assert (
        cost_slo.set_index("target").loc[built["quarantined"], "rank"]
        != cost_slo.set_index("target").loc[built["quarantined"], "rank"]
    )


def test_provenance_and_prices_with_dates(built):
    html = Path(built["paths"]["html"]).read_text()
    prov = _section(html, "provenance", "caveats")
    assert "skypilot-catalog catalogs/v8/oci/vms.csv" in prov and "BM.GPU.MI355X.8" in prov
    assert "InferenceX-app gpu-specs.ts" in prov and "2026-04-30" in prov  # GPU spec source and date


def test_trend_lists_earlier_runs(built):
    html = Path(built["paths"]["html"]).read_text()
    trend = html[html.index('id="trend"') :]
    for run in ("scheduled__2026-07-01", "scheduled__2026-08-01", "scheduled__2026-09-01"):
        assert run in trend


def test_csv_has_every_point_and_cost(built):
    pts = pd.read_csv(built["paths"]["csv_points"])
    assert len(pts) == 3 * 5 * 2
    assert {"usd_per_m_output", "usd_per_m_total", "ttft_ms_p99", "meets_slo", "status"} <= set(pts.columns)
    sens = pd.read_csv(built["paths"]["csv_sensitivity"])
    assert set(sens["dimension"]) == {"price", "utilisation"}


def test_target_without_results_shown_failed(tmp_path):
    plan = synthetic.make_plan(names=("mi355x-vllm", "b200-vllm"))
    rdir = synthetic.make_run(tmp_path / "res", plan, missing={"b200-vllm"}, validation=False)
    cost_run(plan, rdir)
    paths = build_report(plan, rdir, tmp_path / "out")
    html = Path(paths["html"]).read_text()
    dnp = _section(html, "did-not-pass", "evaluation")
    assert "b200-vllm" in dnp and "failed: no results" in dnp
    assert "Validation did not run" in html
    assert "only mi355x-vllm has a cost at the SLO" in html


def test_run_with_no_results_at_all(tmp_path):
    plan = synthetic.make_plan()
    rdir = synthetic.make_run(tmp_path / "res", plan, missing={t.slug for t in plan.targets}, emulated=False)
    paths = build_report(plan, rdir, tmp_path / "out")
    html = Path(paths["html"]).read_text()
    assert "No target has a cost at the SLO" in html
    dnp = _section(html, "did-not-pass", "evaluation")
    for t in plan.targets:
        assert re.search(rf"{t.name}</td><td class=\"l fail\">failed: no results", dnp)
    assert Path(paths["pdf"]).stat().st_size > 0


def test_real_hardware_run_has_no_emulated_stamp(tmp_path):
    raw = synthetic.plan_dict()
    for i, t in enumerate(raw["targets"]):
        t["provider"] = "static"
        t.setdefault("provider_options", {})["base_url"] = f"http://10.0.0.{i + 1}:8000"
    plan = synthetic.plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path / "res", plan, emulated=False)
    paths = build_report(plan, rdir, tmp_path / "out")
    assert "EMULATED" not in Path(paths["html"]).read_text()
    assert "EMULATED" not in Path(paths["markdown"]).read_text()


@pytest.mark.slow
def test_static_target_with_described_hardware_renders_without_invented_figures(tmp_path):
    """A static endpoint described in the plan (no catalog instance): the report shows the description,
    its own price and served model id, and no memory or power figure for a GPU the catalog lacks."""
    raw = synthetic.plan_dict()
    t = raw["targets"][1]
    t.pop("instance_type")
    t.update(
        provider="static",
        provider_options={"base_url": "http://10.0.0.9:8000"},
        served_model="my-llama",
        hardware={"gpu": "RTX 6000 Ada", "gpus": 8, "description": "rack 3"},
        price={"usd_per_hour": 12.0},
    )
    plan = synthetic.plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path / "res", plan, emulated=False)
    paths = build_report(plan, rdir, tmp_path / "out")
    html = Path(paths["html"]).read_text()
    assert "8x RTX 6000 Ada (described in the plan; rack 3)" in html and "static / described in the plan" in html
    assert "served as <code>my-llama</code>" in html and "no power figure (GPU not in the catalog)" in html
    assert not re.search(r"\bnan\b|None", html)
    from bakeoff.cost import compute

    row = compute(plan, rdir).targets.set_index("name").loc[t["name"]]
    assert row["node_usd_per_hour"] == 12.0 and row["usd_per_gpu_hour"] == 1.5
    assert Path(paths["pdf"]).stat().st_size > 0 and "RTX 6000 Ada" in Path(paths["markdown"]).read_text()


def test_provenance_shown_without_secrets(tmp_path):
    plan = synthetic.make_plan()
    rdir = synthetic.make_run(tmp_path / "res", plan)
    from bakeoff import store

    store.write_json(
        rdir / "target=mi355x-vllm" / "provenance.json",
        {
            "driver": "rocm-6.4.1",
            "image_digest": "sha256:abc",
            "api_key": "sk-live-123",
            "auth": {"secret_token": "s3cr3t", "Authorization": "Bearer zzz"},
            "emulator": {"decode_efficiency": 0.61, "mode": "roofline"},
            "engine_args": "--max-num-seqs 256",
            "model": "meta-llama/Llama-3.1-70B-Instruct",
        },
    )
    html = Path(build_report(plan, rdir, tmp_path / "out")["html"]).read_text()
    assert "rocm-6.4.1" in html and "sha256:abc" in html
    for secret in ("sk-live-123", "s3cr3t", "Bearer zzz"):
        assert secret not in html
    # what a reader needs first, in this order; the emulator's own keys folded away below it
    section = html[html.index("<h3>Provenance: mi355x-vllm</h3>") :]
    first, folded = section.split('<details class="raw">', 1)
    kinds = re.findall(r'<tr><td class="l">([a-z ]+)</td><td class="l"><code>', first)
    assert kinds == ["image", "engine args", "model", "driver"]
    assert "decode_efficiency" not in first and "emulator.decode_efficiency" in folded.split("</details>")[0]


def test_mixed_markets_are_called_out(tmp_path):
    raw = synthetic.plan_dict()
    raw["targets"][0].update(provider="vultr", instance_type="vbm-256c-3072gb-8-mi355x-gpu")  # a spot price
    plan = synthetic.plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path / "res", plan)
    md = Path(build_report(plan, rdir, tmp_path / "out")["markdown"]).read_text()
    assert "different markets (mi355x-vllm: spot, b200-vllm: on\\_demand)" in md
    assert "price in force for mi355x-vllm is not" in md


def test_report_shows_what_the_cost_step_stored(built, tmp_path):
    """The report renders the stored cost tables rather than recomputing them."""
    from bakeoff import store

    rdir = built["run_dir"]
    doc = store.read_json(rdir / "cost.json")
    store.write_json(rdir / "cost.json", {**doc, "summary": "stored headline marker 7731"})
    try:
        html = Path(build_report(built["plan"], rdir, tmp_path)["html"]).read_text()
    finally:
        store.write_json(rdir / "cost.json", doc)
    assert "stored headline marker 7731" in html


def test_no_cost_no_single_repeat_caveat_and_quarantined_requests_are_not_called_missing(tmp_path):
    """An SLO no level meets leaves every target without a cost: no caveat about costs' repeats.
    A quarantined target's requests exist: the latency chart says they are held back, not absent."""
    from bakeoff.report import charts
    from bakeoff.report.gather import gather

    plan = synthetic.make_plan(names=("mi355x-vllm", "b200-vllm"), slo={"ttft_p99_ms": 1})
    rdir = synthetic.make_run(tmp_path / "res", plan, quarantine={t.slug for t in plan.targets})
    cost_run(plan, rdir)
    html = Path(build_report(plan, rdir, tmp_path / "out")["html"]).read_text()
    assert "No target has a cost at the SLO" in html and "single repeat" not in html
    fig = charts.latency_distributions(gather(plan, rdir), plan.workloads[0].name)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts and all("did\nnot pass validation" in t for t in texts) and "no request data" not in texts


@pytest.mark.slow
def test_measured_prompt_lengths_are_printed_and_a_gap_is_called_out(tmp_path):
    """Requested and server-measured prompt tokens per target: one on the mark, one as the issue found
    it (128 asked, 350.3 measured), which also gets a caveat."""
    plan = synthetic.make_plan(names=("mi355x-vllm", "b200-vllm"))
    good, bad = (t.slug for t in plan.targets)
    rows = [
        {
            "target": good,
            "concurrency": 1,
            "input_len_requested_mean": 128.0,
            "input_len_measured_mean": 128.0,
            "input_len_error": 0.0,
            "prompt_sizing": "tokenize",
        },
        {
            "target": bad,
            "concurrency": 1,
            "input_len_requested_mean": 128.0,
            "input_len_measured_mean": 350.3,
            "input_len_error": 350.3 / 128 - 1,
            "prompt_sizing": "words",
        },
    ]
    rdir = synthetic.write_points(tmp_path / "res", plan, rows)
    cost_run(plan, rdir)
    paths = build_report(plan, rdir, tmp_path / "out")
    html, md = Path(paths["html"]).read_text(), Path(paths["markdown"]).read_text()
    for text in (html, md):
        assert f"{good}: 128 asked, 128 measured (+0.0%, sized by tokenize)" in text
        assert f"{bad}: 128 asked, 350.3 measured (+173.7%, sized by words)" in text
        assert "off the requested length by more than 2% for " + bad in text


def test_a_pinned_acceptance_target_gets_a_caveat_that_its_answers_are_not_verified(tmp_path):
    raw = synthetic.plan_dict(names=("mi355x-vllm", "b200-vllm"))
    raw["targets"][0]["speculative"] = {
        "method": "eagle3",
        "draft_model": "example/llama-3.1-70b-eagle3",
        "acceptance": "pinned",
        "acceptance_length": 2.5,
    }
    plan = plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path / "res", plan)
    cost_run(plan, rdir)
    html = Path(build_report(plan, rdir, tmp_path / "out")["html"]).read_text()
    assert "Speculative acceptance is pinned (the golden acceptance length) for: mi355x-vllm." in html
    assert "b200-vllm. Their" not in html


def test_emulated_figures_at_a_scaled_time_say_so(tmp_path):
    raw = synthetic.plan_dict(names=("mi355x-vllm", "b200-vllm"))
    for t in raw["targets"]:
        t["emulator"] = {"time_scale": 0.05}
    plan = plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path / "res", plan)
    cost_run(plan, rdir)
    html = Path(build_report(plan, rdir, tmp_path / "out")["html"]).read_text()
    assert "delays scaled (time_scale) for: mi355x-vllm (0.05), b200-vllm (0.05)" in html
