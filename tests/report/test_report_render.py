"""The report as people see it: the HTML in headless Chromium, the PDF rasterised by poppler.

Needs Debian's `chromium` and `poppler-utils`; each test is skipped, saying which binary is
missing, where they are not installed.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian package 'chromium' is not installed")
needs_poppler = pytest.mark.skipif(
    not (shutil.which("pdftoppm") and shutil.which("pdftotext")),
    reason="Debian package 'poppler-utils' (pdftoppm, pdftotext) is not installed",
)


def chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """One headless Chromium run with a fresh profile, no network services, console to stderr."""
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=True)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@needs_chromium
def test_console_check_catches_page_errors(tmp_path):
    """The console check below can fail: a page that logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<html><body><script>console.error("boom")</script></body></html>')
    out = chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert any("boom" in line for line in console_lines(out.stderr))


@needs_chromium
def test_html_in_chromium_dom(built, tmp_path):
    url = Path(built["paths"]["html"]).as_uri()
    out = chromium(tmp_path, url, "--dump-dom")
    assert console_lines(out.stderr) == []
    dom = out.stdout
    assert dom.count("<svg") >= 5  # four charts + trend
    assert "<script" not in dom.lower()  # the XSS name stayed text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "EMULATED" in dom


@needs_chromium
def test_html_screenshot_not_blank(built, tmp_path):
    shot = tmp_path / "shot.png"
    out = chromium(
        tmp_path,
        Path(built["paths"]["html"]).as_uri(),
        f"--screenshot={shot}",
        "--window-size=1280,2400",
        "--hide-scrollbars",
    )
    assert console_lines(out.stderr) == []
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2400)
    px = img.resize((320, 600)).getdata()
    non_white = sum(1 for r, g, b in px if r + g + b < 720)
    banner_red = sum(1 for r, g, b in px if r > 150 and g < 40 and b < 40)
    assert non_white > 0.05 * len(px)  # text, tables and charts drew
    assert banner_red > 200  # the EMULATED banner is on screen


@needs_poppler
def test_pdf_pages_and_text(built, tmp_path):
    pdf = built["paths"]["pdf"]
    subprocess.run(["pdftoppm", "-r", "50", "-png", pdf, str(tmp_path / "page")], check=True, timeout=60)
    pages = sorted(tmp_path.glob("page-*.png"))
    assert 1 <= len(pages) <= 2
    for p in pages:
        img = Image.open(p).convert("L")
        assert img.getextrema()[0] < 100  # something dark is printed on every page
    for n in range(1, len(pages) + 1):
        text = subprocess.run(
            ["pdftotext", "-f", str(n), "-l", str(n), "-layout", pdf, "-"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        assert "EMULATED" in text, f"page {n} lacks the EMULATED stamp"
    text = subprocess.run(["pdftotext", pdf, "-"], check=True, capture_output=True, text=True, timeout=60).stdout
    assert "Negotiation brief" in text and "mi355x-vllm is cheapest at the SLO" in text
    assert "break-even" in text.lower() and "×0.5" in text and "30%" in text  # sensitivity table
    assert "Did not pass" in text and "<script>alert(1)</script>" in text  # as literal text in the PDF


@needs_poppler
@pytest.mark.slow
def test_long_brief_stays_within_two_pages_stamped_on_each(tmp_path):
    """Six targets and two workloads push the brief onto a second page; both pages carry EMULATED."""
    import synthetic

    from bakeoff.cost import cost_run
    from bakeoff.plan import plan_from_dict
    from bakeoff.report import build_report

    raw = synthetic.plan_dict(names=tuple(f"target-{i}" for i in range(6)), concurrency=(1, 4, 16))
    raw["workloads"].append({**raw["workloads"][0], "name": "long-8k-1k", "input_len": 8192, "output_len": 1024})
    plan = plan_from_dict(raw)
    rdir = synthetic.make_run(tmp_path / "res", plan, quarantine={"target-5"})
    cost_run(plan, rdir)
    pdf = build_report(plan, rdir, tmp_path / "out")["pdf"]
    info = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True, check=True, timeout=60).stdout
    pages = int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))
    assert pages == 2
    for n in (1, 2):
        text = subprocess.run(
            ["pdftotext", "-f", str(n), "-l", str(n), pdf, "-"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        assert "EMULATED" in text, f"page {n} lacks the EMULATED stamp"
