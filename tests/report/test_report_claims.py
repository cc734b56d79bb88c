"""The "Claim check" section and the mixed-checkpoint note in every format (HTML, Markdown, PDF brief)."""

import shutil
import subprocess
from pathlib import Path

import pytest
import synthetic

from bakeoff.cost import cost_run
from bakeoff.plan import plan_from_dict
from bakeoff.report import build_report

SEED = "glm52-mi355x-wafer"


@pytest.fixture(scope="module")
def claim_report(tmp_path_factory):
    """GLM-5.2 on MI355X (MXFP4) and B200 (NVFP4), emulated, checking the seed claim on a 1k/128 workload:
    every figure is EMULATED and the lengths differ from the claim's, so nothing can be 'reproduced'."""
    raw = synthetic.plan_dict(names=("mi355x-sglang", "b200-sglang"), repeats=2, concurrency=(1, 4, 16))
    for t, quant in zip(raw["targets"], ("mxfp4", "nvfp4"), strict=True):
        t.update(model="glm-5.2", quantization=quant, stack="sglang")
    raw["claims"] = [SEED]
    plan = plan_from_dict(raw)
    root = tmp_path_factory.mktemp("claims")
    rdir = synthetic.make_run(root / "res", plan, jitter=0.02)
    cost_run(plan, rdir)
    paths = build_report(plan, rdir, root / "out")
    return {"plan": plan, "paths": paths}


def test_html_claim_check_section(claim_report):
    html = Path(claim_report["paths"]["html"]).read_text()
    sec = html[html.index('id="claim-check"') : html.index('id="charts"')]
    assert '<a href="#claim-check">Claim check</a>' in html
    assert "wafer.ai, 2026-07-03" in sec and "2,626 tokens/s per node" in sec
    # the cost claim's own basis first, then the like-for-like recomputation, then what the run supports
    basis = sec[sec.index('class="claim-basis"') :].replace("&#39;", "'").replace("&#34;", '"')
    assert "The claim's numbers give 0.82× throughput against B200" in basis
    assert "2.75× price ratio against B300" in basis and "= 0.44× the rival's cost per token" in basis
    assert "At like-for-like prices (same cloud and market, dated) the same throughputs give 0.75–0.99×" in basis
    assert "Not comparable (" in basis and "EMULATED" in basis
    assert 'Published: wafer.ai blog, post "glm52-amd", 2026-07-03' in sec.replace("&#34;", '"')
    assert "MI355X node (8 GPUs): output tokens/s per node" in sec and "B200 node (8 GPUs)" in sec
    assert "cost ratio mi355x-sglang / b200-sglang at the SLO" in sec
    assert sec.count(">not comparable<") == 3 and ">reproduced<" not in sec
    assert "configuration differs in input_len (claimed 20,000, run 1,024)" in sec
    assert "figures are EMULATED" in sec and 'class="emu">EMULATED' in sec
    # bakeoff's figure at the buyer's SLO is shown, stamped
    assert "EMULATED (95% CI" in sec and "concurrency" in sec
    assert "not stated by the claim: tensor parallel (run: TP8)" in sec


def test_checkpoint_note_in_html_and_provenance(claim_report):
    html = Path(claim_report["paths"]["html"]).read_text()
    assert 'id="checkpoints"' in html
    assert "serve different checkpoints of glm-5.2 (amd/GLM-5.2-MXFP4: mi355x-sglang; nvidia/GLM-5.2-NVFP4: " in html
    assert "quarantined, not ranked" in html
    prov = html[html.index('id="provenance"') :]
    assert "glm-5.2 (amd/GLM-5.2-MXFP4" in prov and "glm-5.2 (nvidia/GLM-5.2-NVFP4" in prov


def test_markdown_claim_check(claim_report):
    md = Path(claim_report["paths"]["markdown"]).read_text()
    sec = md[md.index("## Claim check") :]
    assert "wafer.ai, 2026-07-03" in sec and "**EMULATED**" in sec.splitlines()[2]
    assert "**What the cost claim rests on.** The claim's numbers give 0.82× throughput against B200" in sec
    assert "the same throughputs give 0.75–0.99× B200's cost per token, not 0.44×" in sec
    assert sec.count("**not comparable**") == 3
    assert "**Different checkpoints.** These targets serve different checkpoints of glm-5.2" in md


@pytest.mark.skipif(not shutil.which("pdftotext"), reason="Debian package 'poppler-utils' (pdftotext) is not installed")
def test_pdf_brief_claim_check(claim_report):
    pdf = claim_report["paths"]["pdf"]
    text = subprocess.run(["pdftotext", pdf, "-"], check=True, capture_output=True, text=True, timeout=60).stdout
    flat = " ".join(text.split())
    assert "Claim check — EMULATED" in flat and "wafer.ai" in flat and "not comparable" in flat
    assert "Different checkpoints:" in flat
    assert "0.82× throughput against B200" in flat and "like-for-like" in flat
    info = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True, check=True, timeout=60).stdout
    assert int(next(x.split()[-1] for x in info.splitlines() if x.startswith("Pages:"))) <= 2


def test_plan_without_claims_has_no_section(tmp_path):
    plan = synthetic.make_plan()
    rdir = synthetic.make_run(tmp_path / "res", plan)
    cost_run(plan, rdir)
    paths = build_report(plan, rdir, tmp_path / "out")
    html, md = Path(paths["html"]).read_text(), Path(paths["markdown"]).read_text()
    assert 'id="claim-check"' not in html and "Claim check" not in md and 'id="checkpoints"' not in html
