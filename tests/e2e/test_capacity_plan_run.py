"""Capacity at SLO tiers and energy per token end to end on the local provider: the shipped local-capacity
plan (three tiers, a request workload and a session workload, two emulated nodes) passes `plan check`, runs
through `bakeoff run`, and its report carries the capacity table per tier and target, EMULATED, with the
searches' steps, and per-watt rows whose energy was read through the emulated NVML/amdsmi."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd

from bakeoff.plan import plans_dir
from tests.conftest import ROOT


def _bakeoff(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bakeoff", *args], env=env, capture_output=True, text=True, timeout=900
    )


def test_local_capacity_plan_reports_capacity_per_tier_and_measured_energy(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAKEOFF")}
    env |= {"BAKEOFF_DATA": str(tmp_path / "data"), "BAKEOFF_LOCAL_STATE": str(tmp_path / "local")}
    env["PYTHONPATH"] = str(ROOT / "include")
    plan = plans_dir() / "local-capacity.yaml"
    check = _bakeoff(["plan", "check", str(plan)], env)
    assert check.returncode == 0, check.stdout + check.stderr
    res = _bakeoff(["run", "--plan", str(plan)], env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (rdir,) = (tmp_path / "data" / "reports" / "local-capacity").glob("run_id=*")

    (cap_csv,) = rdir.glob("*-capacity.csv")
    cap = pd.read_csv(cap_csv)
    # three tiers x two targets x two workloads, the plan's tier order, all EMULATED
    assert len(cap) == 12 and set(cap["figures"]) == {"EMULATED"}
    assert list(dict.fromkeys(cap["tier"])) == ["interactive", "standard", "batch"]
    assert set(cap["over"]) == {"concurrency", "sessions"}
    # a looser tier never sustains less than a stricter one, over the same shared points
    for (_, _), g in cap.groupby(["workload", "target"]):
        best = g.set_index("tier")["capacity"].fillna(0)
        assert best["interactive"] <= best["standard"] <= best["batch"]
    met = cap[cap["capacity"].notna()]
    assert not met.empty and (met["per_gpu"] > 0).all() and (met["per_usd_per_hour"] > 0).all()
    assert met["steps"].str.contains(" ok").all()
    assert met["energy_source"].str.startswith("measured").all()  # the emulated library's counters

    (watt_csv,) = rdir.glob("*-per-watt.csv")
    watts = pd.read_csv(watt_csv)
    assert set(watts["figures"]) == {"EMULATED"} and (watts["output_tokens_per_joule"] > 0).all()
    assert watts["energy_source"].str.contains("measured, energy counters, GPU only").all()
    (points_csv,) = rdir.glob("*-points.csv")
    points = pd.read_csv(points_csv)
    assert set(points["energy_library"]) == {"nvml=EMULATED", "amdsmi=EMULATED"}

    (md,) = rdir.glob("*.md")
    text = md.read_text()
    assert "## Capacity at SLO tiers" in text and "## Per watt" in text and "**EMULATED**" in text

    # the brief carries the capacity per tier and target, and stays within its pages
    (brief,) = rdir.glob("*.pdf")
    info = subprocess.run(["pdfinfo", str(brief)], capture_output=True, text=True, check=True, timeout=60).stdout
    pages = int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))
    assert pages <= 2
    brief_text = subprocess.run(
        ["pdftotext", str(brief), "-"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "Capacity at SLO tiers" in brief_text and "interactive" in brief_text
