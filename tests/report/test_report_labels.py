"""The report says things the way a procurement reader reads them: labelled columns, not field names; the
accuracy verdict as a sentence; provenance records as text, not a Python dict; every TCO figure with its unit."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bakeoff.report.data import weights_line
from bakeoff.report.labels import accuracy_sentence, label, provenance_value


def test_support_and_tier_columns_have_labels():
    assert label("kv_offload") == "KV offload" and label("gx_failures") == "data check failures"
    assert label("3yr_rental") == "3-year rental" and label("some_new_column") == "some new column"


def test_accuracy_reads_as_a_sentence():
    doc = {"task": "gsm8k", "backend": "builtin", "score": 1, "threshold": 0.95, "passed": True}
    doc |= {"n": 200, "correct": 200, "errors": 0, "mean_output_tokens": 1}
    text = accuracy_sentence(doc)
    assert text == "200 of 200 correct (score 1.00, threshold 0.95, passed), 0 request errors; builtin check on gsm8k"
    assert "=" not in text and "mean_output_tokens" not in text
    assert "FAILED" in accuracy_sentence({**doc, "passed": False, "correct": 150, "score": 0.75})


def test_a_provenance_record_is_text_not_a_python_dict():
    models = [{"created": 1796439789, "id": "deepseek-ai/DeepSeek-V4-Pro", "max_model_len": 1048576, "parent": None}]
    text = provenance_value(models)
    assert "{" not in text and "None" not in text and "'" not in text
    assert text == "created 2026-12-05 03:03 UTC, id deepseek-ai/DeepSeek-V4-Pro, max_model_len 1,048,576"
    assert provenance_value("vllm/vllm-openai:v0.25.0") == "vllm/vllm-openai:v0.25.0"


def test_an_emulated_targets_weights_do_not_read_from_none():
    line = weights_line({"checkpoint": "deepseek-ai/DeepSeek-V4-Pro", "source": "none (emulator)", "bytes": 0})
    assert "from none" not in line and "none downloaded (the emulator serves without weights)" in line


def test_the_html_labels_its_columns_and_units(built):
    html = Path(built["paths"]["html"]).read_text()
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", html)
    assert headers and [h for h in headers if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h.strip())] == []
    tco = html[html.index("public TCO tiers") :]
    tco = tco[: tco.index("</table>")]
    assert "@" not in tco and "USD/GPU-h" in tco and "3-year rental" in tco


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="Debian package 'poppler-utils' is not installed")
def test_the_brief_says_slo_and_leaves_no_stub_page(built):
    pdf = built["paths"]["pdf"]
    pages = subprocess.run(["pdftotext", "-layout", pdf, "-"], capture_output=True, text=True, check=True).stdout
    pages = pages.rstrip("\f").split("\f")
    assert 1 <= len(pages) <= 2 and "SLA" not in "".join(pages) and "Cheapest at the SLO" in pages[0]
    if len(pages) == 2:  # a second page holds more than the header, the footer and a few lines
        assert len([x for x in pages[1].splitlines() if x.strip()]) > 12


def test_a_stub_last_page_is_not_a_fit():
    from bakeoff.report.pdf import STUB_PAGE, _fits

    class Laid:
        h = 297.0

        def __init__(self, pages: int, y: float):
            self.pages, self.y = pages, y

        def page_no(self) -> int:
            return self.pages

        def get_y(self) -> float:
            return self.y

    assert _fits(Laid(1, 40)) and _fits(Laid(2, 297 * STUB_PAGE + 1))
    assert not _fits(Laid(2, 40)) and not _fits(Laid(3, 200))


def test_report_charts_colour_a_target_by_its_gpu_as_the_dashboard_does(built):
    from types import SimpleNamespace

    from bakeoff.report.charts import colours
    from bakeoff.report.colours import GPU_COLOURS

    plan = built["plan"]  # mi355x, b200 and an XSS-named h200 target
    col = colours(SimpleNamespace(plan=plan))
    assert [col[t.slug] for t in plan.targets] == [GPU_COLOURS[t.gpu.name] for t in plan.targets]
    assert len(set(col.values())) == len(plan.targets)
