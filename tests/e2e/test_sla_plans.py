"""The buyer's SLA vocabulary end to end on the local provider: a plan with percentile bounds and one
with a per-request SLO and a required share each pass `plan check`, run through `bakeoff run`, and
their report prints the SLA in the plan's words with goodput per point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT

PLANS = Path(__file__).parent / "plans"
WORDS = {
    "local-sla-percentiles": "p95 TTFT ≤ 2,000 ms, p95 E2E ≤ 12,000 ms",
    "local-sla-goodput": "at least 95% of requests with TTFT ≤ 2,000 ms and TPOT ≤ 50 ms (goodput)",
}


def _bakeoff(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bakeoff", *args], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("name", sorted(WORDS))
def test_sla_plan_checks_runs_and_reports_in_the_buyers_words(tmp_path, name):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAKEOFF")}
    env |= {"BAKEOFF_DATA": str(tmp_path / "data"), "BAKEOFF_LOCAL_STATE": str(tmp_path / "local")}
    env["PYTHONPATH"] = str(ROOT / "include")
    plan = PLANS / f"{name}.yaml"
    check = _bakeoff(["plan", "check", str(plan)], env)
    assert check.returncode == 0, check.stdout + check.stderr
    res = _bakeoff(["run", "--plan", str(plan)], env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (rdir,) = (tmp_path / "data" / "reports" / name).glob("run_id=*")
    (md,) = rdir.glob("*.md")
    assert WORDS[name] in md.read_text()
    (html,) = rdir.glob("*.html")
    page = html.read_text()
    assert WORDS[name] in page and "goodput rps (share of requests)" in page
    (points_csv,) = rdir.glob("*-points.csv")
    points = pd.read_csv(points_csv)
    assert len(points) == 2 and points["good_fraction"].between(0, 1).all()
    # every point's share is in its table row, as the report shows it
    assert page.count('class="nw goodput"') == len(points)
