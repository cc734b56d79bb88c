"""The weights line per target (checkpoint, source, size, download and load time) in the HTML, Markdown
and PDF, a failed download in the support matrix as its own kind, and no hub token anywhere."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import synthetic

from bakeoff import store
from bakeoff.report import build_report
from bakeoff.report.data import fmt, weights_line

TOKEN = "hf_" + "NotInAnyReport" * 3
LINE = "Weights: zai-org/GLM-5.2-FP8 from mirror, 755.0 GB, download 412.5 s, load 96.25 s"
TAIL = "(excluded from benchmark time, included in evaluation cost: "


@pytest.fixture(scope="module")
def weights_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("weights")
    plan = synthetic.make_plan()
    rdir = synthetic.make_run(tmp / "res", plan)
    ok = {
        "checkpoint": "zai-org/GLM-5.2-FP8",
        "source": "mirror",
        "bytes": 755_000_000_000,
        "download_s": 412.5,
        "load_s": 96.25,
        "ok": True,
        "failure": None,
        "missing": [],
    }
    store.write_json(rdir / "target=mi355x-vllm" / "deploy.json", {"ready": True, "failure": None, "weights": ok})
    broken = {**ok, "source": "hub", "ok": False, "failure": "weights_incomplete", "load_s": None}
    broken["missing"] = ["model-00002-of-00002.safetensors"]
    store.write_json(
        rdir / "target=b200-vllm" / "deploy.json",
        {
            "ready": False,
            "failure": "weights_incomplete",
            "detail": "bakeoff: weights_incomplete: lacks",
            "weights": broken,
        },
    )
    return {**build_report(plan, rdir, tmp / "out"), "plan": plan}


def test_html_and_markdown_show_the_weights_line(weights_report):
    html = Path(weights_report["html"]).read_text()
    md = Path(weights_report["markdown"]).read_text().replace("\\_", "_")  # Markdown escapes underscores
    for text in (html, md):
        assert f"EMULATED: {LINE} {TAIL}" in text  # an emulated target's line is stamped EMULATED
        # its share of the measured evaluation cost: (412.5 + 96.25) s at the node's price
        usd = (412.5 + 96.25) / 3600 * weights_report["plan"].targets[0].usd_per_hour
        assert f"{TAIL}{fmt(usd)} USD)" in text
        assert "EMULATED: Weights: zai-org/GLM-5.2-FP8 from hub" in text
        assert "FAILED: weights_incomplete (missing model-00002-of-00002.safetensors)" in text
        assert TOKEN not in text


def test_support_matrix_names_the_weights_failure(weights_report):
    html = Path(weights_report["html"]).read_text()
    support = html[html.index('id="support"') : html.index('id="validation"')]
    assert "weights_incomplete" in support


@pytest.mark.skipif(not shutil.which("pdftotext"), reason="Debian package 'poppler-utils' (pdftotext) is not installed")
def test_pdf_brief_shows_the_weights_line(weights_report):
    text = subprocess.run(
        ["pdftotext", weights_report["pdf"], "-"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    flat = " ".join(text.split())
    assert "from mirror, 755.0 GB, download 412.5 s, load 96.25 s" in flat and "excluded from benchmark time" in flat


def test_a_weights_record_without_a_failure_key_reads_as_a_success():
    """Sandbox and older nodes leave the key out when nothing failed."""
    line = weights_line({"checkpoint": "amd/GLM-5.2-MXFP4", "source": "hub", "bytes": 4.2e11, "download_s": 10.0})
    assert "amd/GLM-5.2-MXFP4 from hub, 420.0 GB" in line and "FAILED" not in line
    failed = weights_line({"checkpoint": "c", "failure": "weights_incomplete", "missing": ["a.safetensors"]})
    assert failed.endswith("; FAILED: weights_incomplete (missing a.safetensors)")
